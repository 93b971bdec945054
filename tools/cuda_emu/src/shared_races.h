#pragma once
// The shared-memory race check (what compute-sanitizer's racecheck reports on a GPU). The
// rewritten device code is compiled with GCC's -fsanitize=kernel-address instrumentation, which
// calls __asan_load*/__asan_store* before every load and store; this runtime supplies those
// calls. An access to the running block's shared memory (dynamic, and every static __shared__
// variable the block has declared) is checked against the last write and the reads of the same
// bytes since the last __syncthreads: a write and another thread's access in the same interval
// is a race, unless both threads are lanes of one warp with a warp collective (__syncwarp, a
// shuffle, a vote) between them. A race is a device error naming both threads and the offset.
// Atomics are not instrumented (they may meet in any order). CUDA_EMU_RACECHECK=0 turns the
// check off (the calls remain, returning at once).
#include <cstddef>

namespace emu::detail {

struct Block;

// A block starts, or its barrier opens: accesses before it no longer meet accesses after it.
void race_interval_begins();
// The launch's blocks are done: accesses are host code's until the next block starts.
void race_launch_ends();

// A static __shared__ variable's bytes, as the running block declares it.
void race_static_shared(const void* p, std::size_t bytes);

}  // namespace emu::detail
