#include "kernels/cpu/norm_out.h"

#include "fp8lm/error.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/producer_out.h"
#include "kernels/cpu/rmsnorm.h"

namespace fp8lm::cpu {
namespace {

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
