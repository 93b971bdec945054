// Device memory is host memory the registry knows, each allocation between guards
// (guard_pages.h). Fresh allocations are filled with 0xFF bytes (NaN in every float format),
// so reading memory nobody wrote shows up in results; every copy and memset is checked against
// the direction its kind names; each allocation belongs to the device current when it was made.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "guard_pages.h"
#include "report.h"
#include "runtime_state.h"

namespace emu::detail {
namespace {

struct Allocation {
  Mapping mapping;
  int device = 0;
  std::size_t bytes() const { return mapping.bytes; }
};

std::mutex g_mutex;
std::map<uintptr_t, Allocation> g_allocations;  // by base
std::size_t g_allocated = 0;

// The allocation holding p (or ending at p), or end().
std::map<uintptr_t, Allocation>::const_iterator find(uintptr_t p) {
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return g_allocations.end();
  --it;
  return p <= it->first + it->second.bytes() ? it : g_allocations.end();
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "HostToHost";
    case cudaMemcpyHostToDevice:
      return "HostToDevice";
    case cudaMemcpyDeviceToHost:
      return "DeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "DeviceToDevice";
    case cudaMemcpyDefault:
      return "Default";
  }
  return "?";
}

// Checks one side of a copy: device memory for the whole range, or no device memory at all.
bool side_ok(const char* call, const char* side, const void* p, std::size_t bytes, bool device,
             cudaMemcpyKind kind) {
  if (device && !is_device_range(p, bytes)) {
    report("%s (%s): %s %p + %zu bytes is not inside one cudaMalloc allocation", call,
           kind_name(kind), side, p, bytes);
    return false;
  }
  if (!device && is_device_pointer(p)) {
    report("%s (%s): %s %p is device memory, but the kind says host", call, kind_name(kind), side,
           p);
    return false;
  }
  return true;
}

// How a copy is counted among host synchronizations: a blocking call, an asynchronous one, or
// a later row of a 2D copy (counted with its first).
enum class Wait { Blocking, Async, Counted };

// Whether a copy's sides are what its kind says, and inside their allocations.
cudaError_t check_sides(const char* call, void* dst, const void* src, std::size_t bytes,
                        cudaMemcpyKind kind) {
  if (!dst || !src) {
    report("%s: null pointer", call);
    return fail(cudaErrorInvalidValue);
  }
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyHostToDevice:
    case cudaMemcpyDeviceToHost:
    case cudaMemcpyDeviceToDevice:
      ok = side_ok(call, "src", src, bytes,
                   kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice, kind) &&
           side_ok(call, "dst", dst, bytes,
                   kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice, kind);
      break;
    case cudaMemcpyDefault:  // any direction, but a device side must hold the whole range
      ok = side_ok(call, "src", src, bytes, is_device_pointer(src), kind) &&
           side_ok(call, "dst", dst, bytes, is_device_pointer(dst), kind);
      break;
    default:
      report("%s: unknown copy kind %d", call, static_cast<int>(kind));
      return fail(cudaErrorInvalidMemcpyDirection);
  }
  return ok ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t copy(const char* call, void* dst, const void* src, std::size_t bytes,
                 cudaMemcpyKind kind, cudaStream_t stream, Wait wait);

// A copy queued on a capturing stream: checked now, run at each launch of the graph, reading the
// host side then. Pageable host memory is refused: the graph would copy whatever it holds when
// launched, which only pinned staging meant for it makes safe.
cudaError_t capture_copy(const char* call, void* dst, const void* src, std::size_t bytes,
                         cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = check_sides(call, dst, src, bytes, kind)) return e;
  const bool src_host = !is_device_pointer(src), dst_host = !is_device_pointer(dst);
  if ((src_host && !is_pinned(src, bytes)) || (dst_host && !is_pinned(dst, bytes)))
    return refuse_in_capture(call, stream, "a copy from or to pageable host memory");
  return *capture_node(stream, NodeKind::Copy, [=](cudaStream_t s) {
    if (copy(call, dst, src, bytes, kind, s, Wait::Async) != cudaSuccess) note_launch_failure();
  });
}

cudaError_t copy(const char* call, void* dst, const void* src, std::size_t bytes,
                 cudaMemcpyKind kind, cudaStream_t stream, Wait wait) {
  if (!is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (is_capturing(stream)) return capture_copy(call, dst, src, bytes, kind, stream);
  if (const cudaError_t e = check_legacy_use(call, stream)) return e;
  if (wait == Wait::Blocking)
    if (const cudaError_t e = check_unsafe(call)) return e;
  if (const cudaError_t e = take_launch_failure(); e != cudaSuccess) return e;
  finish_all(pending_on(stream));  // the stream's earlier work first
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = check_sides(call, dst, src, bytes, kind)) return e;
  // The host waits unless both sides are device memory, or (asynchronous copies) the host
  // side is pinned.
  const bool src_host = !is_device_pointer(src), dst_host = !is_device_pointer(dst);
  if (wait != Wait::Counted && (src_host || dst_host) &&
      (wait == Wait::Blocking || (src_host && !is_pinned(src, bytes)) ||
       (dst_host && !is_pinned(dst, bytes))))
    note_host_sync(call);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t set(const char* call, void* p, int value, std::size_t bytes, cudaStream_t stream) {
  if (!is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(p, bytes)) {
    report("%s: %p + %zu bytes is not inside one cudaMalloc allocation", call, p, bytes);
    return fail(cudaErrorInvalidValue);
  }
  if (const std::optional<cudaError_t> captured =
          capture_node(stream, NodeKind::Memset, [=](cudaStream_t s) {
            if (set(call, p, value, bytes, s) != cudaSuccess) note_launch_failure();
          }))
    return *captured;
  if (const cudaError_t e = check_legacy_use(call, stream)) return e;
  std::memset(p, value, bytes);
  return cudaSuccess;
}

}  // namespace

bool is_device_range(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = find(a);
  return it != g_allocations.end() && a + bytes <= it->first + it->second.bytes() && a + bytes >= a;
}

bool is_device_pointer(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = find(a);
  return it != g_allocations.end() && a < it->first + it->second.bytes();
}

int device_of(const void* p) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = find(reinterpret_cast<uintptr_t>(p));
  return it == g_allocations.end() ? -1 : it->second.device;
}

bool guards_intact(const void* kernel) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  bool intact = true;
  for (const auto& [base, a] : g_allocations) {
    std::ptrdiff_t offset = 0;
    if (!overwritten_guard(a.mapping, true, &offset)) continue;
    report("kernel %p wrote outside its buffer: offset %td of the %zu-byte allocation at %p",
           kernel, offset, a.bytes(), reinterpret_cast<void*>(base));
    intact = false;
  }
  return intact;
}

bool describe_guard_fault(uintptr_t addr, char* out, std::size_t out_bytes) {
  std::unique_lock<std::mutex> lock(g_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  // The allocation whose trailing guard page holds addr starts at or before it; the one whose
  // leading guard page does starts after it.
  auto after = g_allocations.upper_bound(addr);
  for (auto it : {after, after == g_allocations.begin() ? g_allocations.end() : std::prev(after)}) {
    if (it == g_allocations.end()) continue;
    const Mapping& m = it->second.mapping;
    if (addr < m.map || addr >= m.map + m.map_bytes) continue;
    const auto offset = static_cast<std::ptrdiff_t>(addr) - static_cast<std::ptrdiff_t>(m.base);
    std::snprintf(out, out_bytes,
                  "out-of-bounds access to %p: offset %td of the %zu-byte allocation at %p",
                  reinterpret_cast<void*>(addr), offset, m.bytes, reinterpret_cast<void*>(m.base));
    return true;
  }
  return false;
}

// The byte fresh allocations are filled with: 0xFF (NaN everywhere), or CUDA_EMU_FILL (e.g.
// 0 to see whether a failure depends on reading memory nobody wrote).
int fill_byte() {
  static const int fill = [] {
    const char* v = std::getenv("CUDA_EMU_FILL");
    return v ? static_cast<int>(std::strtol(v, nullptr, 0)) : 0xff;
  }();
  return fill;
}

std::size_t allocated_bytes() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_allocated;
}

}  // namespace emu::detail

using emu::detail::fail;
using emu::detail::report;

namespace emu::detail {
namespace {

// cudaMalloc and cudaFree, and their stream-ordered forms, which do not wait (`blocking` false).
cudaError_t allocate(void** ptr, std::size_t bytes, bool blocking) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > kDeviceMemory - allocated_bytes()) return fail(cudaErrorMemoryAllocation);
  install_fault_handler();
  if (blocking) {
    if (const cudaError_t e = check_unsafe("cudaMalloc")) return e;
    note_host_sync("cudaMalloc");
  }
  const Mapping m = map_guarded(bytes, fill_byte());
  if (!m.map) return fail(cudaErrorMemoryAllocation);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[m.base] = {m, current_device()};
  g_allocated += bytes;
  *ptr = reinterpret_cast<void*>(m.base);
  return cudaSuccess;
}

cudaError_t release(void* ptr, bool blocking) {
  if (!ptr) return cudaSuccess;
  if (blocking) {
    if (const cudaError_t e = check_unsafe("cudaFree")) return e;
    note_host_sync("cudaFree");
  }
  Mapping m;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    const auto it = g_allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_allocations.end()) {
      report("cudaFree(%p): not the start of a live cudaMalloc allocation", ptr);
      return fail(cudaErrorInvalidValue);
    }
    m = it->second.mapping;
    g_allocated -= m.bytes;
    g_allocations.erase(it);
  }
  std::ptrdiff_t offset = 0;
  const bool overwritten = overwritten_guard(m, false, &offset);
  retire(m);
  if (!overwritten) return cudaSuccess;
  // As cudaFree returns the errors of earlier launches: one wrote outside this allocation.
  report("cudaFree(%p): something wrote outside this %zu-byte allocation (offset %td)", ptr,
         m.bytes, offset);
  return fail(cudaErrorLaunchFailure);
}

}  // namespace
}  // namespace emu::detail

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  return emu::detail::allocate(ptr, bytes, true);
}

cudaError_t cudaFree(void* ptr) {
  return emu::detail::release(ptr, true);
}

cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  if (!emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = emu::detail::refuse_in_capture("cudaMallocAsync", stream,
                                                           "graph memory nodes are not emulated"))
    return e;
  return emu::detail::allocate(ptr, bytes, false);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (!emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = emu::detail::refuse_in_capture("cudaFreeAsync", stream,
                                                           "graph memory nodes are not emulated"))
    return e;
  return emu::detail::release(ptr, false);
}

namespace {
struct MemPool {
  std::atomic<uint64_t> release_threshold{0};  // CUDA's default: return memory at each sync
};
MemPool g_default_pools[emu::detail::kMaxDevices];  // one per device

MemPool* as_pool(cudaMemPool_t pool) {
  for (MemPool& p : g_default_pools)
    if (pool == reinterpret_cast<cudaMemPool_t>(&p)) return &p;
  return nullptr;
}
}  // namespace

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (!pool || device < 0 || device >= emu::detail::device_count())
    return fail(cudaErrorInvalidValue);
  *pool = reinterpret_cast<cudaMemPool_t>(&g_default_pools[device]);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  MemPool* p = as_pool(pool);
  if (!p || !value || attr != cudaMemPoolAttrReleaseThreshold) return fail(cudaErrorInvalidValue);
  p->release_threshold = *static_cast<uint64_t*>(value);
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  MemPool* p = as_pool(pool);
  if (!p || !value || attr != cudaMemPoolAttrReleaseThreshold) return fail(cudaErrorInvalidValue);
  *static_cast<uint64_t*>(value) = p->release_threshold;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = emu::detail::check_unsafe("cudaMallocHost")) return e;
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (*ptr && bytes) emu::detail::note_pinned(*ptr, bytes);
  return *ptr || bytes == 0 ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  if (const cudaError_t e = emu::detail::check_unsafe("cudaFreeHost")) return e;
  emu::detail::note_host_sync("cudaFreeHost");
  emu::detail::note_pinned(ptr, 0);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return emu::detail::copy("cudaMemcpy", dst, src, bytes, kind, nullptr,
                           emu::detail::Wait::Blocking);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return emu::detail::copy("cudaMemcpyAsync", dst, src, bytes, kind, stream,
                           emu::detail::Wait::Async);
}

namespace {
// A pitched copy as rows of `width` bytes, each checked like a plain copy.
cudaError_t copy_2d(const char* api, void* dst, std::size_t dpitch, const void* src,
                    std::size_t spitch, std::size_t width, std::size_t height, cudaMemcpyKind kind,
                    cudaStream_t stream, emu::detail::Wait wait) {
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  for (std::size_t r = 0; r < height; ++r) {
    const cudaError_t e = emu::detail::copy(api, static_cast<char*>(dst) + r * dpitch,
                                            static_cast<const char*>(src) + r * spitch, width, kind,
                                            stream, r ? emu::detail::Wait::Counted : wait);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy2D(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                         std::size_t width, std::size_t height, cudaMemcpyKind kind) {
  return copy_2d("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind, nullptr,
                 emu::detail::Wait::Blocking);
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                              std::size_t width, std::size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return copy_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream,
                 emu::detail::Wait::Async);
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  return emu::detail::set("cudaMemset", ptr, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  return emu::detail::set("cudaMemsetAsync", ptr, value, bytes, stream);
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  if (!free || !total) return fail(cudaErrorInvalidValue);
  *total = emu::detail::kDeviceMemory;
  *free = *total - emu::detail::allocated_bytes();
  return cudaSuccess;
}
