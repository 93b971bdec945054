#pragma once
// One block of a launch in progress: its threads' fibres, its barrier and warp state, and its
// shared memory. The blocks of a grid run one after another on the launching host thread, in
// an order drawn from CUDA_EMU_SEED (default 1; 0 keeps index order), and each block's
// threads take their turns in an order drawn from it too: a kernel whose result depends on
// which block or thread runs first (a GPU promises neither) gives different results for
// different seeds.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "context.h"
#include "emu/vector_types.h"
#include "emu/warp.h"

namespace emu::detail {

enum class Wait : uint8_t { None, Block, Warp };

struct ThreadState {
  Context ctx;
  uint3 idx{};
  unsigned linear = 0;
  bool done = false;
  Wait wait = Wait::None;
  // While waiting: the generation counter it waits on to change from wait_value. The
  // scheduler skips the thread until then, rather than resuming it only to wait again.
  const unsigned* wait_on = nullptr;
  unsigned wait_value = 0;
};

struct WarpState {
  unsigned lanes = 0;    // lanes that exist (the last warp of a block may be partial)
  unsigned exited = 0;   // lanes whose thread has returned
  unsigned arrived = 0;  // lanes waiting in the current collective
  unsigned mask = 0;     // the current collective's mask
  unsigned generation = 0;
  // Double-buffered by generation: a lane that leaves collective g early writes g+1's buffer
  // while its slower neighbours still read g's; g+2 cannot begin until all have left g+1.
  unsigned slot_mask[2] = {0, 0};
  unsigned char slots[2][32][kWarpSlotBytes];
};

struct Block {
  void (*body)(void*) = nullptr;
  void* body_ctx = nullptr;
  std::vector<ThreadState> threads;
  std::vector<unsigned> turns;  // the order in which threads take their turns in this block
  std::vector<WarpState> warps;
  unsigned live = 0;
  unsigned barrier_arrived = 0;
  unsigned barrier_generation = 0;
  uint64_t progress = 0;  // bumped by every arrival and exit: the deadlock detector's clock
  bool failed = false;
  ThreadState* current = nullptr;
  Context scheduler;
  unsigned char* shared = nullptr;  // dynamic shared memory
  std::size_t shared_bytes = 0;
  std::vector<const void*> poisoned;  // static __shared__ variables poisoned in this block
};

// CUDA_EMU_SEED, and the number of launches this host thread has made (what a failure's
// report names, so that its order can be replayed).
unsigned order_seed();
uint64_t launches();

// The block running on this host thread (null outside a launch).
Block* running_block();

// Runs every block of the grid; false if a device error or a deadlock abandoned it.
bool run_blocks(dim3 grid, dim3 block, std::size_t shared_bytes, void (*body)(void*), void* ctx);

// Back to the scheduler; the running thread resumes on its next turn.
void yield();

// Suspends the running thread until generation differs from value.
void wait_for_change(const unsigned& generation, unsigned value, Wait why);

}  // namespace emu::detail
