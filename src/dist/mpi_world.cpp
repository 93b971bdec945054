// MPI_COMM_WORLD as a Communicator: the collectives run on host buffers.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>

#include "dist/mpi_world.h"
#include "fp8lm/error.h"

namespace fp8lm {

namespace {

// An MPI call's error as a one-line Error naming the call (MPI_ERRORS_RETURN is set, so a
// failed collective comes back here instead of aborting without a word).
void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw Error(fmt::format("{} failed: {}", what, std::string(text, static_cast<size_t>(len))));
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int provided = 0;
    // Only the main thread calls MPI (OpenMP threads compute between the calls).
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiWorld() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::span<float> v) override { reduce(v, MPI_FLOAT, MPI_SUM); }
  void all_reduce_sum(std::span<double> v) override { reduce(v, MPI_DOUBLE, MPI_SUM); }
  void all_reduce_max(std::span<float> v) override { reduce(v, MPI_FLOAT, MPI_MAX); }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }
  std::string describe() const override {
    return fmt::format("mpi, rank {} of {} ({})", rank_, size_, mpi_library_version());
  }

 private:
  template <class T>
  void reduce(std::span<T> v, MPI_Datatype type, MPI_Op op) {
    // MPI counts are ints: a larger buffer goes in pieces.
    for (size_t at = 0; at < v.size(); at += INT_MAX) {
      const int n = static_cast<int>(std::min<size_t>(INT_MAX, v.size() - at));
      check(MPI_Allreduce(MPI_IN_PLACE, v.data() + at, n, type, op, MPI_COMM_WORLD),
            "MPI_Allreduce");
    }
  }
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool mpi_built() {
  return true;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, static_cast<size_t>(len));
  v = v.substr(0, v.find_first_of(",\n"));  // "Open MPI v4.1.4, package: ..." -> its name
  return v;
}

std::unique_ptr<Communicator> make_mpi_world() {
  return std::make_unique<MpiWorld>();
}

}  // namespace fp8lm
