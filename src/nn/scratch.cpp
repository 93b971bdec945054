#include "nn/scratch.h"

#include <map>
#include <vector>

#include "kernels/backend_buffer.h"

namespace fp8lm {
namespace {

// One buffer per role, for each backend this thread has used.
using Arena = std::vector<BackendBuffer<uint8_t>>;

std::map<const Backend*, Arena>& arenas() {
  thread_local std::map<const Backend*, Arena> a;
  return a;
}

}  // namespace

void* scratch_bytes(Backend& backend, Scratch role, size_t bytes) {
  Arena& arena = arenas()[&backend];
  if (arena.empty()) {
    for (size_t i = 0; i < static_cast<size_t>(Scratch::kCount); ++i) arena.emplace_back(backend);
  }
  BackendBuffer<uint8_t>& b = arena[static_cast<size_t>(role)];
  if (b.bytes() < bytes) b.resize((bytes + 63) / 64 * 64);
  return b.data();
}

size_t scratch_footprint() {
  size_t total = 0;
  for (const auto& [backend, arena] : arenas())
    for (const BackendBuffer<uint8_t>& b : arena) total += b.bytes();
  return total;
}

}  // namespace fp8lm
