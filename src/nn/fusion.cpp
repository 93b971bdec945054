#include "nn/fusion.h"

#include <atomic>

namespace fp8lm {
namespace {
bool& enabled() {
  thread_local bool on = true;
  return on;
}
std::atomic<int64_t> traffic{0};
}  // namespace

bool fusion_enabled() {
  return enabled();
}

FusionScope::FusionScope(bool on) : ScopedValue(enabled(), on) {}

void count_traffic(int64_t bytes) {
  traffic.fetch_add(bytes, std::memory_order_relaxed);
}
int64_t traffic_bytes() {
  return traffic.load(std::memory_order_relaxed);
}
void reset_traffic() {
  traffic.store(0, std::memory_order_relaxed);
}

}  // namespace fp8lm
