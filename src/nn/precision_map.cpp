#include "nn/precision_map.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <sstream>

#include "fp8lm/error.h"

namespace fp8lm {

namespace {

std::vector<std::string> split_patterns(const std::string& map) {
  std::vector<std::string> out;
  std::stringstream in(map);
  for (std::string p; std::getline(in, p, ',');) {
    const size_t a = p.find_first_not_of(" \t"), b = p.find_last_not_of(" \t");
    if (a == std::string::npos)
      throw Error(fmt::format("--precision-map '{}': an empty pattern", map));
    out.push_back(p.substr(a, b - a + 1));
  }
  return out;
}

bool first_or_last_layer(const std::string& gemm, int64_t layers) {
  return gemm.starts_with("layers.0.") || gemm.starts_with(fmt::format("layers.{}.", layers - 1));
}

}  // namespace

std::vector<std::string> gemm_names(int64_t n_layers) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < n_layers; ++i)
    for (const char* g : {"qkv", "proj", "fc1", "fc2"})
      names.push_back(fmt::format("layers.{}.{}", i, g));
  return names;
}

std::vector<std::string> precision_map_gemms(int64_t n_layers, const std::string& map) {
  std::vector<std::string> kept;
  if (map.empty()) return kept;
  const std::vector<std::string> names = gemm_names(n_layers);
  const std::vector<std::string> patterns = split_patterns(map);
  const auto keeps = [&](const std::string& p, const std::string& gemm) {
    return p == "first-last-layers" ? first_or_last_layer(gemm, n_layers)
                                    : fnmatch(p.c_str(), gemm.c_str(), 0) == 0;
  };
  for (const std::string& p : patterns) {
    bool matched = p != "first-last-layers" && fnmatch(p.c_str(), "lm_head", 0) == 0;
    for (const std::string& g : names) matched |= keeps(p, g);
    if (!matched) {
      throw Error(fmt::format(
          "--precision-map: '{}' matches no GEMM (they are named layers.0.qkv to {}, or lm_head)",
          p, names.empty() ? "layers.0.fc2" : names.back()));
    }
  }
  for (const std::string& g : names)
    if (std::any_of(patterns.begin(), patterns.end(),
                    [&](const std::string& p) { return keeps(p, g); }))
      kept.push_back(g);
  return kept;
}

std::vector<std::string> apply_precision_map(GPT& model, const std::string& map) {
  const std::vector<std::string> kept = precision_map_gemms(model.config().n_layers, map);
  for (Linear* l : model.linears())
    l->keep_in_bf16(std::find(kept.begin(), kept.end(), l->name()) != kept.end());
  return kept;
}

}  // namespace fp8lm
