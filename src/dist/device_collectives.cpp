#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dist/device_collectives.h"

namespace fp8lm {

bool ranks_share_a_gpu(Communicator& host, const std::string& pci_address) {
  // Each rank's machine and GPU as a fixed-size record, all-gathered.
  constexpr size_t kRecord = 320;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const std::string mine = fmt::format("{}/{}", name, pci_address).substr(0, kRecord - 1);
  const auto n = static_cast<size_t>(host.size());
  std::vector<uint8_t> all(n * kRecord, 0);
  std::memcpy(all.data() + static_cast<size_t>(host.rank()) * kRecord, mine.data(), mine.size());
  const std::vector<int> counts(n, static_cast<int>(kRecord));
  host.all_gather(std::span(all), counts, "GPU placement all-gather");
  std::vector<std::string> gpus;
  for (size_t r = 0; r < n; ++r)
    gpus.emplace_back(reinterpret_cast<const char*>(all.data() + r * kRecord));
  std::sort(gpus.begin(), gpus.end());
  return std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end();
}

}  // namespace fp8lm
