#include "kernels/traffic.h"

#include <atomic>

namespace fp8lm {
namespace {
std::atomic<int64_t> traffic{0};
}  // namespace

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
