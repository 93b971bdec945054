#pragma once
// FP8 recipes, with Transformer Engine's names, fields and defaults (docs/reference/numerics.md).
namespace fp8lm {

// Which FP8 format each tensor gets. E4M3: all of them. HYBRID: E4M3 forward (inputs,
// weights), E5M2 backward (gradients), whose range matters more than precision.
enum class Format { E4M3, Hybrid };

enum class AmaxComputeAlgo { Max, MostRecent };

inline constexpr int kMaxAmaxHistoryLen = 65536;

struct DelayedScaling {
  int margin = 0;  // scale = (fp8_max / amax) / 2^margin
  Format format = Format::Hybrid;
  int amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::Max;
  bool reduce_amax = true;  // max-reduce new amaxes across processes before the update

  // Throws Error naming the field for a history length outside [1, kMaxAmaxHistoryLen] or a
  // negative margin.
  void validate() const;
};

// The scale comes from each tensor's own amax, in the same step (two passes over the data).
struct CurrentScaling {
  int margin = 0;
  Format format = Format::Hybrid;
  void validate() const;
};

// TE's five recipes: per-tensor delayed and current scaling (DelayedScaling,
// Float8CurrentScaling) and the block-scaled ones (issue 14): Float8BlockScaling ("block":
// 1x128 tiles, 128x128 weight blocks, FP32 power-of-two scales), MXFP8BlockScaling ("mxfp8":
// an E8M0 scale per 32 values) and NVFP4BlockScaling ("nvfp4": E2M1 values, an E4M3 scale per
// 16 and an FP32 tensor scale). The block-scaled recipes cast every tensor in E4M3 (TE's
// default for them).
enum class ScalingKind { Delayed, Current, Block, Mxfp8, Nvfp4 };

// TE's QParams of Float8BlockScaling (one set for inputs, weights and gradients, as TE's
// defaults are).
struct BlockScalingParams {
  bool power_2_scale = true;
  float amax_epsilon = 0.0f;
};

// TE's NVFP4BlockScaling switches: the 16x16 random Hadamard transform on the weight
// gradient's inputs, stochastic rounding of gradients, 16x16 blocks for weights.
struct Nvfp4Options {
  bool disable_rht = false;
  bool disable_stochastic_rounding = false;
  bool disable_2d_quantization = false;
};

// The recipe fields a user sets (TE's DelayedScaling, plus which kind of scaling).
struct Fp8Recipe {
  ScalingKind kind = ScalingKind::Delayed;
  DelayedScaling delayed;  // margin, format, history length, algorithm, reduce_amax
  BlockScalingParams block;
  Nvfp4Options nvfp4;
  CurrentScaling current() const { return {delayed.margin, delayed.format}; }
  Format format() const { return delayed.format; }
  bool block_scaled() const {
    return kind == ScalingKind::Block || kind == ScalingKind::Mxfp8 || kind == ScalingKind::Nvfp4;
  }
};

}  // namespace fp8lm
