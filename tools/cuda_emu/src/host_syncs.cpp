#include "emu/host_syncs.h"

#include <execinfo.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "report.h"
#include "runtime_state.h"

namespace emu::detail {
namespace {

thread_local unsigned long long g_syncs = 0;
std::mutex g_mutex;
std::map<uintptr_t, std::size_t> g_pinned;  // cudaMallocHost's allocations: base -> bytes

bool tracing() {
  static const bool on = std::getenv("CUDA_EMU_TRACE_SYNCS") != nullptr;
  return on;
}

}  // namespace

void note_host_sync(const char* call) {
  ++g_syncs;
  if (!tracing()) return;
  report("host synchronisation %llu: %s, from", g_syncs, call);
  void* frames[16];
  backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
}

void note_pinned(const void* p, std::size_t bytes) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (bytes) {
    g_pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  } else {
    g_pinned.erase(reinterpret_cast<uintptr_t>(p));
  }
}

bool is_pinned(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

}  // namespace emu::detail

unsigned long long emu::host_synchronizations() {
  return detail::g_syncs;
}
