#include "kernels/cuda/op_profile.h"

#include <map>
#include <mutex>
#include <vector>

#include "fp8lm/error.h"

namespace fp8lm::cuda {
namespace {

struct Timed {
  OpKind kind;
  int device;
  cudaEvent_t start, end;
};

// Entry points open on this thread: one entry point calling another (a GEMM padding its
// operands through copy_rows) is timed once, as the outer one's kind.
thread_local int t_depth = 0;
std::mutex g_mutex;
std::vector<Timed> g_pending;                    // recorded, not yet summed
std::map<int, std::vector<cudaEvent_t>> g_free;  // events to reuse, by device (theirs)

// An event of the current device (`device`): a reused one, or a new one (null if none can be
// made).
cudaEvent_t take_event(int device) {
  {
    const std::lock_guard lock(g_mutex);
    std::vector<cudaEvent_t>& free = g_free[device];
    if (!free.empty()) {
      cudaEvent_t e = free.back();
      free.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
}

// The recorded ops' device times (kernels/op_times.h's source for this backend): waits for them.
OpTimes take_device_op_times() {
  std::vector<Timed> pending;
  {
    const std::lock_guard lock(g_mutex);
    pending.swap(g_pending);
  }
  OpTimes t;
  for (const Timed& op : pending) {
    FP8LM_CUDA_CHECK(cudaEventSynchronize(op.end));
    float ms = 0.0f;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, op.start, op.end));
    t.seconds[static_cast<size_t>(op.kind)] += ms / 1e3;
    t.ops[static_cast<size_t>(op.kind)] += 1;
  }
  const std::lock_guard lock(g_mutex);
  for (const Timed& op : pending) {
    g_free[op.device].push_back(op.start);
    g_free[op.device].push_back(op.end);
  }
  return t;
}

}  // namespace

OpScope::OpScope(int device, OpKind kind, cudaStream_t stream)
    : guard_(device), kind_(kind), device_(device), stream_(stream) {
  if (profiling_ops() && t_depth == 0) {
    static const bool registered = (add_op_time_source(&take_device_op_times), true);
    (void)registered;
    start_ = take_event(device_);
    if (!start_) throw Error("profiling the CUDA backend's ops: no event could be created");
    FP8LM_CUDA_CHECK(cudaEventRecord(start_, stream_));
  }
  ++t_depth;  // last: a constructor that throws leaves the depth as it was
}

OpScope::~OpScope() {
  --t_depth;
  if (!start_) return;
  // No throwing from a destructor: an event that cannot be made or recorded drops the op.
  cudaEvent_t end = take_event(device_);
  if (!end || cudaEventRecord(end, stream_) != cudaSuccess) return;
  const std::lock_guard lock(g_mutex);
  g_pending.push_back({kind_, device_, start_, end});
}

}  // namespace fp8lm::cuda
