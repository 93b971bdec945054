#pragma once
// Device atomics on host memory. Blocks run one at a time, but std::atomic_ref keeps them
// right if a test launches kernels from several host threads at once.
#include <atomic>
#include <bit>
#include <cstdint>

namespace emu {

template <typename T>
T atomic_add(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}

// Applies f to the value at p atomically (a compare-exchange loop), returning the old value.
template <typename T, typename F>
T atomic_update(T* p, F f) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (!a.compare_exchange_weak(old, f(old))) {
  }
  return old;
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
T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v);
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);
  return compare;  // the old value, whether or not it matched
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  return std::atomic_ref(*p).fetch_or(v);
}
inline unsigned atomicAnd(unsigned* p, unsigned v) {
  return std::atomic_ref(*p).fetch_and(v);
}
