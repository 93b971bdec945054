#include "nn/gpt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "fp8lm/error.h"
#include "kernels/loss.h"
#include "nn/fusion.h"
#include "nn/sampling.h"
#include "nn/saved_activation.h"
#include "nn/scratch.h"

namespace fp8lm {

TransformerLayer::TransformerLayer(int index, const GPTConfig& cfg, Backend& backend)
    : be_(backend),
      d_(cfg.d_model),
      attention_(fmt::format("layers.{}", index), cfg, backend),
      mlp_(fmt::format("layers.{}", index), cfg.d_model, cfg.ffn, cfg.activation, cfg.normalization,
           cfg.bias, backend) {}

ParameterList TransformerLayer::parameters() {
  ParameterList p = attention_.parameters();
  for (Parameter* q : mlp_.parameters()) p.push_back(q);
  return p;
}

template <class Attend>
void TransformerLayer::run(const float* x, float* y, int64_t rows, Attend attend) {
  const int64_t n = rows * d_;
  float* attn_out = scratch<float>(be_, Scratch::LayerAttnOut, n);
  float* mlp_out = scratch<float>(be_, Scratch::LayerMlpOut, n);
  resid_.resize(static_cast<size_t>(n));
  attend(attn_out);
  if (fusion_enabled()) {  // the residual add runs inside LayerNorm 2's pass over each row
    mlp_.forward(x, mlp_out, rows, attn_out, resid_.data());
  } else {
    be_.add(resid_.data(), x, attn_out, n);
    mlp_.forward(resid_.data(), mlp_out, rows);
  }
  be_.add(y, resid_.data(), mlp_out, n);
}

void TransformerLayer::forward(const float* x, float* y, int64_t B, int64_t T) {
  rows_ = B * T;
  run(x, y, rows_, [&](float* attn_out) { attention_.forward(x, attn_out, B, T); });
}

void TransformerLayer::backward(float* grad) {
  // Each residual passes its gradient through and its branch adds to it, in place: a branch
  // reads all of its output's gradient before its norm's backward adds the input's (dx +=).
  mlp_.backward(grad, grad, rows_);
  attention_.backward(grad, grad);
}

void TransformerLayer::decode(const float* x, float* y, KvCache& cache, int64_t pos) {
  run(x, y, cache.B, [&](float* attn_out) { attention_.decode(x, attn_out, cache, pos); });
}

GPT::GPT(const GPTConfig& cfg, uint64_t seed, Backend& backend)
    : be_(backend),
      cfg_(cfg),
      wte_("wte", {cfg.vocab, cfg.d_model}, /*decays=*/true, backend),
      wpe_("wpe", {cfg.learned_positions() ? cfg.seq_len : 0, cfg.d_model}, /*decays=*/false,
           backend),
      lm_head_("lm_head", {cfg.tied_head ? 0 : cfg.vocab, cfg.d_model}, /*decays=*/true, backend),
      lnf_("lnf", cfg.d_model, cfg.normalization, kNormEps, backend) {
  cfg_.validate();
  for (int i = 0; i < cfg.n_layers; ++i)
    layers_.push_back(std::make_unique<TransformerLayer>(i, cfg, backend));
  // parameters(): the embeddings, each layer's, then the final norm's and an untied head's.
  param_begin_.push_back(cfg.learned_positions() ? 2 : 1);
  for (auto& layer : layers_)
    param_begin_.push_back(param_begin_.back() + layer->parameters().size());
  param_begin_.push_back(param_begin_.back() + lnf_.parameters().size() + (cfg.tied_head ? 0 : 1));
  // GPT-2's initialization: N(0, 0.02) for matrices and embeddings, the projections that write
  // into the residual stream scaled down by sqrt(2 * n_layers); biases 0, norm gains 1.
  std::mt19937_64 rng(seed);
  const auto fill = [&](Parameter& p, float stddev) {
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(p.numel()));
    for (float& x : v) x = d(rng);
    p.set_values(v);
  };
  fill(wte_, 0.02f);
  if (cfg.learned_positions()) fill(wpe_, 0.02f);
  if (!cfg.tied_head) fill(lm_head_, 0.02f);
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  for (auto& layer : layers_) {
    fill(layer->attention().qkv().linear().weight(), 0.02f);
    fill(layer->attention().proj().weight(), resid_std);
    fill(layer->mlp().fc1().weight(), 0.02f);
    fill(layer->mlp().fc2().weight(), resid_std);
  }
  DelayedScaling initial;  // TE's default before any FP8 forward: HYBRID, a history of one
  initial.amax_history_len = 1;
  const std::vector<Linear*> gemms = linears();
  scaling_ = std::make_unique<ScalingStore>(backend, static_cast<int>(gemms.size()), initial);
  for (size_t i = 0; i < gemms.size(); ++i) gemms[i]->bind_scaling(*scaling_, static_cast<int>(i));
}

ParameterList GPT::parameters() {
  ParameterList p{&wte_};
  if (cfg_.learned_positions()) p.push_back(&wpe_);
  for (auto& layer : layers_)
    for (Parameter* q : layer->parameters()) p.push_back(q);
  for (Parameter* q : lnf_.parameters()) p.push_back(q);
  if (!cfg_.tied_head) p.push_back(&lm_head_);
  return p;
}

std::vector<Linear*> GPT::linears() {
  std::vector<Linear*> v;
  for (auto& layer : layers_) {
    v.push_back(&layer->attention().qkv().linear());
    v.push_back(&layer->attention().proj());
    v.push_back(&layer->mlp().fc1());
    v.push_back(&layer->mlp().fc2());
  }
  return v;
}

std::unique_ptr<GPT> GPT::to(Backend& backend) {
  auto moved = std::make_unique<GPT>(cfg_, 0, backend);
  const ParameterList from = parameters(), into = moved->parameters();
  for (size_t i = 0; i < from.size(); ++i) into[i]->set_values(from[i]->values());
  const std::vector<Linear*> a = linears(), b = moved->linears();
  for (size_t i = 0; i < a.size(); ++i) {
    b[i]->set_fp8_weights(a[i]->fp8_weights());
    if (a[i]->fell_back_to_bf16()) b[i]->fall_back_to_bf16();  // a run's, on any device
    b[i]->keep_in_bf16(a[i]->kept_in_bf16());
  }
  moved->set_fp8_state(fp8_state());
  return moved;
}

std::vector<Fp8Meta> GPT::fp8_state() {
  std::vector<Fp8Meta> v;
  for (int g = 0; g < scaling_->gemms(); ++g) v.push_back(scaling_->meta(g));
  return v;
}

void GPT::set_fp8_state(const std::vector<Fp8Meta>& metas) {
  for (size_t g = 0; g < metas.size(); ++g) scaling_->set_meta(static_cast<int>(g), metas[g]);
}

MemoryUse GPT::memory_use() const {
  MemoryUse m{bytes_of(normed_) + bytes_of(logits_) + bytes_of(dnormed_) + bytes_of(dacts_) +
                  bytes_of(probs_) + bytes_of(normed16_) + bytes_of(dlogits16_),
              bytes_of(head_weight().value16)};
  for (const auto& a : acts_) m.saved += bytes_of(a);
  for (const auto& layer : layers_) m += layer->memory_use();
  m += lnf_.memory_use();
  return m;
}

void GPT::init_fp8(const DelayedScaling& recipe) {
  scaling_->reset(recipe);
}

void GPT::head_forward(int64_t rows) {
  const int64_t d = cfg_.d_model, V = cfg_.vocab;
  logits_.resize(static_cast<size_t>(rows * V));
  // The LM head is not an FP8 GEMM (as Megatron keeps its output layer in higher precision);
  // it runs in the GEMM precision (bf16 or fp32).
  head_mode_ = GemmPrecision::current();
  Parameter& head = head_weight();
  GemmOperand x{normed_.data(), DType::F32}, w{head.data(), DType::F32};
  if (head_mode_ == Precision::Bf16) {
    normed16_.resize(normed_.size());
    be_.fp32_to_bf16(normed16_.data(), normed_.data(), rows * d);
    x = {normed16_.data(), DType::BF16};
    w = {head.bf16_value(), DType::BF16};
  }
  be_.gemm(Trans::N, Trans::T, rows, V, d, 1.0f, x, w, 0.0f, logits_.data());
}

void GPT::forward_to_logits(const int32_t* tokens, bool training, int64_t B, int64_t T) {
  if (T > cfg_.seq_len) {
    throw Error(fmt::format("sequence length {} exceeds the position table ({})", T, cfg_.seq_len));
  }
  B_ = B, T_ = T;
  tokens_.resize(static_cast<size_t>(B * T));
  be_.upload(tokens_.data(), tokens, tokens_.size() * sizeof(int32_t));
  const int64_t rows = B * T, d = cfg_.d_model;
  const AutocastState& ac = autocast_state();
  fp8_used_ = ac.enabled;
  recipe_ = ac.recipe;
  reduce_ = ac.reduce;
  const TrainingForward training_scope(training);  // saved activations may be BF16
  while (acts_.size() < layers_.size() + 1) acts_.emplace_back(be_);
  for (auto& a : acts_) a.resize(static_cast<size_t>(rows * d));
  be_.embedding_forward(acts_[0].data(), tokens_.data(), wte_.data(), position_table(), B, T, d);
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward(acts_[l].data(), acts_[l + 1].data(), B, T);
  normed_.resize(static_cast<size_t>(rows * d));
  lnf_.forward(acts_.back().data(), normed_.data(), rows);
  head_forward(rows);
}

float GPT::grad_scale(int64_t rows, int64_t loss_rows) {
  return 1.0f / static_cast<float>(loss_rows > 0 ? loss_rows : rows);
}

void GPT::upload_targets(const int32_t* targets, int64_t rows) {
  targets_.resize(static_cast<size_t>(rows));
  be_.upload(targets_.data(), targets, targets_.size() * sizeof(int32_t));
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                   int64_t loss_rows) {
  const int64_t rows = B * T, V = cfg_.vocab;
  if (targets && fusion_enabled()) {
    row_losses_.resize(static_cast<size_t>(rows));
    forward(tokens, targets, B, T, loss_rows, row_losses_.data());
    row_losses_host_.resize(static_cast<size_t>(rows));  // grows once: no allocation per step
    be_.download(row_losses_host_.data(), row_losses_.data(),
                 row_losses_host_.size() * sizeof(float));
    return mean_loss(row_losses_host_.data(), targets, rows);
  }
  forward_to_logits(tokens, targets != nullptr, B, T);
  if (!targets) return 0.0f;
  upload_targets(targets, rows);
  probs_.resize(static_cast<size_t>(rows * V));
  return be_.softmax_cross_entropy_unfused(logits_.data(), probs_.data(), logits_.data(),
                                           targets_.data(), rows, V, grad_scale(rows, loss_rows));
}

void GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                  int64_t loss_rows, float* losses) {
  const int64_t rows = B * T, V = cfg_.vocab;
  check_targets(targets, rows, V);  // here, so no device has to send them back to be checked
  forward_to_logits(tokens, /*training=*/true, B, T);
  upload_targets(targets, rows);
  // Fused: the loss and dlogits in one pass over the logits, which dlogits overwrites.
  be_.softmax_cross_entropy_rows(logits_.data(), losses, logits_.data(), targets_.data(), rows, V,
                                 grad_scale(rows, loss_rows));
}

void GPT::backward(const GradientsReady& ready) {
  const std::vector<size_t>& at = param_begin_;
  const auto announce = [&](size_t first, size_t end) {
    if (ready) ready(first, end);
  };
  const int64_t rows = B_ * T_, d = cfg_.d_model, V = cfg_.vocab;
  const float* dlogits = logits_.data();
  dnormed_.resize(static_cast<size_t>(rows * d));
  Parameter& head = head_weight();
  GemmOperand g{dlogits, DType::F32}, w{head.data(), DType::F32}, x{normed_.data(), DType::F32};
  if (head_mode_ == Precision::Bf16) {  // forward's BF16 casts of the weight and the input
    dlogits16_.resize(logits_.size());
    be_.fp32_to_bf16(dlogits16_.data(), dlogits, rows * V);
    g = {dlogits16_.data(), DType::BF16};
    w = {head.bf16_value(), DType::BF16};
    x = {normed16_.data(), DType::BF16};
  }
  be_.gemm(Trans::N, Trans::N, rows, d, V, 1.0f, g, w, 0.0f, dnormed_.data());
  be_.gemm(Trans::T, Trans::N, V, d, rows, 1.0f, g, x, 1.0f, head.grad.data());
  dacts_.resize(static_cast<size_t>(rows * d));
  dacts_.zero();
  lnf_.backward(dnormed_.data(), dacts_.data(), rows);
  announce(at[layers_.size()], at[layers_.size() + 1]);  // with an untied head's
  for (size_t l = layers_.size(); l-- > 0;) {
    layers_[l]->backward(dacts_.data());
    announce(at[l], at[l + 1]);
  }
  be_.embedding_backward(wte_.grad.data(), cfg_.learned_positions() ? wpe_.grad.data() : nullptr,
                         dacts_.data(), tokens_.data(), B_, T_, d);
  announce(0, at[0]);
  if (fp8_used_ && recipe_.kind == ScalingKind::Delayed) {
    scaling_->update(Direction::Backward, recipe_.delayed, reduce_);
  }
}

std::vector<int32_t> GPT::generate(const int32_t* prompts, int64_t B, int64_t P, int64_t n_new) {
  std::vector<int32_t> out;
  for (const auto& sequence : generate_sequences(prompts, B, P, n_new, {}))
    out.insert(out.end(), sequence.begin(), sequence.end());
  return out;
}

std::vector<std::vector<int32_t>> GPT::generate_sequences(const int32_t* prompts, int64_t B,
                                                          int64_t P, int64_t n_new,
                                                          const GenerateOptions& o) {
  o.sampling.validate();
  if (P < 1) throw Error("generation needs a prompt of at least one token");
  if (n_new < 0 || n_new > cfg_.seq_len || P > cfg_.seq_len || P + n_new > cfg_.seq_len) {
    throw Error(fmt::format("prompt ({}) + new tokens ({}) exceed the position table ({})", P,
                            n_new, cfg_.seq_len));
  }
  const int64_t d = cfg_.d_model, V = cfg_.vocab;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  if (n_new == 0) return out;
  std::vector<bool> ended(static_cast<size_t>(B), false);
  int64_t running = B;
  BackendBuffer<int32_t> best(be_, static_cast<size_t>(B));
  std::vector<float> row(static_cast<size_t>(V));
  // Each running sequence's next token, from the logits row of its position `at` (rows of
  // `rows_per_sequence`): greedy on the backend, or drawn on the host from the row.
  const auto pick = [&](int64_t rows_per_sequence, int64_t at, int64_t step) {
    const auto logits_row = [&](int64_t b) {
      return logits_.data() + (b * rows_per_sequence + at) * V;
    };
    std::vector<int32_t> t(static_cast<size_t>(B));
    if (o.sampling.greedy()) {
      if (rows_per_sequence == 1) {  // decode: one row per sequence, contiguous
        be_.argmax_rows(best.data(), logits_.data(), B, V);
      } else {
        for (int64_t b = 0; b < B; ++b) be_.argmax_rows(best.data() + b, logits_row(b), 1, V);
      }
      t = best.to_host();
    } else {
      for (int64_t b = 0; b < B; ++b) {
        if (ended[b]) continue;
        be_.download(row.data(), logits_row(b), row.size() * sizeof(float));
        t[b] = sample_token(row.data(), V, o.sampling, static_cast<uint64_t>(b),
                            static_cast<uint64_t>(step));
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      if (ended[b]) continue;
      out[b].push_back(t[b]);
      const bool stop =
          std::find(o.stop_tokens.begin(), o.stop_tokens.end(), t[b]) != o.stop_tokens.end();
      if ((o.on_token && !o.on_token(b, t[b])) || stop) {
        ended[b] = true;
        --running;
      }
    }
  };
  // Prefill: the prompt in one forward; its keys and values seed each layer's cache.
  forward(prompts, nullptr, B, P);
  pick(P, P - 1, 0);
  std::vector<KvCache> caches;
  for (size_t l = 0; l < layers_.size(); ++l) {
    // As long as this generation goes, not the position table: a model of a long context
    // (an import's max_position_embeddings) generates a few tokens in a few tokens' memory.
    caches.emplace_back(be_, B, P + n_new, cfg_.kv_width());
    layers_[l]->attention().fill_cache(caches[l]);
  }
  // Decode: each new token attends to the cache; only its own row is computed. A sequence
  // that ended runs on with its last token until all have (its rows are not read).
  BackendBuffer<float> x(be_, static_cast<size_t>(B * d)), y(be_, x.size());
  std::vector<int32_t> tok(static_cast<size_t>(B));
  for (int64_t step = 1; step < n_new && running > 0; ++step) {
    const int64_t pos = P + step - 1;
    for (int64_t b = 0; b < B; ++b) tok[b] = out[b].back();
    // Embedding of one token per sequence at position pos: wte[tok] + wpe[pos] (or wte[tok]).
    tokens_.resize(static_cast<size_t>(B));
    tokens_.upload(tok, "generated tokens");
    const float* wpe = position_table();
    be_.embedding_forward(x.data(), tokens_.data(), wte_.data(), wpe ? wpe + pos * d : nullptr, B,
                          1, d);
    for (size_t l = 0; l < layers_.size(); ++l) {
      layers_[l]->decode(x.data(), y.data(), caches[l], pos);
      swap(x, y);
    }
    normed_.resize(static_cast<size_t>(B * d));
    lnf_.forward(x.data(), normed_.data(), B);
    head_forward(B);
    pick(1, 0, step);
  }
  return out;
}

}  // namespace fp8lm
