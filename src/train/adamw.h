#pragma once
// AdamW on FP32 master weights with FP32 moments; weight decay only on parameters marked to
// decay (matrices). Gradient clipping by global norm. Deterministic: fixed loop orders. The
// moments live with the parameters, in their backend's memory, and the update is the backend's
// optimizer op over a table of them (kernels/backend.h), the same bits on every backend.
#include <cstdint>
#include <vector>

#include "nn/parameter.h"

namespace fp8lm {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// The parameters [begin, end) of a list (at most its end): a ZeRO-1 rank's share.
struct OptimizerShard {
  size_t begin = 0, end = SIZE_MAX;
};

class AdamW {
 public:
  AdamW(ParameterList params, AdamWConfig cfg, OptimizerShard shard = {});
  // One update with learning rate lr, each gradient multiplied by grad_scale as it is read
  // (gradient clipping folded in); bumps each parameter's version. Fused (the default): one
  // pass over every parameter, which also rewrites a parameter's BF16 copy where it was current
  // (Parameter::value16), so it stays current; unfused (--no-fusion): one per parameter, the
  // copies left for their GEMMs to make again. The same bits.
  void step(float lr, float grad_scale = 1.0f);
  // The global gradient norm (the backend's, grad_norm's bits), read before a step so that a
  // non-finite one can skip it.
  float global_grad_norm();
  // The same norm left in backend memory for the caller to read with other values (null for a
  // shard of no parameters: its norm is 0), its clipping factor for max_norm in the float after
  // it.
  const float* grad_norm_on_device(float max_norm = 0.0f);
  // The step decided where the gradients are (issue 34: nothing read, so the host need not
  // wait): the norm and its clipping factor for max_norm, the decision (skipped when any of
  // losses[rows], backend memory, or the norm is not finite; kernels/tensor.h) and AdamW as it
  // says, the step count kept on the backend. The host counts the step as taken until it reads
  // the decision (count_skipped_step). Bumps the parameters' versions either way.
  struct DecidedStep {
    const float* norm;  // backend memory, like the decision
    const StepDecision* decision;
  };
  DecidedStep step_decided_on_backend(float lr, float max_norm, const float* losses, int64_t rows);
  // A decided step that the host has since read to have been skipped.
  void count_skipped_step() { --t_; }
  void zero_grad();
  int64_t steps() const { return t_; }
  const ParameterList& parameters() const { return params_; }
  // Parameter i's moments as host copies, and replacing them (Error unless numel() each).
  const std::vector<float> first_moment(size_t i) const { return m_[i].to_host(); }
  const std::vector<float> second_moment(size_t i) const { return v_[i].to_host(); }
  void set_moments(size_t i, const std::vector<float>& m, const std::vector<float>& v);
  // The moments where they live, for streaming to a file and loading from one.
  const BackendBuffer<float>& first_moment_buffer(size_t i) const { return m_[i]; }
  const BackendBuffer<float>& second_moment_buffer(size_t i) const { return v_[i]; }
  BackendBuffer<float>& first_moment_buffer(size_t i) { return m_[i]; }
  BackendBuffer<float>& second_moment_buffer(size_t i) { return v_[i]; }
  void set_steps(int64_t t) {
    t_ = t;
    decision_steps_current_ = false;
  }

  // ZeRO-1 (--zero 1): with a shard, this rank updates its parameters alone and keeps their
  // moments only; a step leaves the others as they were (the trainer all-gathers them) and the
  // gradient norm is the shard's. By default the shard is the whole list.
  OptimizerShard shard() const { return {begin_, end_}; }
  // Whether parameter i's moments are here: in the shard, or held for a checkpoint.
  bool holds_moments(size_t i) const {
    return m_[i].size() == static_cast<size_t>(params_[i]->numel());
  }
  // For writing a checkpoint on the rank that gathers the moments: every parameter's moment
  // buffers (zeroed where not held), and dropping those outside the shard again afterwards.
  void hold_all_moments();
  void release_moments_outside_shard();

 private:
  // The shard's moments (at construction).
  void build_shard();
  // The backend's table of the shard's tensors, as their buffers are now.
  void refresh_table();
  // Parameter i's moments, zeroed, unless they are here already.
  void hold_moments(size_t i);
  AdamWHyper hyper(float lr) const;
  // AdamW over the table as it is (refresh_table), fused or per tensor.
  void update(const AdamWHyper& h, const float* grad_scale, const StepDecision* decision);
  // The bias corrections' table on the backend covers step t (grown by doubling: rarely).
  void cover_bias_corrections(int64_t t);
  ParameterList params_;
  AdamWConfig cfg_;
  Backend& be_;  // the parameters'
  std::vector<BackendBuffer<float>> m_, v_;
  int64_t t_ = 0;
  std::vector<AdamWTensor> tensors_, fresh_;  // the table as uploaded, and as it is now
  std::vector<Parameter*> copied_;            // those whose BF16 copy the table writes (param16)
  BackendBuffer<AdamWTensor> table_{be_};
  BackendBuffer<float> norm_clip_{be_};  // the norm and the step's gradient scale
  // Decided steps: the decision (its step count is t_ once the host has read every decision),
  // whether its count was set from t_ since the host last changed t_ itself, and 1 - beta^t for
  // every t (host's bits: [2t], [2t + 1]).
  BackendBuffer<StepDecision> decision_{be_};
  bool decision_steps_current_ = false;
  BackendBuffer<float> bias_corrections_{be_};
  int64_t numel_ = 0;  // over the shard's parameters
  size_t begin_ = 0, end_ = 0;
};

// The global L2 norm of all gradients, in host memory: the CPU backend's grad_norm.
float grad_norm(const ParameterList& params);
// The factor that brings a gradient of this norm down to max_norm (1 when it is within, or
// when max_norm <= 0 turns clipping off).
float clip_factor(float norm, float max_norm);
// Scales every gradient so the global L2 norm is at most max_norm; returns the norm before.
float clip_grad_norm(const ParameterList& params, float max_norm);

// Linear warmup to max_lr over `warmup` steps, then cosine decay to min_lr at `total`.
float learning_rate(int64_t step, int64_t total, int64_t warmup, float max_lr, float min_lr);

}  // namespace fp8lm
