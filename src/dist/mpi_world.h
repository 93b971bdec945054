#pragma once
// MPI_COMM_WORLD as a Communicator (dist/mpi_world.cpp), or its stand-in in a build without MPI
// (dist/mpi_world_stub.cpp).
#include <memory>

#include "dist/communicator.h"

namespace fp8lm {

// Initializes MPI (finalized at exit); only called when mpirun launched this process.
std::unique_ptr<Communicator> make_mpi_world();

}  // namespace fp8lm
