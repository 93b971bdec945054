#include "kernels/cpu/norm_out.h"

#include <cmath>
#include <vector>

#include "fp8lm/error.h"
#include "kernels/cpu/casts.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"

namespace fp8lm::cpu {
namespace {

// Adds a cast's statistics into the output descriptor's, as the CUDA producers do: the amax
// max-accumulated (a NaN already there stays, as the scaling state keeps it), counts added.
void commit(const Fp8Out& q, const CastStats& st) {
  if (q.amax && !std::isnan(*q.amax) && st.amax > *q.amax) *q.amax = st.amax;
  if (q.saturated) *q.saturated += static_cast<unsigned long long>(st.saturated);
  if (q.flushed) *q.flushed += static_cast<unsigned long long>(st.flushed);
}

// The FP32 kernel into y, then (BF16 output) rounded: the CPU norms compute in FP32 and have
// no BF16-output variant, and rounding the FP32 result is what the CUDA kernels do per element.
template <class Fp32, class Fp8>
void produce(const ProducerOut& out, int64_t n, const char* op, Fp32 fp32, Fp8 fp8) {
  switch (producer_out_dtype(out, op)) {
    case DType::F32:
      return fp32(out.y);
    case DType::BF16: {
      thread_local std::vector<float> y;
      y.resize(static_cast<size_t>(n));
      fp32(y.data());
      return fp32_to_bf16(out.y16, y.data(), n);
    }
    default:
      return commit(out.y8, fp8(out.y8.data, *out.y8.scale, out.y8.format));
  }
}

void check_residual(const float* s, const float* r, const char* op) {
  if (r != nullptr && s == nullptr) throw Error(std::string(op) + ": residual r without s");
}

}  // namespace

void layernorm_forward(ProducerOut out, float* s, float* mean, float* rstd, const float* x,
                       const float* r, const float* gamma, const float* beta, int64_t rows,
                       int64_t C, float eps) {
  check_residual(s, r, "layernorm_forward");
  produce(
      out, rows * C, "layernorm_forward",
      [&](float* y) {
        if (r)
          add_layernorm_forward(s, y, mean, rstd, x, r, gamma, beta, rows, C, eps);
        else
          layernorm_forward(y, mean, rstd, x, gamma, beta, rows, C, eps);
      },
      [&](uint8_t* q, float scale, Fp8Format f) {
        return r ? add_layernorm_forward_fp8(s, q, scale, f, mean, rstd, x, r, gamma, beta, rows, C,
                                             eps)
                 : layernorm_forward_fp8(q, scale, f, mean, rstd, x, gamma, beta, rows, C, eps);
      });
}

void rmsnorm_forward(ProducerOut out, float* s, float* rstd, const float* x, const float* r,
                     const float* gamma, int64_t rows, int64_t C, float eps) {
  check_residual(s, r, "rmsnorm_forward");
  produce(
      out, rows * C, "rmsnorm_forward",
      [&](float* y) {
        if (r)
          add_rmsnorm_forward(s, y, rstd, x, r, gamma, rows, C, eps);
        else
          rmsnorm_forward(y, rstd, x, gamma, rows, C, eps);
      },
      [&](uint8_t* q, float scale, Fp8Format f) {
        return r ? add_rmsnorm_forward_fp8(s, q, scale, f, rstd, x, r, gamma, rows, C, eps)
                 : rmsnorm_forward_fp8(q, scale, f, rstd, x, gamma, rows, C, eps);
      });
}

}  // namespace fp8lm::cpu
