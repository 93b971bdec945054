#include "kernels/op_times.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

namespace fp8lm {
namespace {

std::atomic<bool> g_on{false};
// Entry points open on this thread (nested ones are the outer one's time).
thread_local int t_depth = 0;
std::mutex g_mutex;
OpTimes g_host;                     // summed since the last take
std::vector<OpTimes (*)()> g_sources;  // devices' times

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

OpTimes& OpTimes::operator+=(const OpTimes& o) {
  for (int k = 0; k < kOpKinds; ++k) {
    seconds[static_cast<size_t>(k)] += o.seconds[static_cast<size_t>(k)];
    ops[static_cast<size_t>(k)] += o.ops[static_cast<size_t>(k)];
  }
  return *this;
}

void profile_ops(bool on) {
  g_on = on;
}

bool profiling_ops() {
  return g_on;
}

OpTimes take_op_times() {
  std::vector<OpTimes (*)()> sources;
  OpTimes t;
  {
    const std::lock_guard lock(g_mutex);
    t = g_host;
    g_host = {};
    sources = g_sources;
  }
  for (OpTimes (*take)() : sources) t += take();
  return t;
}

void add_op_time_source(OpTimes (*take)()) {
  const std::lock_guard lock(g_mutex);
  for (OpTimes (*s)() : g_sources)
    if (s == take) return;
  g_sources.push_back(take);
}

HostOpScope::HostOpScope(OpKind kind) : kind_(kind), timed_(g_on && t_depth == 0) {
  if (timed_) start_ns_ = now_ns();
  ++t_depth;
}

HostOpScope::~HostOpScope() {
  --t_depth;
  if (!timed_) return;
  const double seconds = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  const std::lock_guard lock(g_mutex);
  g_host.seconds[static_cast<size_t>(kind_)] += seconds;
  g_host.ops[static_cast<size_t>(kind_)] += 1;
}

}  // namespace fp8lm
