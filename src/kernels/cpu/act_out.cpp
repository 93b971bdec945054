#include "kernels/cpu/act_out.h"

#include "kernels/cpu/activations.h"
#include "kernels/cpu/producer_out.h"

namespace fp8lm::cpu {
namespace {

// y = act(h), the bias already in h.
void act_forward(Activation act, float* y, const float* h, int64_t rows, int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return gelu_forward(y, h, rows * F);
    case Activation::Relu:
      return relu_forward(y, h, rows * F);
    case Activation::Swiglu:
      return swiglu_forward(y, h, rows, F);
  }
}

// h += bias, y = act(h) in one pass.
void bias_act_fp32(Activation act, float* y, float* h, const float* bias, int64_t rows, int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return bias_gelu_forward(y, h, bias, rows, F);
    case Activation::Relu:
      return bias_relu_forward(y, h, bias, rows, F);
    case Activation::Swiglu:
      return bias_swiglu_forward(y, h, bias, rows, F);
  }
}

// h += bias, y = FP8 codes of act(h) * scale in one pass.
CastStats bias_act_fp8(Activation act, uint8_t* y, float scale, Fp8Format f, float* h,
                       const float* bias, int64_t rows, int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return bias_gelu_forward_fp8(y, scale, f, h, bias, rows, F);
    case Activation::Relu:
      return bias_relu_forward_fp8(y, scale, f, h, bias, rows, F);
    case Activation::Swiglu:
      break;
  }
  return bias_swiglu_forward_fp8(y, scale, f, h, bias, rows, F);
}

}  // namespace

void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act, int64_t rows,
                      int64_t F) {
  produce(
      out, rows * F, "bias_act_forward",
      [&](float* y) {
        if (bias)
          bias_act_fp32(act, y, h, bias, rows, F);
        else
          act_forward(act, y, h, rows, F);
      },
      [&](uint8_t* q, float scale, Fp8Format f) {
        if (bias) return bias_act_fp8(act, q, scale, f, h, bias, rows, F);
        // No fused unbiased FP8 kernel: the FP32 activation, then the same codec's cast.
        thread_local std::vector<float> y;
        y.resize(static_cast<size_t>(rows * F));
        act_forward(act, y.data(), h, rows, F);
        return quantize(q, y.data(), rows * F, scale, f);
      });
}

void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                  int64_t F) {
  switch (act) {
    case Activation::Gelu:
      return gelu_backward(dh, dy, h, rows * F);
    case Activation::Relu:
      return relu_backward(dh, dy, h, rows * F);
    case Activation::Swiglu:
      return swiglu_backward(dh, dy, h, rows, F);
  }
}

}  // namespace fp8lm::cpu
