#pragma once
// Every GEMM's FP8 scaling state in one structure-of-arrays store, in the model's backend
// memory (TE's fp8_meta tensors): per slot a scale, scale_inv, amax history, format and the
// last cast's saturated/flushed counters. Kernels write through a slot's Fp8Out (its scale, its
// amax accumulator history[0], its counters) without the host in between; the delayed-scaling
// update is one backend call per direction for every GEMM, with the amax reduction across
// processes in front of it; current scaling sets a slot's scale from a tensor's amax on the
// backend. Host copies (Fp8Meta) serve checkpoints, inspect and the metrics.
//
// Slots: GEMM g's forward slots (input, weight, output) at 3g + k, its backward slots
// (grad_output, grad_input) at 3n + 2g + k, so each direction is one contiguous range.
#include <cstdint>
#include <vector>

#include "fp8/scaling.h"
#include "kernels/backend_buffer.h"

namespace fp8lm {

class ScalingStore {
 public:
  ScalingStore(Backend& backend, int gemms, const DelayedScaling& recipe);

  // Rebuilt for a recipe's history length and formats (fresh state) when they differ; returns
  // whether it was rebuilt.
  bool conform(const DelayedScaling& recipe);
  // Fresh state for a recipe, whatever the current one.
  void reset(const DelayedScaling& recipe) { build(recipe); }
  int gemms() const { return n_; }
  int history_len() const { return history_; }
  // Bumped by every rebuild, so cached casts made with an older state know it.
  uint64_t generation() const { return generation_; }

  DType format(int gemm, Slot s) const { return format_[index(gemm, s)]; }
  float* scale(int gemm, Slot s) { return scale_.data() + index(gemm, s); }
  float* scale_inv(int gemm, Slot s) { return scale_inv_.data() + index(gemm, s); }
  float* amax(int gemm, Slot s) { return history_buf_.data() + index(gemm, s) * history_; }
  // Bumped whenever the slot's scale may change (a rebuild, an update of its direction,
  // set_meta, roll_back, a cast through it, current scaling into it): a cast made at the
  // version the slot still has used the scale the slot holds now, which the host so knows
  // without reading the scale back from the device (issue 34).
  uint64_t scale_version(int gemm, Slot s) const { return scale_version_[index(gemm, s)]; }

  // Starts a cast of n values through a slot: its counters restart (they describe the last
  // cast) and the descriptor an op writes the codes with.
  Fp8Out begin_cast(int gemm, Slot s, uint8_t* codes, int64_t n);
  // Current scaling: the slot's scale (and scale_inv) from an amax in backend memory.
  void scale_from_amax(int gemm, Slot s, const float* amax, const CurrentScaling& recipe);

  // Delayed scaling of one direction's slots of every GEMM: the newest amaxes reduced across
  // processes first (when the recipe asks and a reducer is given), then the backend's update.
  void update(Direction d, const DelayedScaling& recipe, const AmaxReducer& reduce = {});

  // Each GEMM's most saturated slot in the last casts (the fraction of its values clamped to
  // the format's max), from one read of the counters: what the automatic BF16 fallback watches.
  struct Saturation {
    double fraction = 0;
    Slot slot = Slot::Input;
  };
  std::vector<Saturation> saturation() const;
  // The same from a host copy of the counters (counters(), counter_bytes() of them), for a
  // caller that reads them with other values in one wait for the device.
  std::vector<Saturation> saturation(const unsigned long long* counts) const;
  const unsigned long long* counters() const { return counts_.data(); }
  size_t counter_bytes() const { return counts_.size() * sizeof(unsigned long long); }

  // One GEMM's slots as host copies, and replacing them (a meta made for another recipe,
  // history length or formats, rebuilds the store to it first).
  Fp8Meta meta(int gemm) const;
  void set_meta(int gemm, const Fp8Meta& m);

  // A copy of every slot (in backend memory), and going back to it: a step found non-finite
  // leaves the scaling state as it was before the step (its amaxes would poison the history).
  void remember();
  void roll_back();
  // roll_back() on the backend where *skip (backend memory) is non-zero: a step decided there
  // (AdamW::step_decided_on_backend), nothing read. The host's record of each slot's last cast
  // size stays: a step's casts have the same sizes as the one before. False, and nothing done,
  // when the step rebuilt the store (a new recipe): the caller reads the decision and calls
  // roll_back() itself.
  bool roll_back_if(const int32_t* skip);

  Backend& backend() const { return be_; }

 private:
  size_t index(int gemm, Slot s) const;
  void build(const DelayedScaling& recipe);

  Backend& be_;
  int n_;
  int history_ = 1;
  Format recipe_format_ = Format::Hybrid;
  uint64_t generation_ = 0;
  std::vector<DType> format_;
  std::vector<int64_t> cast_n_;          // values in each slot's last cast (host)
  std::vector<uint64_t> scale_version_;  // per slot (scale_version)
  uint64_t versions_ = 0;                // the last version handed out
  void bump_scale_versions(size_t first, size_t count);
  BackendBuffer<float> history_buf_{be_}, scale_{be_}, scale_inv_{be_}, fp8_max_{be_};
  BackendBuffer<unsigned long long> counts_{be_};  // [slot][saturated, flushed]
  // remember()'s copy (saved_history_ 0: none yet).
  int saved_history_ = 0;
  Format saved_format_ = Format::Hybrid;
  std::vector<int64_t> saved_cast_n_;
  BackendBuffer<float> saved_history_buf_{be_}, saved_scale_{be_}, saved_scale_inv_{be_};
  BackendBuffer<unsigned long long> saved_counts_{be_};
  // update()'s cross-process reduction: the newest amaxes, on the backend and on the host.
  BackendBuffer<float> reduce_gathered_{be_};
  std::vector<float> reduce_host_;
};

}  // namespace fp8lm
