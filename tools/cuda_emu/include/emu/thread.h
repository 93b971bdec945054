#pragma once
// The running GPU thread's coordinates and block-wide operations. The coordinates are plain
// thread-local variables that the block scheduler (src/block_scheduler.cpp) sets before it
// switches to a thread's fibre; every switch happens inside an out-of-line call, so kernel code
// re-reads them after any barrier.
#include <cstddef>

#include "emu/vector_types.h"

inline thread_local uint3 threadIdx{};
inline thread_local uint3 blockIdx{};
inline thread_local dim3 blockDim{};
inline thread_local dim3 gridDim{};
inline constexpr int warpSize = 32;

namespace emu {

// The running block's dynamic shared memory (extern __shared__), poisoned with 0xFF bytes
// when the block starts.
void* dynamic_shared_memory();

// Fills a static __shared__ variable with 0xFF bytes the first time a thread of the running
// block passes its declaration (rewrite_cu.py adds the call after each one).
void poison_shared(void* p, std::size_t bytes);

// Reports a device-side error (with the thread's coordinates) and abandons the launch; the
// next cudaGetLastError or synchronization returns cudaErrorLaunchFailure.
[[noreturn]] void device_error(const char* what);

// __syncthreads: waits until every thread of the block that has not exited arrives.
void sync_block();

// The linear index of the running thread in its block, and its lane and warp.
inline unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

}  // namespace emu

inline void __syncthreads() {
  emu::sync_block();
}
// A fence orders memory; with every thread on one host thread, memory is always ordered.
inline void __threadfence() {}
inline void __threadfence_block() {}
