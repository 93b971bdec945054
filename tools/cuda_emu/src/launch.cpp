// Kernel launches: the configuration checks the CUDA runtime makes, then the blocks.
#include <map>
#include <mutex>
#include <utility>

#include "block_scheduler.h"
#include "emu/launch.h"
#include "report.h"
#include "runtime_state.h"

namespace emu::detail {
namespace {

constexpr int kDefaultDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute
constexpr int kMaxDynamicShared = 227 * 1024;     // sm_90's opt-in limit

std::mutex g_mutex;
// Per device and kernel, from cudaFuncSetAttribute (which sets it for the current device).
std::map<std::pair<int, const void*>, int> g_max_dynamic_shared;

int max_dynamic_shared(const void* kernel) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_max_dynamic_shared.find({current_device(), kernel});
  return it == g_max_dynamic_shared.end() ? kDefaultDynamicShared : it->second;
}

bool config_ok(const LaunchConfig& c, const void* kernel) {
  const dim3 g = c.grid, b = c.block;
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    report("launch of kernel %p: grid (%u,%u,%u) out of range", kernel, g.x, g.y, g.z);
    return false;
  }
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) {
    report("launch of kernel %p: block (%u,%u,%u) out of range", kernel, b.x, b.y, b.z);
    return false;
  }
  if (c.shared_bytes > static_cast<std::size_t>(max_dynamic_shared(kernel))) {
    report(
        "launch of kernel %p: %zu bytes of dynamic shared memory, above its limit of %d "
        "(cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) raises it)",
        kernel, c.shared_bytes, max_dynamic_shared(kernel));
    return false;
  }
  return true;
}

}  // namespace
}  // namespace emu::detail

namespace emu {

void refuse_launch(cudaError_t error) {
  detail::fail(error);
}

bool check_pointer_argument(const void* kernel, int index, const void* p) {
  if (p == nullptr) return true;
  const int device = detail::device_of(p);
  if (device < 0) {
    detail::report("launch of kernel %p: argument %d (%p) is not device memory", kernel, index, p);
    return false;
  }
  if (device != detail::current_device()) {
    // Without peer access a kernel faults on another device's memory.
    detail::report("launch of kernel %p on device %d: argument %d (%p) is device %d's memory",
                   kernel, detail::current_device(), index, p, device);
    return false;
  }
  return true;
}

bool stream_captures(cudaStream_t s) {
  return detail::is_capturing(s);
}

void capture_launch(const LaunchConfig& config, const void* kernel,
                    std::function<void(cudaStream_t)> run) {
  if (!detail::is_current_device_stream(config.stream))
    return refuse_launch(cudaErrorInvalidResourceHandle);
  if (!detail::config_ok(config, kernel)) return refuse_launch(cudaErrorInvalidConfiguration);
  if (const cudaError_t e =
          *detail::capture_node(config.stream, detail::NodeKind::Kernel, std::move(run)))
    refuse_launch(e);
}

void fail_graph_node() {
  detail::note_launch_failure();
}

void run_grid(const LaunchConfig& config, const void* kernel, void (*body)(void*), void* ctx) {
  if (!detail::is_current_device_stream(config.stream))
    return refuse_launch(cudaErrorInvalidResourceHandle);
  if (!detail::config_ok(config, kernel)) return refuse_launch(cudaErrorInvalidConfiguration);
  if (const cudaError_t e = detail::check_legacy_use("kernel launch", config.stream))
    return refuse_launch(e);
  detail::finish_all(detail::pending_on(config.stream));  // the stream's earlier work first
  const bool ran = detail::run_blocks(config.grid, config.block, config.shared_bytes, body, ctx);
  if (!detail::guards_intact(kernel) || !ran) detail::note_launch_failure();
}

}  // namespace emu

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return emu::detail::fail(cudaErrorInvalidValue);
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > emu::detail::kMaxDynamicShared) {
    emu::detail::report("cudaFuncSetAttribute(%p, %d, %d): not allowed on sm_90", func,
                        static_cast<int>(attr), value);
    return emu::detail::fail(cudaErrorInvalidValue);
  }
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  emu::detail::g_max_dynamic_shared[{emu::detail::current_device(), func}] = value;
  return cudaSuccess;
}
