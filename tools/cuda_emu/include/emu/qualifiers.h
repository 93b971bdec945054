#pragma once
// CUDA's declaration specifiers, for g++: device and host code are the same host code here.
// __shared__ becomes a static thread-local: the blocks of a launch run one after another on the
// launching host thread, so one copy per host thread is one copy per running block. (extern
// __shared__ arrays are rewritten by rewrite_cu.py into emu::dynamic_shared_memory().)

#define __global__
#define __device__
#define __host__
#define __constant__ static
#define __managed__
#define __shared__ static thread_local
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __grid_constant__
