#pragma once
// Device atomics on host memory. Blocks run one at a time, but real atomic operations keep
// them right if a test launches kernels from several host threads at once.
//
// They are GCC's __atomic builtins written out in functions the shared-memory race check's
// instrumentation leaves alone (src/shared_races.h: atomics may meet in any order). Not
// std::atomic_ref: its member functions would not be inlined into a function without the
// instrumentation, and so would be instrumented themselves.
#include <cstdint>

#define CUDA_EMU_ATOMIC __attribute__((no_sanitize_address))

namespace emu {

template <typename T>
CUDA_EMU_ATOMIC T atomic_add(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

// Applies f to the value at p atomically (a compare-exchange loop), returning the old value.
template <typename T, typename F>
CUDA_EMU_ATOMIC T atomic_update(T* p, F f) {
  T old;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  for (;;) {
    T next = f(old);
    if (__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return old;
  }
}

}  // namespace emu

inline int atomicAdd(int* p, int v) {
  return emu::atomic_add(p, v);
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return emu::atomic_add(p, v);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return emu::atomic_add(p, v);
}
inline float atomicAdd(float* p, float v) {
  return emu::atomic_update(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double* p, double v) {
  return emu::atomic_update(p, [v](double o) { return o + v; });
}
inline int atomicSub(int* p, int v) {
  return emu::atomic_add(p, -v);
}
inline unsigned atomicSub(unsigned* p, unsigned v) {
  return emu::atomic_add(p, 0u - v);
}

template <typename T>
T atomicMax(T* p, T v) {
  return emu::atomic_update(p, [v](T o) { return o < v ? v : o; });
}
template <typename T>
T atomicMin(T* p, T v) {
  return emu::atomic_update(p, [v](T o) { return v < o ? v : o; });
}
template <typename T>
CUDA_EMU_ATOMIC T atomicExch(T* p, T v) {
  T old;
  __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
  return old;
}
template <typename T>
CUDA_EMU_ATOMIC T atomicCAS(T* p, T compare, T v) {
  __atomic_compare_exchange(p, &compare, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, whether or not it matched
}
CUDA_EMU_ATOMIC inline unsigned atomicOr(unsigned* p, unsigned v) {
  return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
CUDA_EMU_ATOMIC inline unsigned atomicAnd(unsigned* p, unsigned v) {
  return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
}
