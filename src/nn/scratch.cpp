#include "nn/scratch.h"

#include <array>
#include <cstdlib>
#include <memory>
#include <new>

namespace fp8lm {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct Buffer {
  std::unique_ptr<void, FreeDeleter> data;
  size_t bytes = 0;
};

std::array<Buffer, static_cast<size_t>(Scratch::kCount)>& buffers() {
  thread_local std::array<Buffer, static_cast<size_t>(Scratch::kCount)> b;
  return b;
}

}  // namespace

void* scratch_bytes(Scratch role, size_t bytes) {
  Buffer& b = buffers()[static_cast<size_t>(role)];
  if (b.bytes < bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    b.data.reset();  // the old contents are dead: free first, so peak memory is not doubled
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw std::bad_alloc();
    b.data.reset(p);
    b.bytes = rounded;
  }
  return b.data.get();
}

size_t scratch_footprint() {
  size_t total = 0;
  for (const Buffer& b : buffers()) total += b.bytes;
  return total;
}

}  // namespace fp8lm
