#include "shared_races.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "block_scheduler.h"
#include "emu/thread.h"

namespace emu::detail {
namespace {

// What the interval so far did to one byte. Intervals are numbered across all blocks, so a
// byte's state from an earlier interval (or block, or launch) never needs clearing.
struct ByteState {
  uint64_t write_interval = 0, read_interval = 0;
  unsigned writer = 0, writer_warp_sync = 0;
  unsigned reader = 0, reader_warp_sync = 0;  // the last reader
  // The readers so far, beyond the last: kOneReader (only `reader`), a warp's index (all of its
  // lanes), or kManyWarps.
  int readers = 0;
};
constexpr int kOneReader = -1, kManyWarps = -2;

struct Region {
  uintptr_t base;
  std::size_t bytes;
  std::vector<ByteState> state;
};

thread_local uint64_t g_interval = 0;
thread_local bool g_checking = false;           // a block runs and the check is on
thread_local std::vector<ByteState> g_dynamic;  // the dynamic shared memory's bytes
thread_local std::vector<Region> g_static;      // static __shared__ variables (host-thread wide)

// The state of the `size` bytes at a, if they are shared memory (an access never spans two
// regions), else null.
ByteState* state_of(const Block& b, uintptr_t a) {
  const auto shared = reinterpret_cast<uintptr_t>(b.shared);
  if (a - shared < b.shared_bytes) {
    if (g_dynamic.size() < b.shared_bytes) g_dynamic.resize(b.shared_bytes);
    return &g_dynamic[a - shared];
  }
  for (Region& r : g_static)
    if (a - r.base < r.bytes) return &r.state[a - r.base];
  return nullptr;
}

unsigned warp_of(unsigned thread) {
  return thread / 32;
}

[[noreturn]] void race(const Block& b, uintptr_t a, const char* what, unsigned other) {
  const auto shared = reinterpret_cast<uintptr_t>(b.shared);
  char message[256];
  std::snprintf(message, sizeof message,
                "shared-memory race: %s byte %p (%s) that thread %u accessed since the last "
                "__syncthreads, with no barrier or warp collective between them",
                what, reinterpret_cast<void*>(a),
                a - shared < b.shared_bytes ? "dynamic shared memory" : "a __shared__ variable",
                other);
  emu::device_error(message);
}

void on_access(uintptr_t a, std::size_t size, bool write) {
  if (!g_checking) return;  // no block running, or CUDA_EMU_RACECHECK=0
  const Block* b = running_block();
  if (!b || !b->current) return;  // host code
  ByteState* first = state_of(*b, a);
  if (!first || state_of(*b, a + size - 1) != first + size - 1) return;  // not (all) shared
  const unsigned me = b->current->linear;
  const unsigned my_sync = b->warps[warp_of(me)].generation;
  // Whether an earlier access by thread t (its warp at warp_sync) is ordered before this one.
  const auto ordered = [&](unsigned t, unsigned warp_sync) {
    return t == me || (warp_of(t) == warp_of(me) && warp_sync != my_sync);
  };
  for (std::size_t i = 0; i < size; ++i) {
    ByteState* s = first + i;
    const bool written = s->write_interval == g_interval;
    if (written && !ordered(s->writer, s->writer_warp_sync))
      race(*b, a + i, write ? "writes" : "reads", s->writer);
    const bool read = s->read_interval == g_interval;
    // The reads so far are ordered before this access: one reader (itself ordered), or lanes of
    // this thread's warp all before a warp collective since the last of them.
    const bool reads_ordered =
        !read || (s->readers == kOneReader ? ordered(s->reader, s->reader_warp_sync)
                                           : s->readers == static_cast<int>(warp_of(me)) &&
                                                 s->reader_warp_sync != my_sync);
    if (write) {
      if (!reads_ordered) race(*b, a + i, "writes", s->reader);
      *s = {g_interval, 0, me, my_sync, 0, 0, kOneReader};
    } else if (reads_ordered) {  // a reader to remember alone
      *s = {s->write_interval, g_interval, s->writer, s->writer_warp_sync, me, my_sync, kOneReader};
    } else {
      const int warp = static_cast<int>(warp_of(me));
      const bool same_warp =
          s->readers == kOneReader ? warp_of(s->reader) == warp_of(me) : s->readers == warp;
      s->readers = same_warp ? warp : kManyWarps;
      s->reader = me;
      s->reader_warp_sync = my_sync;
    }
  }
}

}  // namespace

bool race_check_on() {
  static const bool on = [] {
    const char* v = std::getenv("CUDA_EMU_RACECHECK");
    return !v || std::strcmp(v, "0") != 0;
  }();
  return on;
}

void race_interval_begins() {
  ++g_interval;
  g_checking = race_check_on();
}

void race_launch_ends() {
  g_checking = false;
}

void race_static_shared(const void* p, std::size_t bytes) {
  const auto base = reinterpret_cast<uintptr_t>(p);
  for (const Region& r : g_static)
    if (r.base == base) return;
  g_static.push_back({base, bytes, std::vector<ByteState>(bytes)});
}

}  // namespace emu::detail

// The instrumentation's calls (GCC -fsanitize=kernel-address, outline, no abort).
extern "C" {
#define CUDA_EMU_ACCESS(n)                      \
  void __asan_load##n##_noabort(uintptr_t a) {  \
    emu::detail::on_access(a, n, false);        \
  }                                             \
  void __asan_store##n##_noabort(uintptr_t a) { \
    emu::detail::on_access(a, n, true);         \
  }
CUDA_EMU_ACCESS(1)
CUDA_EMU_ACCESS(2)
CUDA_EMU_ACCESS(4)
CUDA_EMU_ACCESS(8)
CUDA_EMU_ACCESS(16)
#undef CUDA_EMU_ACCESS
void __asan_loadN_noabort(uintptr_t a, std::size_t size) {
  emu::detail::on_access(a, size, false);
}
void __asan_storeN_noabort(uintptr_t a, std::size_t size) {
  emu::detail::on_access(a, size, true);
}
// Calls the instrumentation makes that the race check has no use for.
void __asan_handle_no_return() {}
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init() {}
}
