#include "kernels/cpu/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/adamw_ops.h"
#include "kernels/cpu/optimizer_isa.h"

namespace fp8lm::cpu {
namespace {

constexpr int64_t kChunk = 1 << 14;

struct Chunk {
  const AdamWTensor* t;
  int64_t begin, end;
};

// Every tensor's chunks, in order. Reused across calls (a steady-state step allocates nothing);
// the parallel regions read it through the returned reference, as naming a thread_local inside
// one would give each worker its own.
const std::vector<Chunk>& chunks_of(const AdamWTensor* table, int n) {
  thread_local std::vector<Chunk> chunks;
  chunks.clear();
  for (int k = 0; k < n; ++k)
    for (int64_t b = 0; b < table[k].n; b += kChunk)
      chunks.push_back({&table[k], b, std::min(table[k].n, b + kChunk)});
  return chunks;
}

float value(float g) {
  return g;
}
float value(bf16_t g) {
  return bf16_to_float(g);
}

// f(the chunk's gradient): its FP32 or BF16 pointer, chosen once per chunk rather than per
// element, so each loop has one element type.
template <class F>
decltype(auto) with_gradient(const AdamWTensor& t, F f) {
  return t.grad16 != nullptr ? f(t.grad16) : f(t.grad);
}

bool use_avx512() {
  static const bool on = cpu_features().avx512;
  return on;
}

// Out of line so that every caller runs the same machine code (the same bits). The AVX-512
// form takes the same steps sixteen elements at a time (optimizer_isa.h).
[[gnu::noinline]] void update_chunk(const Chunk& c, const AdamWHyper& h, float grad_scale) {
  const AdamWTensor& t = *c.t;
  with_gradient(t, [&](const auto* g) {
    bf16_t* w16 = t.param16 != nullptr ? t.param16 + c.begin : nullptr;
    if (use_avx512()) {
      avx512::adamw_update(t.param + c.begin, t.m + c.begin, t.v + c.begin, g + c.begin,
                           c.end - c.begin, grad_scale, h, t.decay, w16);
      return;
    }
    for (int64_t j = c.begin; j < c.end; ++j) {
      adamw::update(t.param[j], t.m[j], t.v[j], value(g[j]) * grad_scale, h, t.decay);
      if (w16 != nullptr) w16[j - c.begin] = bf16_from_float(t.param[j]);
    }
  });
}

}  // namespace

void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* table, int n) {
  const std::vector<Chunk>& chunks = chunks_of(table, n);
  thread_local std::vector<double> partial_storage;
  partial_storage.assign(chunks.size(), 0.0);
  double* partial = partial_storage.data();
  const auto pieces = static_cast<int64_t>(chunks.size());
  // Each chunk's sum is one chain of dependent additions, so a core adds one value per
  // addition's latency; AVX-512 runs eight chunks' chains side by side, each as it was.
  constexpr int64_t kLanes = 8;
#pragma omp parallel for schedule(static)
  for (int64_t k0 = 0; k0 < pieces; k0 += kLanes) {
    const int64_t k1 = std::min(pieces, k0 + kLanes);
    bool lanes = use_avx512() && k1 - k0 == kLanes;
    for (int64_t k = k0; k < k1 && lanes; ++k)
      lanes = chunks[static_cast<size_t>(k)].t->grad16 == nullptr;
    if (lanes) {
      const float* g[kLanes];
      int64_t len[kLanes];
      for (int64_t i = 0; i < kLanes; ++i) {
        const Chunk& c = chunks[static_cast<size_t>(k0 + i)];
        g[i] = c.t->grad + c.begin;
        len[i] = c.end - c.begin;
      }
      avx512::sum_of_squares_8(partial + k0, g, len);
      continue;
    }
    for (int64_t k = k0; k < k1; ++k) {
      const Chunk& c = chunks[static_cast<size_t>(k)];
      partial[k] = with_gradient(*c.t, [&](const auto* g) {
        double sum = 0.0;
        for (int64_t j = c.begin; j < c.end; ++j) {
          const double v = value(g[j]);
          sum += v * v;
        }
        return sum;
      });
    }
  }
  double sum = 0.0;
  for (int64_t k = 0; k < pieces; ++k) sum += partial[k];
  *norm = static_cast<float>(std::sqrt(sum));
  if (clip != nullptr) *clip = adamw::clip_factor(*norm, max_norm);
}

void adamw_step(const AdamWTensor* table, int n, const AdamWHyper& hyper, float grad_scale,
                const StepDecision* decision) {
  if (decision != nullptr && decision->skip) return;
  const AdamWHyper h = adamw::with_decision(hyper, decision);
  const std::vector<Chunk>& chunks = chunks_of(table, n);
  const auto pieces = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < pieces; ++k) update_chunk(chunks[static_cast<size_t>(k)], h, grad_scale);
}

void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                 const float* bias_corrections) {
  bool all_finite = norm == nullptr || adamw::finite(*norm);
  for (int64_t r = 0; r < rows && all_finite; ++r) all_finite = adamw::finite(losses[r]);
  adamw::decide(*d, all_finite, bias_corrections);
}

}  // namespace fp8lm::cpu
