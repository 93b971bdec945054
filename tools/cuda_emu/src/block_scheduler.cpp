#include "block_scheduler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "emu/thread.h"
#include "report.h"
#include "shared_races.h"

namespace emu::detail {
namespace {

thread_local Block* g_running = nullptr;
thread_local uint64_t g_launches = 0;
thread_local std::mt19937_64 g_order;  // reseeded at every launch

std::size_t stack_bytes() {
  // Kernels keep their locals (WMMA fragments included) on these stacks; 256 KiB is far more
  // than a GPU thread's local memory, and untouched pages cost nothing.
  static const std::size_t bytes = [] {
    const char* kb = std::getenv("CUDA_EMU_STACK_KB");
    return (kb ? std::strtoul(kb, nullptr, 10) : 256ul) * 1024;
  }();
  return bytes;
}

// Stacks are kept for the life of the host thread and reused by every block.
FibreStack& stack_for(std::size_t i) {
  thread_local std::vector<std::unique_ptr<FibreStack>> stacks;
  while (stacks.size() <= i) stacks.push_back(std::make_unique<FibreStack>(stack_bytes()));
  return *stacks[i];
}

unsigned lane_bit(const ThreadState& t) {
  return 1u << (t.linear % 32);
}

// Releases the block barrier once every live thread waits at it.
void maybe_release_barrier(Block& b) {
  if (b.barrier_arrived > 0 && b.barrier_arrived == b.live) {
    b.barrier_arrived = 0;
    ++b.barrier_generation;
    race_interval_begins();
  }
}

[[noreturn]] void thread_exit() {
  Block& b = *g_running;
  ThreadState& t = *b.current;
  t.done = true;
  --b.live;
  ++b.progress;
  WarpState& w = b.warps[t.linear / 32];
  w.exited |= lane_bit(t);
  if (w.arrived != 0 && (w.mask & lane_bit(t))) {
    device_error("exited while other lanes of its warp wait for it in a warp collective");
  }
  maybe_release_barrier(b);
  switch_context(t.ctx, b.scheduler);
  std::abort();  // a finished fibre is never resumed
}

void thread_main(void*) {
  g_running->body(g_running->body_ctx);
  thread_exit();
}

void describe_deadlock(const Block& b) {
  unsigned at_block = 0, at_warp = 0;
  for (const ThreadState& t : b.threads) {
    if (t.done) continue;
    (t.wait == Wait::Block ? at_block : at_warp) += 1;
  }
  report(
      "deadlock in block (%u,%u,%u): %u threads wait at __syncthreads, %u in warp "
      "collectives, %u have exited; none can proceed",
      blockIdx.x, blockIdx.y, blockIdx.z, at_block, at_warp,
      static_cast<unsigned>(b.threads.size()) - b.live);
}

// Runs the current block's threads round-robin until all exit, or none can make progress.
void run_block(Block& b) {
  for (std::size_t i = 0; i < b.threads.size(); ++i) {
    ThreadState& t = b.threads[i];
    t.done = false;
    t.wait = Wait::None;
    t.wait_on = nullptr;
    make_context(t.ctx, stack_for(i), thread_main, nullptr);
  }
  for (WarpState& w : b.warps) {
    w.exited = w.arrived = w.mask = w.generation = 0;
  }
  b.live = static_cast<unsigned>(b.threads.size());
  b.barrier_arrived = 0;
  if (b.shared_bytes) std::memset(b.shared, 0xff, b.shared_bytes);  // like garbage: NaN
  b.poisoned.clear();
  race_interval_begins();
  b.turns.resize(b.threads.size());
  std::iota(b.turns.begin(), b.turns.end(), 0u);
  if (order_seed() != 0) std::shuffle(b.turns.begin(), b.turns.end(), g_order);
  while (b.live > 0 && !b.failed) {
    const uint64_t before = b.progress;
    for (const unsigned i : b.turns) {
      ThreadState& t = b.threads[i];
      if (t.done || (t.wait_on && *t.wait_on == t.wait_value)) continue;
      b.current = &t;
      threadIdx = t.idx;
      switch_context(b.scheduler, t.ctx);
      if (b.failed) return;
    }
    if (b.live > 0 && b.progress == before) {
      describe_deadlock(b);
      b.failed = true;
    }
  }
}

struct AlignedFree {
  void operator()(unsigned char* p) const { std::free(p); }
};

}  // namespace

unsigned order_seed() {
  static const unsigned seed = [] {
    const char* v = std::getenv("CUDA_EMU_SEED");
    return v ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : 1u;
  }();
  return seed;
}

uint64_t launches() {
  return g_launches;
}

void wait_for_change(const unsigned& generation, unsigned value, Wait why) {
  ThreadState& t = *g_running->current;
  t.wait = why;
  t.wait_on = &generation;
  t.wait_value = value;
  while (generation == value) yield();
  t.wait = Wait::None;
  t.wait_on = nullptr;
}

Block* running_block() {
  return g_running;
}

void yield() {
  Block& b = *g_running;
  switch_context(b.current->ctx, b.scheduler);
}

bool run_blocks(dim3 grid, dim3 block, std::size_t shared_bytes, void (*body)(void*), void* ctx) {
  if (g_running) {
    report("a kernel launched a kernel (dynamic parallelism is not emulated)");
    return false;
  }
  thread_local Block b;
  b.body = body;
  b.body_ctx = ctx;
  b.failed = false;
  const unsigned n = block.x * block.y * block.z;
  b.threads.resize(n);
  for (unsigned z = 0, i = 0; z < block.z; ++z)
    for (unsigned y = 0; y < block.y; ++y)
      for (unsigned x = 0; x < block.x; ++x, ++i)
        b.threads[i].idx = {x, y, z}, b.threads[i].linear = i;
  b.warps.resize((n + 31) / 32);
  for (std::size_t w = 0; w < b.warps.size(); ++w) {
    const unsigned count = std::min(32u, n - static_cast<unsigned>(w) * 32);
    b.warps[w].lanes = count == 32 ? ~0u : (1u << count) - 1;
  }
  // Dynamic shared memory, 1 KiB aligned as on a GPU (where it starts the block's window).
  std::unique_ptr<unsigned char, AlignedFree> shared(static_cast<unsigned char*>(
      std::aligned_alloc(1024, (shared_bytes + 1023) / 1024 * 1024 + 1024)));
  b.shared = shared.get();
  b.shared_bytes = shared_bytes;

  gridDim = grid;
  blockDim = block;
  ++g_launches;
  g_order.seed(order_seed() * 0x9e3779b97f4a7c15ull + g_launches);
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (order_seed() != 0) std::shuffle(order.begin(), order.end(), g_order);
  g_running = &b;
  for (uint64_t i = 0; i < blocks && !b.failed; ++i) {
    const uint64_t at = order[i];
    blockIdx = {static_cast<unsigned>(at % grid.x), static_cast<unsigned>(at / grid.x % grid.y),
                static_cast<unsigned>(at / grid.x / grid.y)};
    run_block(b);
  }
  g_running = nullptr;
  b.current = nullptr;
  race_launch_ends();
  return !b.failed;
}

}  // namespace emu::detail

namespace emu {

using detail::g_running;

void* dynamic_shared_memory() {
  if (!g_running) device_error("extern __shared__ memory used outside a kernel");
  return g_running->shared;
}

void poison_shared(void* p, std::size_t bytes) {
  detail::Block* b = g_running;
  if (!b) return;
  for (const void* q : b->poisoned)
    if (q == p) return;
  b->poisoned.push_back(p);
  detail::race_static_shared(p, bytes);
  std::memset(p, 0xff, bytes);
}

void device_error(const char* what) {
  detail::Block* b = g_running;
  if (!b || !b->current) {
    detail::report("device error outside a kernel: %s", what);
    std::abort();
  }
  detail::report(
      "device error in block (%u,%u,%u) thread (%u,%u,%u) (launch %llu, CUDA_EMU_SEED=%u): %s",
      blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z,
      static_cast<unsigned long long>(detail::g_launches), detail::order_seed(), what);
  b->failed = true;
  detail::switch_context(b->current->ctx, b->scheduler);
  std::abort();  // an abandoned block is never resumed
}

void sync_block() {
  detail::Block& b = *g_running;
  const unsigned generation = b.barrier_generation;
  ++b.progress;
  if (++b.barrier_arrived == b.live) {
    b.barrier_arrived = 0;
    ++b.barrier_generation;
    detail::race_interval_begins();
    return;
  }
  detail::wait_for_change(b.barrier_generation, generation, detail::Wait::Block);
}

WarpSlots warp_exchange(unsigned mask, const void* value, std::size_t bytes) {
  detail::Block& b = *g_running;
  detail::ThreadState& t = *b.current;
  detail::WarpState& w = b.warps[t.linear / 32];
  const unsigned lane = t.linear % 32, bit = 1u << lane;
  if (!(mask & bit)) device_error("warp collective whose mask leaves out the calling lane");
  if (mask & ~w.lanes) device_error("warp collective naming lanes past the end of the block");
  if (mask & w.exited) device_error("warp collective naming a lane that has exited");
  if (w.arrived == 0) {
    w.mask = mask;
  } else if (w.mask != mask) {
    device_error("lanes of one warp in collectives with different masks (not emulated)");
  }
  const unsigned generation = w.generation, buffer = generation & 1u;
  if (bytes) std::memcpy(w.slots[buffer][lane], value, bytes);
  w.arrived |= bit;
  ++b.progress;
  if (w.arrived == mask) {
    w.slot_mask[buffer] = mask;
    w.arrived = 0;
    ++w.generation;
  } else {
    detail::wait_for_change(w.generation, generation, detail::Wait::Warp);
  }
  return {w.slot_mask[buffer], w.slots[buffer]};
}

unsigned active_lanes() {
  const detail::ThreadState& t = *g_running->current;
  const detail::WarpState& w = g_running->warps[t.linear / 32];
  return w.lanes & ~w.exited;
}

}  // namespace emu
