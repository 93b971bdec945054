#pragma once
// The arms of `fp8lm compare`: every combination of --precision, --recipe and --fp8-format that
// makes sense, each run once per seed. An FP32 or BF16 arm has no recipe; the block recipes
// (block, mxfp8, nvfp4) fix their own element formats, so --fp8-format applies to the
// per-tensor recipes (delayed, current) alone. A list that asks for nothing (a recipe without
// fp8, a format without a per-tensor recipe) is refused by name rather than ignored.
#include <cstdint>
#include <string>
#include <vector>

namespace fp8lm {

struct CompareArm {
  std::string label;      // "bf16", "fp8-delayed-hybrid", "fp8-mxfp8": its directory under runs/
  std::string precision;  // fp32, bf16 or fp8
  std::string recipe;     // empty unless fp8
  std::string format;     // empty unless a per-tensor recipe
  // The train flags that make a run of this arm: --precision, and --recipe, --fp8-format.
  std::vector<std::string> train_flags() const;
};

// The lists as given; an empty recipes or formats list means the flag was not given (train's
// defaults then: delayed, hybrid).
struct CompareAxes {
  std::vector<std::string> precisions, recipes, formats;
};

// "a,b,c" -> {a, b, c}; Error naming the flag for an empty item or one given twice.
std::vector<std::string> split_list(const std::string& text, const std::string& flag);

std::vector<CompareArm> compare_arms(const CompareAxes& axes);

// The seeds of a comparison: first, first + 1, ..., n of them (Error unless 1 <= n <= 1000).
std::vector<uint64_t> compare_seeds(uint64_t first, int64_t n);

// The arm the others are measured against: `asked` (Error unless it is an arm's label), else
// bf16 where it is an arm, else the first arm.
std::string compare_baseline(const std::vector<CompareArm>& arms, const std::string& asked);

}  // namespace fp8lm
