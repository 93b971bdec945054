#pragma once
// FP8 recipes, with Transformer Engine's names, fields and defaults (DESIGN.md §3).
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

enum class ScalingKind { Delayed, Current };

// The recipe fields a user sets (TE's DelayedScaling, plus which kind of scaling).
struct Fp8Recipe {
  ScalingKind kind = ScalingKind::Delayed;
  DelayedScaling delayed;  // margin, format, history length, algorithm, reduce_amax
  CurrentScaling current() const { return {delayed.margin, delayed.format}; }
  Format format() const { return delayed.format; }
};

}  // namespace fp8lm
