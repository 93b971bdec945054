#pragma once
// TE's LayerNorm and RMSNorm modules over rows of C values. FP32 math in every precision; an
// FP8 or BF16 output is cast in the same pass (the fused producer a GEMM consumes).
#include <string>

#include "kernels/backend.h"
#include "nn/parameter.h"

namespace fp8lm {

// TE's default epsilon, as torch.nn.LayerNorm's.
inline constexpr float kNormEps = 1e-5f;

class Norm {
 public:
  Norm(std::string name, int64_t C, Normalization kind, float eps = kNormEps,
       Backend& backend = cpu_backend());

  // Normalizes x, or with r the residual sum s = x + r (written to s), into `out` as it asks:
  // FP32, FP8 codes with their statistics accumulated (the fused producer of a GEMM's input),
  // or BF16. x (or s) must stay valid until backward.
  void forward(const ProducerOut& out, const float* x, int64_t rows, const float* r = nullptr,
               float* s = nullptr);
  // y [rows, C] overwritten.
  void forward(const float* x, float* y, int64_t rows) { forward(ProducerOut::fp32(y), x, rows); }
  // dx += dL/dx; gamma (and beta) gradients +=.
  void backward(const float* dy, float* dx, int64_t rows);

  Normalization kind() const { return kind_; }
  Backend& backend() const { return be_; }
  MemoryUse memory_use() const { return {bytes_of(mean_) + bytes_of(rstd_), 0}; }
  ParameterList parameters();
  Parameter& weight() { return gamma_; }
  Parameter* bias() { return kind_ == Normalization::LayerNorm ? &beta_ : nullptr; }
  float eps() const { return eps_; }

 private:
  NormParams params();  // the backend's view of this layer

  Backend& be_;
  Normalization kind_;
  int64_t C_;
  float eps_;
  Parameter gamma_, beta_;
  const float* x_ = nullptr;
  BackendBuffer<float> mean_{be_}, rstd_{be_};
};

}  // namespace fp8lm
