#include "gpu/cuda_gpt.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cmath>
#include <unordered_map>

#include "fp8lm/error.h"
#include "gpu/cuda_linear.h"
#include "gpu/cuda_scaling.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/loss_embedding.h"
#include "kernels/cuda/norms.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/quantize.h"

namespace fp8lm {

using cuda::DeviceBuffer;
using gpu::CudaLinear;

namespace {

// Parameters start on 256-byte boundaries: cuBLASLt wants 16-byte aligned operands, and the
// vectorized kernels like whole cache lines.
constexpr size_t kAlign = 64;

void copy_d2d(float* dst, const float* src, int64_t n, cudaStream_t s) {
  FP8LM_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

// A norm's parameters on the device, and its saved statistics.
struct DeviceNorm {
  Normalization kind;
  const float *gamma, *beta;
  float *dgamma, *dbeta;
  float eps;
  DeviceBuffer<float> mean, rstd;
};

}  // namespace

struct CudaGPT::Impl {
  GPT& host;
  CudaGptOptions opt;
  GPTConfig cfg;
  cudaStream_t s = nullptr;  // the default stream: every op in order
  ParameterList params;
  std::unordered_map<const Parameter*, size_t> offset;
  size_t total = 0;
  DeviceBuffer<float> w, g, m, v;
  std::unique_ptr<gpu::ScalingSlots> slots;
  std::vector<Fp8Meta> metas;  // the host model's FP8 state, copied in and out

  std::vector<Fp8Meta*> meta_ptrs() {
    std::vector<Fp8Meta*> p;
    for (Fp8Meta& meta : metas) p.push_back(&meta);
    return p;
  }
  gpu::LinearScratch scratch;

  struct Layer {
    DeviceNorm ln1, ln2;
    std::unique_ptr<CudaLinear> qkv, proj, fc1, fc2;
    // Saved by forward for backward.
    DeviceBuffer<float> ln1_out, ln2_out, act_out;  // FP32 GEMM inputs (fp32 mode)
    DeviceBuffer<float> qkv_out, att, lse, resid, h;
  };
  std::vector<Layer> layers;
  DeviceNorm lnf;
  std::vector<CudaLinear*> linears;  // GPT::linears() order: their slot numbers

  // Step buffers.
  int64_t B = 0, T = 0;
  GemmMode head_mode = GemmMode::Fp32;
  DeviceBuffer<int32_t> tokens, targets, argmax;
  DeviceBuffer<float> acts, normed, logits, losses, loss_sum, norm_clip;
  DeviceBuffer<bf16_t> normed16, wte16, dlogits16;
  DeviceBuffer<float> proj_out, mlp_out, dA, dB, dresid, dact, dh, dln, datt, dqkv, dnormed;
  DeviceBuffer<cuda::AdamWTensor> adam_table;
  int n_adam = 0;
  int64_t adam_elements = 0;  // the parameters' elements, without the arena's padding

  Impl(GPT& h, const CudaGptOptions& o) : host(h), opt(o), cfg(h.config()) {}

  float* dev(Parameter& p) { return w.data() + offset.at(&p); }
  float* grad(Parameter& p) { return g.data() + offset.at(&p); }
  float* dev(Parameter* p) { return p ? dev(*p) : nullptr; }
  float* grad(Parameter* p) { return p ? grad(*p) : nullptr; }

  DeviceNorm make_norm(Norm& n) {
    return {n.kind(), dev(n.weight()), dev(n.bias()), grad(n.weight()), grad(n.bias()), n.eps(), {},
            {}};
  }

  std::unique_ptr<CudaLinear> make_linear(Linear& l, int index) {
    auto cl = std::make_unique<CudaLinear>(
        l.in_features(), l.out_features(),
        CudaLinear::Params{dev(l.weight()), grad(l.weight()), dev(l.bias()), grad(l.bias())},
        slots.get(), index, &scratch);
    cl->set_fp8_weights(opt.fp8_weights);
    return cl;
  }

  void build() {
    params = host.parameters();
    for (Parameter* p : params) {
      offset[p] = total;
      total += (size_t(p->numel()) + kAlign - 1) / kAlign * kAlign;
    }
    w.resize(total);
    g.resize(total);
    w.zero();
    metas = host.fp8_state();
    slots = std::make_unique<gpu::ScalingSlots>(meta_ptrs());
    int index = 0;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      TransformerLayer& hl = host.layer(l);
      Layer L;
      L.ln1 = make_norm(hl.attention().qkv().norm());
      L.ln2 = make_norm(hl.mlp().norm());
      L.qkv = make_linear(hl.attention().qkv().linear(), index++);
      L.proj = make_linear(hl.attention().proj(), index++);
      L.fc1 = make_linear(hl.mlp().fc1(), index++);
      L.fc2 = make_linear(hl.mlp().fc2(), index++);
      layers.push_back(std::move(L));
    }
    for (Layer& L : layers) {
      for (CudaLinear* c : {L.qkv.get(), L.proj.get(), L.fc1.get(), L.fc2.get()})
        linears.push_back(c);
    }
    lnf = make_norm(host.final_norm());
  }

  // --- forward ---------------------------------------------------------------------------

  // Where a norm or activation writes a Linear's input in this mode.
  ProducerOut input_of(CudaLinear& lin, DeviceBuffer<float>& fp32_out, int64_t rows) {
    ProducerOut o;
    switch (opt.mode) {
      case GemmMode::Fp8:
        o.y8 = lin.fp8_input(rows);
        break;
      case GemmMode::Bf16:
        o.y16 = lin.bf16_input(rows);
        break;
      case GemmMode::Fp32:
        fp32_out.resize(size_t(rows * lin.in_features()));
        o.y = fp32_out.data();
        lin.set_fp32_input(o.y);
        break;
    }
    return o;
  }

  void norm_forward(DeviceNorm& n, ProducerOut out, float* sum, const float* x, const float* r,
                    int64_t rows) {
    n.mean.resize(size_t(rows));
    n.rstd.resize(size_t(rows));
    if (n.kind == Normalization::LayerNorm) {
      cuda::layernorm_forward(out, sum, n.mean.data(), n.rstd.data(), x, r, n.gamma, n.beta, rows,
                              cfg.d_model, n.eps, s);
    } else {
      cuda::rmsnorm_forward(out, sum, n.rstd.data(), x, r, n.gamma, rows, cfg.d_model, n.eps, s);
    }
  }

  void norm_backward(DeviceNorm& n, float* dx, const float* dy, const float* x, int64_t rows) {
    if (n.kind == Normalization::LayerNorm) {
      cuda::layernorm_backward(dx, n.dgamma, n.dbeta, dy, x, n.gamma, n.mean.data(), n.rstd.data(),
                               rows, cfg.d_model, s);
    } else {
      cuda::rmsnorm_backward(dx, n.dgamma, dy, x, n.gamma, n.rstd.data(), rows, cfg.d_model, s);
    }
  }

  float* act(size_t i) { return acts.data() + i * size_t(B * T * cfg.d_model); }

  void layer_forward(Layer& L, const float* x, float* y) {
    const int64_t rows = B * T, d = cfg.d_model, F = cfg.ffn;
    const int64_t fc1_out = cfg.activation == Activation::Swiglu ? 2 * F : F;
    norm_forward(L.ln1, input_of(*L.qkv, L.ln1_out, rows), nullptr, x, nullptr, rows);
    L.qkv_out.resize(size_t(rows * 3 * d));
    L.qkv->forward(opt.mode, L.qkv_out.data(), rows, s);
    L.att.resize(size_t(rows * d));
    L.lse.resize(size_t(B * cfg.n_heads * T));
    cuda::attention_forward(L.att.data(), L.lse.data(), L.qkv_out.data(), B, T, d, cfg.n_heads, s);
    L.proj->set_input(opt.mode, L.att.data(), rows, s);
    proj_out.resize(size_t(rows * d));
    L.proj->forward(opt.mode, proj_out.data(), rows, s);
    // The residual add runs inside LayerNorm 2's pass: resid = x + attention output.
    L.resid.resize(size_t(rows * d));
    norm_forward(L.ln2, input_of(*L.fc1, L.ln2_out, rows), L.resid.data(), x, proj_out.data(),
                 rows);
    L.h.resize(size_t(rows * fc1_out));
    L.fc1->forward(opt.mode, L.h.data(), rows, s);  // bias fused into the GEMM
    cuda::bias_act_forward(input_of(*L.fc2, L.act_out, rows), L.h.data(), nullptr, cfg.activation,
                           rows, F, s);
    mlp_out.resize(size_t(rows * d));
    L.fc2->forward(opt.mode, mlp_out.data(), rows, s);
    cuda::add(y, L.resid.data(), mlp_out.data(), rows * d, s);
  }

  // Forward of a batch already on the device; with targets, returns the summed loss on the
  // device (loss_sum) and leaves dlogits in logits.
  void forward(bool with_targets) {
    const int64_t rows = B * T, d = cfg.d_model, V = cfg.vocab;
    if (opt.mode == GemmMode::Fp8) slots->begin(Direction::Forward, s);
    acts.resize(size_t(cfg.n_layers + 1) * size_t(rows * d));
    cuda::embedding_forward(act(0), tokens.data(), dev(host.token_embedding()),
                            dev(host.position_embedding()), B, T, d, s);
    for (size_t l = 0; l < layers.size(); ++l) layer_forward(layers[l], act(l), act(l + 1));
    // The tied LM head is not an FP8 GEMM: BF16 under fp8 and bf16, as on the CPU.
    head_mode = non_fp8_gemm_mode(opt.mode);
    logits.resize(size_t(rows * V));
    const float* wte = dev(host.token_embedding());
    ProducerOut out;
    if (head_mode == GemmMode::Bf16) {
      normed16.resize(size_t(rows * d));
      wte16.resize(size_t(V * d));
      out.y16 = normed16.data();
      norm_forward(lnf, out, nullptr, act(layers.size()), nullptr, rows);
      cuda::fp32_to_bf16(wte16.data(), wte, V * d, s);
      cuda::gemm(Trans::N, Trans::T, rows, V, d, 1.0f, GemmOperand{normed16.data(), DType::BF16},
                 GemmOperand{wte16.data(), DType::BF16}, 0.0f, logits.data(), {}, s);
    } else {
      normed.resize(size_t(rows * d));
      out.y = normed.data();
      norm_forward(lnf, out, nullptr, act(layers.size()), nullptr, rows);
      cuda::gemm(Trans::N, Trans::T, rows, V, d, 1.0f, GemmOperand{normed.data(), DType::F32},
                 GemmOperand{wte, DType::F32}, 0.0f, logits.data(), {}, s);
    }
    if (!with_targets) return;
    losses.resize(size_t(rows));
    loss_sum.resize(1);
    cuda::softmax_cross_entropy(logits.data(), losses.data(), loss_sum.data(), logits.data(),
                                targets.data(), rows, V, 1.0f / static_cast<float>(rows), s);
  }

  // --- backward --------------------------------------------------------------------------

  void layer_backward(size_t l, const float* dy, float* dx) {
    Layer& L = layers[l];
    const int64_t rows = B * T, d = cfg.d_model, F = cfg.ffn;
    const int64_t fc1_out = cfg.activation == Activation::Swiglu ? 2 * F : F;
    dresid.resize(size_t(rows * d));
    copy_d2d(dresid.data(), dy, rows * d, s);  // the residual path passes dy through
    dact.resize(size_t(rows * F));
    L.fc2->backward(dy, dact.data(), /*accumulate_dx=*/false, rows, s);
    dh.resize(size_t(rows * fc1_out));
    cuda::act_backward(dh.data(), dact.data(), L.h.data(), cfg.activation, rows, F, s);
    dln.resize(size_t(rows * d));
    L.fc1->backward(dh.data(), dln.data(), false, rows, s);
    norm_backward(L.ln2, dresid.data(), dln.data(), L.resid.data(), rows);
    datt.resize(size_t(rows * d));
    L.proj->backward(dresid.data(), datt.data(), false, rows, s);
    dqkv.resize(size_t(rows * 3 * d));
    cuda::attention_backward(dqkv.data(), datt.data(), L.qkv_out.data(), L.att.data(), L.lse.data(),
                             B, T, d, cfg.n_heads, s);
    L.qkv->backward(dqkv.data(), dln.data(), false, rows, s);
    copy_d2d(dx, dresid.data(), rows * d, s);
    norm_backward(L.ln1, dx, dln.data(), act(l), rows);
  }

  void backward() {
    const int64_t rows = B * T, d = cfg.d_model, V = cfg.vocab;
    if (opt.mode == GemmMode::Fp8) slots->begin(Direction::Backward, s);
    Parameter& wte = host.token_embedding();
    dnormed.resize(size_t(rows * d));
    if (head_mode == GemmMode::Bf16) {
      dlogits16.resize(size_t(rows * V));
      cuda::fp32_to_bf16(dlogits16.data(), logits.data(), rows * V, s);
      const GemmOperand dl{dlogits16.data(), DType::BF16};
      cuda::gemm(Trans::N, Trans::N, rows, d, V, 1.0f, dl, GemmOperand{wte16.data(), DType::BF16},
                 0.0f, dnormed.data(), {}, s);
      cuda::gemm(Trans::T, Trans::N, V, d, rows, 1.0f, dl,
                 GemmOperand{normed16.data(), DType::BF16}, 1.0f, grad(wte), {}, s);
    } else {
      const GemmOperand dl{logits.data(), DType::F32};
      cuda::gemm(Trans::N, Trans::N, rows, d, V, 1.0f, dl, GemmOperand{dev(wte), DType::F32}, 0.0f,
                 dnormed.data(), {}, s);
      cuda::gemm(Trans::T, Trans::N, V, d, rows, 1.0f, dl, GemmOperand{normed.data(), DType::F32},
                 1.0f, grad(wte), {}, s);
    }
    dA.resize(size_t(rows * d));
    dB.resize(size_t(rows * d));
    dA.zero(s);
    norm_backward(lnf, dA.data(), dnormed.data(), act(layers.size()), rows);
    float* dy = dA.data();
    float* dx = dB.data();
    for (size_t l = layers.size(); l-- > 0;) {
      layer_backward(l, dy, dx);
      std::swap(dy, dx);
    }
    cuda::embedding_backward(grad(wte), grad(host.position_embedding()), dy, tokens.data(), B, T, d,
                             s);
  }

  // --- steps -----------------------------------------------------------------------------

  // The rows FP8 GEMMs can take for b sequences of length t: whole dummy sequences are added
  // until b * t is a multiple of 16 (cuBLASLt's FP8 constraint).
  int64_t padded_batch(int64_t b, int64_t t) const {
    int64_t bp = b;
    if (opt.mode == GemmMode::Fp8) {
      while ((bp * t) % 16 != 0) ++bp;
    }
    return bp;
  }

  // Uploads a batch, padded with dummy sequences (token 0, target -1: no loss) to
  // padded_batch() rows; they run through the model but are never read back. Training batches
  // need no padding (Trainer::use_device checks the shape).
  void set_batch(const int32_t* tok, const int32_t* tgt, int64_t b, int64_t t) {
    if (t > cfg.seq_len) {
      throw Error(
          fmt::format("sequence length {} exceeds the position table ({})", t, cfg.seq_len));
    }
    const size_t n = size_t(b * t);
    for (size_t i = 0; i < n; ++i) {
      if (tok[i] < 0 || tok[i] >= cfg.vocab) {
        throw Error(fmt::format("token {} at position {} is outside the vocabulary of {}", tok[i],
                                i, cfg.vocab));
      }
      if (tgt && tgt[i] >= cfg.vocab) {
        throw Error(fmt::format("target {} at position {} is outside the vocabulary of {}", tgt[i],
                                i, cfg.vocab));
      }
    }
    B = padded_batch(b, t), T = t;
    const size_t padded = size_t(B * T);
    tokens.resize(padded);
    cuda::upload(tokens.data(), tok, n);
    const std::vector<int32_t> zeros(padded - n, 0), ignored(padded - n, -1);
    cuda::upload(tokens.data() + n, zeros.data(), zeros.size());
    if (tgt) {
      targets.resize(padded);
      cuda::upload(targets.data(), tgt, n);
      cuda::upload(targets.data() + n, ignored.data(), ignored.size());
    }
  }

  // The mean over the n real rows' targets (the padding's add nothing to the sum).
  float mean_loss(const int32_t* tgt, int64_t n) {
    float sum = 0;
    cuda::download(&sum, loss_sum.data(), 1);
    int64_t counted = 0;  // as the CPU loss: negative targets are not counted
    for (int64_t i = 0; i < n; ++i) counted += tgt[i] >= 0;
    return counted ? sum / static_cast<float>(counted) : 0.0f;
  }

  void build_adam_table() {
    std::vector<cuda::AdamWTensor> table;
    std::unordered_map<const Parameter*, CudaLinear*> fp8_weight;
    if (opt.fp8_weights) {
      const std::vector<Linear*> hl = host.linears();
      for (size_t i = 0; i < hl.size(); ++i) fp8_weight[&hl[i]->weight()] = linears[i];
    }
    for (Parameter* p : params) {
      if (p->numel() == 0) continue;
      const size_t o = offset.at(p);
      cuda::AdamWTensor t;
      t.param = w.data() + o;
      t.grad = g.data() + o;
      t.m = m.data() + o;
      t.v = v.data() + o;
      t.n = p->numel();
      t.decay = p->decay ? opt.weight_decay : 0.0f;
      if (const auto it = fp8_weight.find(p); it != fp8_weight.end()) {
        t.requant = slots->out(it->second->index(), Slot::Weight, it->second->fp8_weight_codes());
        slots->set_cast_size(it->second->index(), Slot::Weight, p->numel());
      }
      table.push_back(t);
      adam_elements += t.n;
    }
    adam_table = cuda::to_device(table);
    n_adam = static_cast<int>(table.size());
  }

  void ensure_moments() {
    if (m.size() >= total && total > 0) return;
    m.resize(total);
    v.resize(total);
    m.zero();
    v.zero();
  }

  // The FP8 codes of --fp8-weights from the current weights, at the weight slots' scales (as
  // Linear::requantize_weight on the host).
  void quantize_fp8_weights() {
    if (!opt.fp8_weights) return;
    const std::vector<Linear*> hl = host.linears();
    for (size_t i = 0; i < hl.size(); ++i) {
      CudaLinear& c = *linears[i];
      cuda::quantize(slots->out(c.index(), Slot::Weight, c.fp8_weight_codes()),
                     dev(hl[i]->weight()), hl[i]->weight().numel(), s);
    }
    keep_fp8_weight_scales();
  }

  void keep_fp8_weight_scales() {
    if (!opt.fp8_weights) return;
    for (CudaLinear* c : linears) c->keep_fp8_weight_scale(s);
  }
};

CudaGPT::CudaGPT(GPT& host, const CudaGptOptions& options)
    : impl_(std::make_unique<Impl>(host, options)) {
  const GPTConfig& c = host.config();
  if (options.mode == GemmMode::Fp8) {
    if (options.recipe.kind != ScalingKind::Delayed) {
      throw Error("--recipe current is not supported on the GPU (delayed scaling only)");
    }
    for (const auto& [flag, v] : {std::pair{"--d-model", c.d_model}, std::pair{"--ffn", c.ffn}}) {
      if (v % 16 != 0) {
        throw Error(
            fmt::format("{} {} must be a multiple of 16 for FP8 GEMMs on the GPU", flag, v));
      }
    }
  }
  FP8LM_CUDA_CHECK(cudaSetDevice(options.device));
  impl_->build();
  upload();
}

CudaGPT::~CudaGPT() = default;

void CudaGPT::upload() {
  Impl& I = *impl_;
  for (Parameter* p : I.params) cuda::upload(I.dev(*p), p->data(), size_t(p->numel()));
  I.metas = I.host.fp8_state();
  I.slots->upload(I.meta_ptrs());
  I.quantize_fp8_weights();
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(I.s));
}

void CudaGPT::download() {
  Impl& I = *impl_;
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(I.s));
  for (Parameter* p : I.params) {
    cuda::download(p->data(), I.dev(*p), size_t(p->numel()));
    ++p->version;  // the host's cached casts are stale
  }
  download_fp8_state();
  // The host's FP8 weight codes: the same weights at the same scales give the device's codes;
  // recording their amax again leaves the (max-accumulated) history unchanged.
  if (I.opt.fp8_weights) {
    for (Linear* l : I.host.linears()) l->requantize_weight(I.opt.recipe);
  }
}

void CudaGPT::download_fp8_state() {
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(impl_->s));
  impl_->slots->download(impl_->meta_ptrs());
  impl_->host.set_fp8_state(impl_->metas);
}

void CudaGPT::upload_moments(const std::vector<std::vector<float>>& m,
                             const std::vector<std::vector<float>>& v) {
  Impl& I = *impl_;
  I.ensure_moments();
  for (size_t i = 0; i < I.params.size(); ++i) {
    const size_t o = I.offset.at(I.params[i]);
    cuda::upload(I.m.data() + o, m[i].data(), m[i].size());
    cuda::upload(I.v.data() + o, v[i].data(), v[i].size());
  }
}

void CudaGPT::download_moments(std::vector<std::vector<float>>& m,
                               std::vector<std::vector<float>>& v) const {
  const Impl& I = *impl_;
  if (I.m.size() < I.total) return;  // never trained here: the host's are current
  for (size_t i = 0; i < I.params.size(); ++i) {
    const size_t o = I.offset.at(I.params[i]);
    cuda::download(m[i].data(), I.m.data() + o, m[i].size());
    cuda::download(v[i].data(), I.v.data() + o, v[i].size());
  }
}

CudaGPT::StepResult CudaGPT::train_step(const int32_t* tokens, const int32_t* targets, int64_t B,
                                        int64_t T, float lr, float grad_clip, int64_t t) {
  Impl& I = *impl_;
  if (I.padded_batch(B, T) != B) {
    throw Error(fmt::format(
        "FP8 GEMMs on the GPU need batch x sequence length ({} x {}) to be a multiple of 16", B,
        T));
  }
  I.set_batch(tokens, targets, B, T);
  I.ensure_moments();
  if (I.n_adam == 0) I.build_adam_table();
  I.g.zero(I.s);
  I.forward(true);
  const bool fp8 = I.opt.mode == GemmMode::Fp8;
  if (fp8) I.slots->update(Direction::Forward, I.opt.recipe.delayed, I.s);
  I.backward();
  if (fp8) I.slots->update(Direction::Backward, I.opt.recipe.delayed, I.s);
  I.norm_clip.resize(2);
  cuda::grad_norm(I.norm_clip.data(), I.norm_clip.data() + 1, grad_clip, I.adam_table.data(),
                  I.n_adam, I.adam_elements, I.s);
  const CudaGptOptions& o = I.opt;
  cuda::AdamWHyper h{lr,
                     o.beta1,
                     o.beta2,
                     o.eps,
                     1.0f - std::pow(o.beta1, static_cast<float>(t)),
                     1.0f - std::pow(o.beta2, static_cast<float>(t))};
  cuda::adamw_step(I.adam_table.data(), I.n_adam, I.adam_elements, h, I.norm_clip.data() + 1, I.s);
  I.keep_fp8_weight_scales();  // the optimizer re-quantized them at the current scales
  StepResult r;
  r.loss = I.mean_loss(targets, B * T);
  cuda::download(&r.grad_norm, I.norm_clip.data(), 1);
  return r;
}

float CudaGPT::loss(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  Impl& I = *impl_;
  I.set_batch(tokens, targets, B, T);
  I.slots->save();
  I.forward(true);
  const float l = I.mean_loss(targets, B * T);
  I.slots->restore();
  return l;
}

std::vector<int32_t> CudaGPT::generate(const int32_t* prompts, int64_t B, int64_t P,
                                       int64_t n_new) {
  Impl& I = *impl_;
  if (P < 1) throw Error("generation needs a prompt of at least one token");
  if (P + n_new > I.cfg.seq_len) {
    throw Error(fmt::format("prompt ({}) + new tokens ({}) exceed the position table ({})", P,
                            n_new, I.cfg.seq_len));
  }
  std::vector<int32_t> out(size_t(B * n_new));
  if (n_new == 0) return out;
  // Each new token runs the whole sequence again: causal attention makes the last position's
  // logits the same as with a KV cache.
  std::vector<int32_t> seq(size_t(B * I.cfg.seq_len)), best;
  for (int64_t step = 0; step < n_new; ++step) {
    const int64_t T = P + step;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < T; ++i) {
        seq[size_t(b * T + i)] = i < P ? prompts[b * P + i] : out[size_t(b * n_new + i - P)];
      }
    }
    I.set_batch(seq.data(), nullptr, B, T);
    I.forward(false);
    I.argmax.resize(size_t(I.B * T));
    cuda::argmax_rows(I.argmax.data(), I.logits.data(), I.B * T, I.cfg.vocab, I.s);
    best = cuda::to_host(I.argmax.data(), size_t(B * T));
    for (int64_t b = 0; b < B; ++b) out[size_t(b * n_new + step)] = best[size_t(b * T + T - 1)];
  }
  if (I.opt.mode == GemmMode::Fp8) I.slots->update(Direction::Forward, I.opt.recipe.delayed, I.s);
  return out;
}

}  // namespace fp8lm
