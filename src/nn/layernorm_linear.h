#pragma once
// TE's LayerNormLinear: a norm then a Linear. Under FP8 delayed scaling the norm writes FP8
// codes straight into the GEMM's input (fused LN+cast, amax taken in the same pass).

#include "nn/linear.h"
#include "nn/norm.h"

namespace fp8lm {

class LayerNormLinear {
 public:
  LayerNormLinear(std::string norm_name, std::string linear_name, int64_t in, int64_t out,
                  Normalization norm, bool bias, Backend& backend = cpu_backend());

  void forward(const float* x, float* y, int64_t rows);     // y overwritten
  void backward(const float* dy, float* dx, int64_t rows);  // dx +=

  Norm& norm() { return norm_; }
  Linear& linear() { return linear_; }
  ParameterList parameters();
  MemoryUse memory_use() const {
    MemoryUse m{bytes_of(normed_), 0};
    m += norm_.memory_use();
    m += linear_.memory_use();
    return m;
  }

 private:
  Norm norm_;
  Linear linear_;
  BackendBuffer<float> normed_{
      norm_.backend()};  // FP32 mode: the norm output, linear's saved input
};

// norm -> linear. When the current forward is FP8 with delayed scaling, the norm quantizes
// straight into linear's FP8 input (fused); else it writes an FP32 output for linear to read:
// into `normed` under FP32 GEMMs (linear keeps a pointer to it for backward), else into
// scratch (linear keeps its own BF16 or FP8 copy).
// Shared by LayerNormLinear and LayerNormMLP.
// With a residual r, the norm's input is x + r, written to `sum` by the fused norm kernel.
void norm_then_linear(Norm& norm, Linear& linear, BackendBuffer<float>& normed, const float* x,
                      float* y, int64_t rows, bool add_bias, const float* r = nullptr,
                      float* sum = nullptr);

}  // namespace fp8lm
