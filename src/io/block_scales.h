#pragma once
// The block_scales record a model file's metadata (and metrics.jsonl) holds for block-scaled
// recipes (io/checkpoint.h block_scales_json writes it), read back checked: a reader can then
// index by its exponents and divide by its counts without looking again.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fp8/block_stats.h"

namespace fp8lm {

// The powers of two a block's decode multiplier can have: an FP32 scale_inv (2^-149 to 2^127),
// an E8M0 scale (2^-127 to 2^127), or NVFP4's E4M3 block scale (2^-9 to 448) times a float
// tensor scale_inv.
inline constexpr int kMinBlockExponent = -158;
inline constexpr int kMaxBlockExponent = 135;

// GEMM -> tensor role -> what its last cast did.
using BlockScaleRecord = std::map<std::string, std::map<std::string, BlockScaleStats>>;

// Error naming origin and the entry unless every count is an integer from 0 to the blocks (the
// blocks at most 2^53, exact in a double), the exponents together no more than the blocks, each
// exponent an integer from kMinBlockExponent to kMaxBlockExponent, and the tensor scale finite
// and positive.
BlockScaleRecord block_scales_from_json(const nlohmann::json& j, const std::string& origin);

}  // namespace fp8lm
