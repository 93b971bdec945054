#pragma once
// The processes of a data-parallel run and the collectives between them, over an existing
// engine (MPI for processes and host buffers; NCCL for GPU buffers comes later). One process,
// as without mpirun, is a world of one whose collectives do nothing.
//
// A launch by mpirun is recognized from the launcher's environment (Open MPI's
// OMPI_COMM_WORLD_SIZE, MPICH/Hydra's PMI_SIZE), so a single process never starts MPI at all,
// and a build without MPI refuses a multi-rank launch rather than running N copies of the
// same single-process run side by side.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/bf16.h"

namespace fp8lm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's buffers combined element-wise, the result on every rank (in place). `what`
  // names the collective ("gradient all-reduce") for the error when it does not complete.
  virtual void all_reduce_sum(std::span<float> values, std::string_view what) = 0;
  virtual void all_reduce_sum(std::span<double> values, std::string_view what) = 0;
  virtual void all_reduce_max(std::span<float> values, std::string_view what) = 0;
  // An all-reduce (sum) started and left running: the buffer is the collective's until
  // wait_all(). Backward starts a bucket of gradients as soon as they are final and computes
  // on while it travels. Blocking and started collectives alike go in the same order on every
  // rank. BF16 values are summed in FP32 and rounded back at every hop (as NCCL's BF16 sum
  // does): half the bytes of FP32, and the same result on every rank.
  virtual void start_all_reduce_sum(std::span<float> values, std::string_view what) = 0;
  virtual void start_all_reduce_sum(std::span<bf16_t> values, std::string_view what) = 0;
  // Lets the started collectives move without waiting for them (MPI moves a non-blocking
  // collective only inside its own calls): called between pieces of computation.
  virtual void progress() = 0;
  // Waits until every started collective has completed (the timeout counts from this call).
  virtual void wait_all() = 0;
  // Segmented collectives over a buffer of every rank's segments in rank order (rank r's holds
  // counts[r] values): ZeRO-1's gradient reduce-scatter (this rank's segment of the sum, into
  // `mine`), its weight all-gather (in place: every rank's segment from that rank), and the
  // optimizer state gathered on rank 0 for a checkpoint (`all` is only written on rank 0).
  virtual void reduce_scatter_sum(std::span<const float> all, std::span<float> mine,
                                  std::span<const int> counts, std::string_view what) = 0;
  virtual void reduce_scatter_sum(std::span<const bf16_t> all, std::span<bf16_t> mine,
                                  std::span<const int> counts, std::string_view what) = 0;
  virtual void all_gather(std::span<float> all, std::span<const int> counts,
                          std::string_view what) = 0;
  // The same over bytes (counts in bytes): ZeRO-1's FP8 weight all-gather.
  virtual void all_gather(std::span<uint8_t> all, std::span<const int> counts,
                          std::string_view what) = 0;
  virtual void gather_to_first(std::span<const float> mine, std::span<float> all,
                               std::span<const int> counts, std::string_view what) = 0;
  // A collective that has not completed after this many seconds (a rank died or hangs) ends
  // in an Error naming it and the ranks that did not join; 0 waits forever.
  virtual void set_timeout(double seconds) = 0;
  virtual double timeout() const = 0;
  // What the collectives so far cost this rank: seconds it waited on them (inside a blocking
  // one or wait_all(), the others' lateness included; a started collective's time in flight
  // while the rank computed is not counted: that part is hidden) and the bytes of the buffers
  // it reduced.
  struct Traffic {
    double seconds = 0;
    uint64_t bytes = 0;
  };
  virtual Traffic traffic() const = 0;
  // Ends every rank now with this exit code: what a rank that fails does, so that none waits
  // forever in a collective the failed one will never join.
  virtual void abort(int code) = 0;
  // "mpi (Open MPI v4.1.4)", "single process".
  virtual std::string describe() const = 0;
};

// The default of --collective-timeout: longer than any step or checkpoint write of the models
// this engine trains, short enough that a hung run is noticed the same coffee break.
inline constexpr double kDefaultCollectiveTimeout = 300;

// How this process was launched: by mpirun as one of `size` ranks, or alone (size 1).
struct Launch {
  int rank = 0, size = 1;
  int local_rank = 0;    // among the ranks on this machine
  std::string launcher;  // "Open MPI", "MPICH (Hydra)"; empty when alone
};
Launch detect_launch();

// Whether this build has MPI, and which (for doctor).
bool mpi_built();
std::string mpi_library_version();

// This process's world: MPI_COMM_WORLD when launched by mpirun (MPI is initialized on the
// first call and finalized at exit), else a world of one. Error when launched as one of
// several ranks by a build without MPI.
Communicator& world();
// A world of one, whatever the launch: for a run that is to stay within its process (a test's
// single-process reference beside a data-parallel run).
Communicator& single_process();
// For a process ending on an error: when world() spans several ranks, aborts them all with
// this code (does not return); otherwise does nothing.
void abort_world_on_error(int code);

}  // namespace fp8lm
