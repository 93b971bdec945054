#pragma once
// TE's LayerNorm and RMSNorm modules over rows of C values. FP32 math in every precision; the
// FP8 forward quantizes its output in the same pass (the fused producer a GEMM consumes).
#include <string>
#include <vector>

#include "fp8/quantize.h"
#include "kernels/types.h"
#include "nn/parameter.h"

namespace fp8lm {

class Norm {
 public:
  Norm(std::string name, int64_t C, Normalization kind, float eps = 1e-5f);

  // y [rows, C] overwritten; x must stay valid until backward.
  void forward(const float* x, float* y, int64_t rows);
  // Same, with y leaving as FP8 codes quantized with scale; returns the cast's statistics.
  CastStats forward_fp8(const float* x, uint8_t* y, float scale, Fp8Format f, int64_t rows);
  // The residual add fused in front: normalizes s = x + r, writing s (which must stay valid
  // until backward, as x above).
  void forward_residual(const float* x, const float* r, float* s, float* y, int64_t rows);
  CastStats forward_fp8_residual(const float* x, const float* r, float* s, uint8_t* y, float scale,
                                 Fp8Format f, int64_t rows);
  // dx += dL/dx; gamma (and beta) gradients +=.
  void backward(const float* dy, float* dx, int64_t rows);

  Normalization kind() const { return kind_; }
  MemoryUse memory_use() const { return {bytes_of(mean_) + bytes_of(rstd_), 0}; }
  ParameterList parameters();
  Parameter& weight() { return gamma_; }
  Parameter* bias() { return kind_ == Normalization::LayerNorm ? &beta_ : nullptr; }
  float eps() const { return eps_; }

 private:
  Normalization kind_;
  int64_t C_;
  float eps_;
  Parameter gamma_, beta_;
  const float* x_ = nullptr;
  std::vector<float> mean_, rstd_;
};

class LayerNorm : public Norm {
 public:
  LayerNorm(std::string name, int64_t C, float eps = 1e-5f)
      : Norm(std::move(name), C, Normalization::LayerNorm, eps) {}
};

class RMSNorm : public Norm {
 public:
  RMSNorm(std::string name, int64_t C, float eps = 1e-5f)
      : Norm(std::move(name), C, Normalization::RMSNorm, eps) {}
};

}  // namespace fp8lm
