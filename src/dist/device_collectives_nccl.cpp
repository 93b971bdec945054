// NCCL between the ranks' GPUs (dist/device_collectives.h).
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <vector>

#include "dist/device_collectives.h"
#include "fp8lm/error.h"
#include "kernels/cuda/cuda_check.h"

namespace fp8lm {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(Communicator& host, int device) : host_(host), device_(device) {
    FP8LM_CUDA_CHECK(cudaSetDevice(device));
    // Rank 0's unique id to every rank over the host world: an all-gather to which only rank 0
    // brings bytes.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (host.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<uint8_t> bytes(sizeof id);
    std::memcpy(bytes.data(), &id, sizeof id);
    std::vector<int> counts(static_cast<size_t>(host.size()), 0);
    counts[0] = static_cast<int>(sizeof id);
    host.all_gather(std::span(bytes), counts, "NCCL unique id broadcast");
    std::memcpy(&id, bytes.data(), sizeof id);
    check(ncclCommInitRank(&comm_, host.size(), id, host.rank()), "ncclCommInitRank");
    // Non-blocking: the legacy default stream the backend computes on does not wait for it.
    FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FP8LM_CUDA_CHECK(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming));
    FP8LM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclCollectives() override {
    cudaSetDevice(device_);  // the communicator's and its stream's device
    // ncclCommDestroy finalizes: it waits for every operation issued on the communicator, and
    // one that a dead or departed peer never joins never ends. With collectives in flight, or
    // while an exception unwinds (a collective failed or timed out), abort instead.
    if (comm_ && (!started_.empty() || std::uncaught_exceptions() > 0)) {
      abort_communicator();
    } else if (comm_) {
      ncclCommDestroy(comm_);
    }
    if (done_) cudaEventDestroy(done_);
    if (queued_) cudaEventDestroy(queued_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void start_all_reduce_sum(float* values, size_t n, std::string_view what) override {
    start(values, n, ncclFloat32, what);
  }
  void start_all_reduce_sum(bf16_t* values, size_t n, std::string_view what) override {
    start(values, n, ncclBfloat16, what);
  }

  void wait_all() override {
    if (started_.empty()) return;
    FP8LM_CUDA_CHECK(cudaEventRecord(done_, stream_));
    const Clock::time_point start = Clock::now();
    const double timeout = host_.timeout();
    for (;;) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) FP8LM_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        fail(fmt::format("the {} failed in NCCL: {}", started_.front(), ncclGetErrorString(async)));
      }
      if (timeout > 0 && seconds_since(start) > timeout) timed_out(timeout);
      sched_yield();
    }
    // The device's later work (what reads the sums) comes after the collectives.
    FP8LM_CUDA_CHECK(cudaStreamWaitEvent(nullptr, done_, 0));
    started_.clear();
    traffic_.seconds += seconds_since(start);
  }
  Communicator::Traffic traffic() const override { return traffic_; }

  std::string describe() const override {
    return fmt::format("nccl {} on cuda:{}", nccl_version(), device_);
  }

 private:
  void start(void* values, size_t n, ncclDataType_t type, std::string_view what) {
    if (n == 0) return;
    // After the work queued on the default stream so far: the kernels that made the values.
    FP8LM_CUDA_CHECK(cudaEventRecord(queued_, nullptr));
    FP8LM_CUDA_CHECK(cudaStreamWaitEvent(stream_, queued_, 0));
    check(ncclAllReduce(values, values, n, type, ncclSum, comm_, stream_), "ncclAllReduce");
    started_.emplace_back(what);
    traffic_.bytes += n * (type == ncclFloat32 ? sizeof(float) : sizeof(bf16_t));
  }

  // An NCCL call that failed: the communicator is aborted (a collective the others wait in
  // would otherwise never end) and the run ends with the call's error.
  void check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(fmt::format("{} failed: {}", call, ncclGetErrorString(r)));
  }
  [[noreturn]] void fail(const std::string& message) {
    abort_communicator();
    throw Error(message);
  }
  void abort_communicator() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // The collectives did not complete: NCCL is aborted, and the host world finds out which ranks
  // are missing (its own collective times out in turn and names them); if every rank is there,
  // NCCL itself hung.
  [[noreturn]] void timed_out(double timeout) {
    const std::string what = started_.front();
    abort_communicator();
    host_.set_timeout(std::min(30.0, timeout));
    float present[] = {1.0f};
    host_.all_reduce_max(present, what + " (NCCL)");
    throw Error(
        fmt::format("the {} (NCCL) did not complete in {:g} s, though every rank is "
                    "running: NCCL hung, its communicator aborted",
                    what, timeout));
  }

  Communicator& host_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t queued_ = nullptr, done_ = nullptr;
  std::vector<std::string> started_;  // what each collective in flight is
  Communicator::Traffic traffic_;
};

}  // namespace

bool nccl_built() {
  return true;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // Since NCCL 2.9: major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator& host, int device) {
  return std::make_unique<NcclCollectives>(host, device);
}

}  // namespace fp8lm
