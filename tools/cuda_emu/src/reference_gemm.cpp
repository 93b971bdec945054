#include "reference_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cublaslt_rules.h"
#include "cuda_bf16.h"

namespace emu::detail {
namespace {

// The exact value of an FP8 code: sign, exponent, mantissa (E4M3: bias 7, no Inf, S.1111.111
// is NaN; E5M2: bias 15, IEEE-like Inf and NaN).
float fp8_value(uint8_t code, bool e4m3) {
  const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exp = (code & 0x7f) >> man_bits, man = code & ((1 << man_bits) - 1);
  const float sign = code & 0x80 ? -1.0f : 1.0f;
  if (e4m3 && (code & 0x7f) == 0x7f) return NAN;
  if (!e4m3 && exp == 31) return man ? NAN : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), 1 - bias - man_bits);
  return sign * std::ldexp(static_cast<float>((1 << man_bits) | man), exp - bias - man_bits);
}

float load(const void* base, cudaDataType_t type, int64_t index) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[index];
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case CUDA_R_8F_E4M3:
      return fp8_value(static_cast<const uint8_t*>(base)[index], true);
    case CUDA_R_8F_E5M2:
      return fp8_value(static_cast<const uint8_t*>(base)[index], false);
    default:
      return NAN;
  }
}

void store(void* base, cudaDataType_t type, int64_t index, float v) {
  if (type == CUDA_R_16BF) {
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(base)[index] = v;
  }
}

// op(X)[row][kk] for row < rows, as a dense row-major rows x k copy (so the inner loop of the
// product is contiguous in k): X is stored column-major with leading dimension ld.
std::vector<float> gather(const GemmMatrix& x, int64_t entry, bool transposed, int64_t rows,
                          int64_t k, bool k_is_row) {
  std::vector<float> out(static_cast<size_t>(rows * k));
  const int64_t base = entry * x.stride;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk) {
      // Stored element (i, j) is at i + j * ld. op(A)[r][kk]: A(r, kk), or A(kk, r) when
      // transposed; op(B)[kk][r] (k_is_row): B(kk, r), or B(r, kk) when transposed.
      int64_t i = r, j = kk;
      if (transposed != k_is_row) std::swap(i, j);
      out[static_cast<size_t>(r * k + kk)] = load(x.data, x.type, base + i + j * x.ld);
    }
  return out;
}

}  // namespace

void reference_gemm(const GemmCall& g) {
  for (int64_t e = 0; e < g.batch; ++e) {
    const std::vector<float> a = gather(g.a, e, g.ta, g.m, g.k, false);  // [m][k]
    const std::vector<float> b = gather(g.b, e, g.tb, g.n, g.k, true);   // [n][k]
    const int64_t base = e * g.c.stride;
    for (int64_t col = 0; col < g.n; ++col)
      for (int64_t row = 0; row < g.m; ++row) {
        const float* ar = &a[static_cast<size_t>(row * g.k)];
        const float* bc = &b[static_cast<size_t>(col * g.k)];
        double sum = 0.0;
        if (g.a_blocks.mode != 0) {
          for (int64_t k0 = 0; k0 < g.k; k0 += 128) {
            double part = 0.0;
            for (int64_t kk = k0; kk < std::min(g.k, k0 + 128); ++kk)
              part += static_cast<double>(ar[kk]) * bc[kk];
            const float sa =
                g.a_blocks.scales[block_scale_index(g.a_blocks.mode, row, k0, g.m, g.k)];
            const float sb =
                g.b_blocks.scales[block_scale_index(g.b_blocks.mode, col, k0, g.n, g.k)];
            sum += part * sa * sb;
          }
        } else {
          for (int64_t kk = 0; kk < g.k; ++kk) sum += static_cast<double>(ar[kk]) * bc[kk];
        }
        double v = g.alpha == 0.0 ? 0.0 : g.alpha * sum;  // alpha = 0: A, B not read
        const int64_t at = base + row + col * g.c.ld;
        if (g.beta != 0.0) v += g.beta * load(g.c.data, g.c.type, at);
        if (g.bias) v += load(g.bias, g.bias_type, row);
        store(g.d, g.c.type, at, static_cast<float>(v));
      }
  }
}

}  // namespace emu::detail
