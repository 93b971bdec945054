#pragma once
// Scratch vectors reused across tensors of several sizes.
#include <cstddef>
#include <vector>

namespace fp8lm {

// v's storage for at least n elements. It only grows: resizing a vector up value-initialises
// the regrown part, so one resized to each tensor's size in turn would be zeroed again on every
// call after a smaller one.
template <class T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace fp8lm
