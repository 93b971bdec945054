// A build without MPI (FP8LM_MPI=OFF, or libopenmpi-dev missing): one process only.
#include "dist/mpi_world.h"
#include "fp8lm/error.h"

namespace fp8lm {

bool mpi_built() {
  return false;
}

std::string mpi_library_version() {
  return "";
}

std::unique_ptr<Communicator> make_mpi_world() {
  throw Error("this fp8lm was built without MPI");
}

}  // namespace fp8lm
