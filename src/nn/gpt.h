#pragma once
// TE's TransformerLayer (pre-norm: x + attention(norm(x)), then + mlp(norm(.))) and the GPT
// model around it: token embeddings (+ learned position embeddings, unless attention turns q
// and k by rotary embeddings), the layers, a final norm and an LM head (tied to the token
// embedding, or its own matrix), trained with fused softmax-cross-entropy.
#include <functional>
#include <memory>
#include <vector>

#include "fp8lm/generation.h"
#include "fp8lm/model_config.h"

#include "nn/attention.h"
#include "nn/layernorm_mlp.h"

namespace fp8lm {

class TransformerLayer {
 public:
  TransformerLayer(int index, const GPTConfig& cfg, Backend& backend = cpu_backend());
  void forward(const float* x, float* y, int64_t B, int64_t T);  // y overwritten
  // grad: the gradient of the layer's output in, of its input out (in place).
  void backward(float* grad);
  void decode(const float* x, float* y, KvCache& cache, int64_t pos);  // one token per sequence

  MultiheadAttention& attention() { return attention_; }
  LayerNormMLP& mlp() { return mlp_; }
  ParameterList parameters();
  MemoryUse memory_use() const {
    MemoryUse m{bytes_of(resid_), 0};
    m += attention_.memory_use();
    m += mlp_.memory_use();
    return m;
  }

 private:
  Backend& be_;
  int64_t d_;
  int64_t rows_ = 0;
  MultiheadAttention attention_;
  LayerNormMLP mlp_;
  BackendBuffer<float> resid_{be_};  // the mid-layer residual: LayerNorm 2's saved input
  // y = resid + mlp(resid), resid = x + attend's output (attend(float* out) writes it).
  template <class Attend>
  void run(const float* x, float* y, int64_t rows, Attend attend);
};

class GPT {
 public:
  // Its ops run on `backend` (kernels/backend.h).
  GPT(const GPTConfig& cfg, uint64_t seed, Backend& backend = cpu_backend());

  // tokens [B, T]; targets [B, T] (nullptr: inference, no loss). Returns the mean loss (0
  // without targets) and, with targets, leaves the logits' gradient ready for backward: that of
  // the mean over loss_rows rows (0: these B·T). A data-parallel rank passes the global batch's
  // rows, so its gradients are its part of the global mean's, as a single process's are (and
  // so are the amaxes of every gradient it casts to FP8).
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                int64_t loss_rows = 0);
  // The same forward with targets and the fused loss, its rows' losses left in backend memory
  // (losses [B*T]) rather than read: the mean is mean_loss (kernels/loss.h) of them and the
  // targets once the caller reads them, so a training step waits for the device once, not per
  // micro-batch. Targets are checked here (an Error names the first outside the vocabulary).
  void forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
               int64_t loss_rows, float* losses);
  // Called by backward each time a run of parameters' gradients is final for this backward:
  // [first, end) in parameters() order. The final norm's and an untied head's come first, then
  // each layer's from the last, the embeddings' (a tied head adds into the token embedding's)
  // last. A
  // data-parallel trainer starts reducing them while backward goes on.
  using GradientsReady = std::function<void(size_t first, size_t end)>;
  // Gradients += for the last forward; updates backward FP8 scales if it ran in FP8.
  void backward(const GradientsReady& ready = {});
  // Logits [B*T, V] of the last forward, in the backend's memory (without targets; with targets
  // they hold dlogits).
  const float* logits() const { return logits_.data(); }

  // Greedy generation with a KV cache: prompts [B, P] -> the n_new tokens after each prompt.
  std::vector<int32_t> generate(const int32_t* prompts, int64_t B, int64_t P, int64_t n_new);
  // Generation as `o` says (greedy or sampled, stop tokens, each token as it comes): each
  // prompt's new tokens, at most n_new, fewer where the sequence stopped.
  std::vector<std::vector<int32_t>> generate_sequences(const int32_t* prompts, int64_t B, int64_t P,
                                                       int64_t n_new, const GenerateOptions& o);

  const GPTConfig& config() const { return cfg_; }
  Backend& backend() const { return be_; }
  // This model on another backend: the weights, the FP8 state and which Linears keep FP8
  // weights (their codes are made again by Linear::requantize_weight).
  std::unique_ptr<GPT> to(Backend& backend);
  TransformerLayer& layer(int64_t i) { return *layers_[static_cast<size_t>(i)]; }
  Parameter& token_embedding() { return wte_; }
  // The LM head's weight [V, d]: the token embedding when tied.
  Parameter& head_weight() { return cfg_.tied_head ? wte_ : lm_head_; }
  const Parameter& head_weight() const { return cfg_.tied_head ? wte_ : lm_head_; }
  ParameterList parameters();
  // Every GEMM's FP8 state (linears() order) as host copies, and replacing it.
  std::vector<Fp8Meta> fp8_state();
  void set_fp8_state(const std::vector<Fp8Meta>& metas);
  ScalingStore& scaling() { return *scaling_; }
  // Builds every GEMM's FP8 state for a recipe (history length, formats), as the first FP8
  // forward would; done up front so that restored state is not rebuilt away.
  void init_fp8(const DelayedScaling& recipe);
  std::vector<Linear*> linears();
  // Saved activations (with the logits and the head's inputs) and weight casts, as allocated
  // by the largest step so far.
  MemoryUse memory_use() const;

 private:
  void head_forward(int64_t rows);
  const float* position_table() const {
    return cfg_.learned_positions() ? wpe_.value.data() : nullptr;
  }
  Backend& be_;
  GPTConfig cfg_;
  Parameter wte_, wpe_;  // wpe_ empty (and not a parameter) under rotary embeddings
  Parameter lm_head_;    // empty (and not a parameter) when tied
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  Norm lnf_;
  // Where layer l's parameters begin in parameters() (l = n_layers: the final norm's, then an
  // untied head's), and where they end.
  std::vector<size_t> param_begin_;
  int64_t B_ = 0, T_ = 0;
  BackendBuffer<int32_t> tokens_{be_}, targets_{be_};  // the batch, in backend memory
  bool fp8_used_ = false;
  Fp8Recipe recipe_;
  AmaxReducer reduce_;
  Precision head_mode_ = Precision::Fp32;
  std::unique_ptr<ScalingStore> scaling_;   // every Linear's FP8 slots
  std::vector<BackendBuffer<float>> acts_;  // residual stream before each layer, and after the last
  BackendBuffer<float> normed_{be_}, logits_{be_}, dnormed_{be_}, dacts_{be_};
  BackendBuffer<float> probs_{be_};       // --no-fusion: the softmax the unfused loss stores
  BackendBuffer<float> row_losses_{be_};  // forward's per-row losses, read back at once
  std::vector<float> row_losses_host_;
  // The body of forward: tokens to logits (training: backward follows).
  void forward_to_logits(const int32_t* tokens, bool training, int64_t B, int64_t T);
  void upload_targets(const int32_t* targets, int64_t rows);
  // The loss gradient's factor: that of the mean over loss_rows rows (0: these rows).
  static float grad_scale(int64_t rows, int64_t loss_rows);
  BackendBuffer<bf16_t> normed16_{be_}, dlogits16_{be_};
};

}  // namespace fp8lm
