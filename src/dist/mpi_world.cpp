// MPI_COMM_WORLD as a Communicator: the collectives run on host buffers.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

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

using Clock = std::chrono::steady_clock;

// MPI has no BF16 type: BF16 values travel as 16-bit integers and this operation sums them,
// in FP32 and rounded back to BF16 at every hop.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16_t*>(in);
  auto* b = static_cast<bf16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16_from_float(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// A rank whose collective timed out tells rank 0 it is there, on this tag; rank 0 names the
// ranks that did not.
constexpr int kPresentTag = 0x7f8;

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int provided = 0;
    // Only the main thread calls MPI (OpenMP threads compute between the calls).
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check(MPI_Op_create(&bf16_sum, 1, &bf16_sum_), "MPI_Op_create");
  }
  ~MpiWorld() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&bf16_sum_);
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::span<float> v, std::string_view what) override {
    reduce(v, MPI_FLOAT, MPI_SUM, what);
  }
  void all_reduce_sum(std::span<double> v, std::string_view what) override {
    reduce(v, MPI_DOUBLE, MPI_SUM, what);
  }
  void all_reduce_max(std::span<float> v, std::string_view what) override {
    reduce(v, MPI_FLOAT, MPI_MAX, what);
  }
  void start_all_reduce_sum(std::span<float> v, std::string_view what) override {
    start_reduce(v, MPI_FLOAT, MPI_SUM, what);
  }
  void start_all_reduce_sum(std::span<bf16_t> v, std::string_view what) override {
    start_reduce(v, MPI_UINT16_T, bf16_sum_, what);
  }
  void progress() override {
    const Clock::time_point start = Clock::now();
    for (Started& s : started_) {
      int done = 0;
      check(MPI_Test(&s.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
    traffic_.seconds += seconds_since(start);
  }
  void wait_all() override {
    const Clock::time_point start = Clock::now();
    for (Started& s : started_) wait(s.request, start, s.what);
    started_.clear();
    traffic_.seconds += seconds_since(start);
  }
  void reduce_scatter_sum(std::span<const float> all, std::span<float> mine,
                          std::span<const int> counts, std::string_view what) override {
    run(what, all.size_bytes(), [&](MPI_Request* r) {
      return MPI_Ireduce_scatter(all.data(), mine.data(), counts.data(), MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD, r);
    });
  }
  void reduce_scatter_sum(std::span<const bf16_t> all, std::span<bf16_t> mine,
                          std::span<const int> counts, std::string_view what) override {
    run(what, all.size_bytes(), [&](MPI_Request* r) {
      return MPI_Ireduce_scatter(all.data(), mine.data(), counts.data(), MPI_UINT16_T, bf16_sum_,
                                 MPI_COMM_WORLD, r);
    });
  }
  void all_gather(std::span<float> all, std::span<const int> counts,
                  std::string_view what) override {
    gather_all(all, MPI_FLOAT, counts, what);
  }
  void all_gather(std::span<uint8_t> all, std::span<const int> counts,
                  std::string_view what) override {
    gather_all(all, MPI_BYTE, counts, what);
  }
  void gather_to_first(std::span<const float> mine, std::span<float> all,
                       std::span<const int> counts, std::string_view what) override {
    const std::vector<int> at = offsets(counts);
    run(what, all.size_bytes(), [&](MPI_Request* r) {
      return MPI_Igatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(),
                          counts.data(), at.data(), MPI_FLOAT, 0, MPI_COMM_WORLD, r);
    });
  }
  void set_timeout(double seconds) override { timeout_ = seconds; }
  double timeout() const override { return timeout_; }
  Traffic traffic() const override { return traffic_; }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }
  std::string describe() const override {
    return fmt::format("mpi, rank {} of {} ({})", rank_, size_, mpi_library_version());
  }

 private:
  template <class T>
  void reduce(std::span<T> v, MPI_Datatype type, MPI_Op op, std::string_view what) {
    // MPI counts are ints: a larger buffer goes in pieces.
    for (size_t at = 0; at < v.size(); at += INT_MAX) {
      const size_t n = std::min<size_t>(INT_MAX, v.size() - at);
      run(what, n * sizeof(T), [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, v.data() + at, static_cast<int>(n), type, op,
                              MPI_COMM_WORLD, r);
      });
    }
  }
  template <class T>
  void start_reduce(std::span<T> v, MPI_Datatype type, MPI_Op op, std::string_view what) {
    const Clock::time_point start = Clock::now();
    for (size_t at = 0; at < v.size(); at += INT_MAX) {
      const size_t n = std::min<size_t>(INT_MAX, v.size() - at);
      Started& s = started_.emplace_back(Started{MPI_REQUEST_NULL, std::string(what)});
      check(MPI_Iallreduce(MPI_IN_PLACE, v.data() + at, static_cast<int>(n), type, op,
                           MPI_COMM_WORLD, &s.request),
            "starting the collective");
      traffic_.bytes += n * sizeof(T);
    }
    traffic_.seconds += seconds_since(start);
  }

  template <class T>
  void gather_all(std::span<T> all, MPI_Datatype type, std::span<const int> counts,
                  std::string_view what) {
    const std::vector<int> at = offsets(counts);
    run(what, all.size_bytes(), [&](MPI_Request* r) {
      return MPI_Iallgatherv(MPI_IN_PLACE, 0, type, all.data(), counts.data(), at.data(), type,
                             MPI_COMM_WORLD, r);
    });
  }

  // Starts a non-blocking collective and waits for it, counting its time and bytes.
  template <class Start>
  void run(std::string_view what, size_t bytes, Start start_collective) {
    const Clock::time_point start = Clock::now();
    MPI_Request request = MPI_REQUEST_NULL;
    check(start_collective(&request), "starting the collective");
    wait(request, start, what);
    traffic_.seconds += seconds_since(start);
    traffic_.bytes += bytes;
  }

  // Where each rank's segment starts (counts are in elements, as are the offsets).
  static std::vector<int> offsets(std::span<const int> counts) {
    std::vector<int> at(counts.size(), 0);
    for (size_t r = 1; r < counts.size(); ++r) at[r] = at[r - 1] + counts[r - 1];
    return at;
  }

  // Polls the collective (its progress happens in MPI_Test), yielding the core between polls
  // to the ranks and threads that share it, until it completes or the timeout passes.
  void wait(MPI_Request& request, Clock::time_point start, std::string_view what) {
    for (uint64_t poll = 0;; ++poll) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (timeout_ > 0 && poll % 64 == 63 && seconds_since(start) > timeout_) timed_out(what);
      sched_yield();
    }
  }

  // The collective will not complete: some rank never joined it. The ranks still running time
  // out too and tell rank 0 they are there; rank 0 names the others. A rank that hears nothing
  // from rank 0 for a grace period after its own timeout blames rank 0. The Error ends the
  // run (abort_world_on_error), every rank with it.
  [[noreturn]] void timed_out(std::string_view what) {
    const std::string waited = fmt::format("the {} did not complete in {:g} s", what, timeout_);
    // Ranks entered the collective up to a step (or rank 0's checkpoint write) apart.
    const double grace = std::min(30.0, timeout_);
    const Clock::time_point start = Clock::now();
    if (rank_ != 0) {
      int present = 1;
      MPI_Request sent = MPI_REQUEST_NULL;
      MPI_Isend(&present, 1, MPI_INT, 0, kPresentTag, MPI_COMM_WORLD, &sent);
      while (seconds_since(start) < grace) {  // rank 0 ends the run meanwhile, if it can
        int done = 0;
        MPI_Test(&sent, &done, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      throw Error(
          fmt::format("{}, and rank 0 did not end the run in {:g} s more: rank 0 is dead "
                      "or hung",
                      waited, grace));
    }
    std::vector<bool> present(static_cast<size_t>(size_), false);
    present[0] = true;
    while (std::count(present.begin(), present.end(), false) > 0 && seconds_since(start) < grace) {
      int arrived = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kPresentTag, MPI_COMM_WORLD, &arrived, &status);
      if (!arrived) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      int value = 0;
      MPI_Recv(&value, 1, MPI_INT, status.MPI_SOURCE, kPresentTag, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      present[static_cast<size_t>(status.MPI_SOURCE)] = true;
    }
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r)
      if (!present[static_cast<size_t>(r)]) missing.push_back(r);
    if (missing.empty())
      throw Error(fmt::format("{}, though every rank is running: they are out of step", waited));
    throw Error(fmt::format("{}: rank{} {} never joined it (dead or hung)", waited,
                            missing.size() == 1 ? "" : "s", fmt::join(missing, ", ")));
  }

  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  int rank_ = 0, size_ = 1;
  double timeout_ = kDefaultCollectiveTimeout;
  Traffic traffic_;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  // Collectives started and not yet waited for, in the order they were started.
  struct Started {
    MPI_Request request;
    std::string what;
  };
  std::vector<Started> started_;
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
