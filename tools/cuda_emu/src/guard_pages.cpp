#include "guard_pages.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#include "block_scheduler.h"
#include "emu/thread.h"
#include "report.h"

namespace emu::detail {
namespace {

constexpr unsigned char kGuardByte = 0xa5;
constexpr std::size_t kNear = 256;  // bytes before base checked per launch
constexpr std::size_t kRetiredBudget = std::size_t{4} << 30;  // address space kept inaccessible
constexpr std::size_t kRetiredMappings = 8192;                // and at most this many mappings

std::size_t page() {
  static const auto bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

struct Retired {
  uintptr_t map, map_bytes, base, bytes;
};
std::mutex g_retired_mutex;
std::deque<Retired> g_retired;
std::size_t g_retired_bytes = 0;

// The guard bytes between the first accessible page and base, and between the request's end
// and the last accessible page's end.
uintptr_t front_start(const Mapping& m) {
  return m.map + page();
}
uintptr_t tail_end(const Mapping& m) {
  return m.map + m.map_bytes - page();
}

bool scan(uintptr_t from, uintptr_t to, const Mapping& m, std::ptrdiff_t* offset) {
  bool found = false;
  for (uintptr_t a = from; a < to; ++a) {
    auto* byte = reinterpret_cast<unsigned char*>(a);
    if (*byte == kGuardByte) continue;
    if (!found) *offset = static_cast<std::ptrdiff_t>(a) - static_cast<std::ptrdiff_t>(m.base);
    found = true;
    *byte = kGuardByte;
  }
  return found;
}

bool describe_retired(uintptr_t addr, char* out, std::size_t out_bytes) {
  std::unique_lock<std::mutex> lock(g_retired_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  for (auto it = g_retired.rbegin(); it != g_retired.rend(); ++it) {
    if (addr < it->map || addr >= it->map + it->map_bytes) continue;
    std::snprintf(out, out_bytes,
                  "access to %p, offset %td of a %zu-byte allocation at %p that was freed (use "
                  "after cudaFree)",
                  reinterpret_cast<void*>(addr),
                  static_cast<std::ptrdiff_t>(addr) - static_cast<std::ptrdiff_t>(it->base),
                  static_cast<std::size_t>(it->bytes), reinterpret_cast<void*>(it->base));
    return true;
  }
  return false;
}

struct sigaction g_previous;

void on_fault(int sig, siginfo_t* info, void* context) {
  char what[320];
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (!describe_guard_fault(addr, what, sizeof what) &&
      !describe_retired(addr, what, sizeof what)) {
    // Not device memory: whatever handled SIGSEGV before (by default, a crash with a core).
    if (g_previous.sa_flags & SA_SIGINFO) return g_previous.sa_sigaction(sig, info, context);
    sigaction(SIGSEGV, &g_previous, nullptr);
    return;  // the access faults again, now under the previous disposition
  }
  // A kernel's thread: abandon its launch as a GPU does (SA_NODEFER keeps SIGSEGV unblocked
  // while the fibre this handler runs on is left behind; it is never resumed).
  if (Block* b = running_block(); b && b->current) emu::device_error(what);
  report("host code: %s", what);
  std::abort();
}

}  // namespace

Mapping map_guarded(std::size_t bytes, int fill) {
  const std::size_t rounded = round_up(bytes, 256);  // cudaMalloc aligns to 256 bytes
  const std::size_t inner = round_up(rounded, page());
  Mapping m;
  m.map_bytes = inner + 2 * page();
  void* p =
      mmap(nullptr, m.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return {};
  m.map = reinterpret_cast<uintptr_t>(p);
  if (mprotect(reinterpret_cast<void*>(m.map + page()), inner, PROT_READ | PROT_WRITE) != 0) {
    munmap(p, m.map_bytes);
    return {};
  }
  // The allocation ends at its 256-byte granule's end, against the trailing guard page.
  m.base = tail_end(m) - rounded;
  m.bytes = bytes;
  std::memset(reinterpret_cast<void*>(front_start(m)), kGuardByte, m.base - front_start(m));
  std::memset(reinterpret_cast<void*>(m.base), fill, bytes);
  std::memset(reinterpret_cast<void*>(m.base + bytes), kGuardByte, rounded - bytes);
  return m;
}

void retire(const Mapping& m) {
  // A fresh inaccessible mapping over the old one: its memory goes back, its addresses stay
  // reserved (so they are not handed out again while a stale pointer may still use them).
  mmap(reinterpret_cast<void*>(m.map), m.map_bytes, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  const std::lock_guard<std::mutex> lock(g_retired_mutex);
  g_retired.push_back({m.map, m.map_bytes, m.base, m.bytes});
  g_retired_bytes += m.map_bytes;
  while (g_retired_bytes > kRetiredBudget || g_retired.size() > kRetiredMappings) {
    const Retired& r = g_retired.front();
    munmap(reinterpret_cast<void*>(r.map), r.map_bytes);
    g_retired_bytes -= r.map_bytes;
    g_retired.pop_front();
  }
}

bool overwritten_guard(const Mapping& m, bool near_only, std::ptrdiff_t* offset) {
  const uintptr_t front =
      near_only && m.base - front_start(m) > kNear ? m.base - kNear : front_start(m);
  bool found = scan(front, m.base, m, offset);
  std::ptrdiff_t tail = 0;
  if (scan(m.base + m.bytes, tail_end(m), m, &tail) && !found) {
    *offset = tail;
    found = true;
  }
  return found;
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous);
  });
}

}  // namespace emu::detail
