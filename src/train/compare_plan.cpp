#include "train/compare_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/enum_names.h"
#include "core/precision.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

bool per_tensor(const std::string& recipe) {
  return recipe == "delayed" || recipe == "current";
}

}  // namespace

std::vector<std::string> CompareArm::train_flags() const {
  std::vector<std::string> flags = {"--precision", precision};
  if (!recipe.empty()) flags.insert(flags.end(), {"--recipe", recipe});
  if (!format.empty()) flags.insert(flags.end(), {"--fp8-format", format});
  return flags;
}

std::vector<std::string> split_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma - start);
    if (item.empty())
      throw Error(
          fmt::format("{} '{}' has an empty item; give names separated by commas", flag, text));
    if (std::find(items.begin(), items.end(), item) != items.end())
      throw Error(fmt::format("{} names {} twice", flag, item));
    items.push_back(item);
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::vector<CompareArm> compare_arms(const CompareAxes& axes) {
  if (axes.precisions.empty()) throw Error("--precision names no precision");
  for (const std::string& p : axes.precisions) {
    if (parse_precision(p) == Precision::Auto)  // (an unknown name is refused here too)
      throw Error("--precision auto picks one per machine; a comparison names fp32, bf16 or fp8");
  }
  for (const std::string& r : axes.recipes) parse_scaling_kind(r);
  for (const std::string& f : axes.formats) parse_format(f);
  const bool fp8 = std::ranges::find(axes.precisions, "fp8") != axes.precisions.end();
  if (!fp8 && !axes.recipes.empty())
    throw Error("--recipe chooses among FP8 recipes, but --precision has no fp8: add it");
  if (!fp8 && !axes.formats.empty())
    throw Error("--fp8-format is an FP8 setting, but --precision has no fp8: add it");
  const std::vector<std::string> recipes =
      axes.recipes.empty() ? std::vector<std::string>{"delayed"} : axes.recipes;
  const std::vector<std::string> formats =
      axes.formats.empty() ? std::vector<std::string>{"hybrid"} : axes.formats;
  if (!axes.formats.empty() && std::ranges::none_of(recipes, per_tensor))
    throw Error(fmt::format(
        "--fp8-format applies to the per-tensor recipes (delayed, current), and --recipe {} has "
        "neither: the block recipes fix their own formats",
        fmt::join(recipes, ",")));

  std::vector<CompareArm> arms;
  for (const std::string& p : axes.precisions) {
    if (p != "fp8") {
      arms.push_back({p, p, "", ""});
      continue;
    }
    for (const std::string& r : recipes) {
      if (!per_tensor(r)) {
        arms.push_back({"fp8-" + r, p, r, ""});
        continue;
      }
      for (const std::string& f : formats) arms.push_back({"fp8-" + r + "-" + f, p, r, f});
    }
  }
  return arms;
}

std::vector<uint64_t> compare_seeds(uint64_t first, int64_t n) {
  if (n < 1 || n > 1000)
    throw Error(fmt::format("--seeds {} must be from 1 to 1000 (runs per arm)", n));
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < n; ++i) seeds.push_back(first + static_cast<uint64_t>(i));
  return seeds;
}

std::string compare_baseline(const std::vector<CompareArm>& arms, const std::string& asked) {
  const auto has = [&](const std::string& label) {
    return std::ranges::any_of(arms, [&](const CompareArm& a) { return a.label == label; });
  };
  if (!asked.empty()) {
    if (has(asked)) return asked;
    std::vector<std::string> labels;
    for (const CompareArm& a : arms) labels.push_back(a.label);
    throw Error(
        fmt::format("--baseline {} is not one of the arms ({})", asked, fmt::join(labels, ", ")));
  }
  return has("bf16") ? "bf16" : arms.front().label;
}

}  // namespace fp8lm
