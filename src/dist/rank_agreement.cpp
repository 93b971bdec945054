#include "dist/rank_agreement.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string_view>

#include "fp8lm/error.h"

namespace fp8lm {

namespace {

// FNV-1a: stable across processes and builds, which std::hash does not promise.
uint64_t fnv1a(std::string_view text, uint64_t h = 14695981039346656037ull) {
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

void require_ranks_agree(Communicator& ranks, const std::vector<NamedValue>& settings) {
  const int size = ranks.size();
  if (size == 1) return;
  // The counts first: ranks of different fp8lm versions may know different settings, and the
  // all-gather below needs the same count from each.
  float counts[2] = {static_cast<float>(settings.size()), -static_cast<float>(settings.size())};
  ranks.all_reduce_max(counts, "settings check");
  if (counts[0] != -counts[1])
    throw Error("the ranks run different versions of fp8lm: they know different settings");
  const size_t n = settings.size();
  std::vector<uint64_t> mine(n);
  for (size_t i = 0; i < n; ++i)
    mine[i] = fnv1a(settings[i].second, fnv1a(settings[i].first + '\0'));
  std::vector<uint8_t> all(n * sizeof(uint64_t) * static_cast<size_t>(size));
  std::memcpy(all.data() + n * sizeof(uint64_t) * static_cast<size_t>(ranks.rank()), mine.data(),
              n * sizeof(uint64_t));
  const std::vector<int> bytes(static_cast<size_t>(size), static_cast<int>(n * sizeof(uint64_t)));
  ranks.all_gather(all, bytes, "settings check");
  const auto hash = [&](int rank, size_t i) {
    uint64_t h;
    std::memcpy(&h, all.data() + (static_cast<size_t>(rank) * n + i) * sizeof(uint64_t), sizeof h);
    return h;
  };
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> differ;
    for (int r = 1; r < size; ++r)
      if (hash(r, i) != hash(0, i)) differ.push_back(r);
    if (differ.empty()) continue;
    throw Error(fmt::format(
        "the ranks were started with different settings: {} differs from rank 0's on rank{} {} "
        "(this rank, {}, has {}); start every rank with the same settings",
        settings[i].first, differ.size() > 1 ? "s" : "", fmt::join(differ, ", "), ranks.rank(),
        settings[i].second.empty() ? "none" : settings[i].second));
  }
}

}  // namespace fp8lm
