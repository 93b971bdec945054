#pragma once
// Pieces the row-wise CPU kernels share.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "fp8/block_cast.h"
#include "fp8/quantize.h"
#include "kernels/cpu/casts.h"
#include "kernels/tensor.h"

namespace fp8lm::cpu {

// s = x + r over one row: the residual add the fused norms run in front of the row.
inline void add_row(float* s, const float* x, const float* r, int64_t C) {
  for (int64_t c = 0; c < C; ++c) s[c] = x[c] + r[c];
}

// Below this many elements an OpenMP parallel region costs more than it saves.
inline constexpr int64_t kParallelMin = int64_t{1} << 15;

// The calling thread's contiguous share [lo, hi) of [0, n) inside a parallel region, a
// multiple of 64 elements so no two threads write the same cache line.
inline std::pair<int64_t, int64_t> thread_share(int64_t n) {
  const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
  const int64_t share = ((n + nt - 1) / nt + 63) / 64 * 64;  // every element, rounded up
  const int64_t lo = std::min(n, t * share);
  return {lo, std::min(n, lo + share)};
}

// A row sum in float with 16 independent partials: a fixed order (so the same bits every
// run) that the compiler can vectorize, which it may not do with one serial accumulator.
inline constexpr int64_t kLanes = 16;

template <typename Term>
inline float lane_sum(int64_t n, Term term) {
  float part[kLanes] = {};
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) part[j] += term(i + j);
  for (int64_t i = body; i < n; ++i) part[i - body] += term(i);
  float sum = 0.0f;
  for (float p : part) sum += p;
  return sum;
}

// The shared body of the fused FP8 producers: make_row(r, row) writes row r (out_cols floats)
// into a per-thread buffer, which is quantized straight into y, so the FP32 output never
// exists in full. The statistics combine exactly (max and integer sums), so they do not
// depend on which thread finishes first; quantize's amax is never NaN, so max is defined.
// `work` (elements touched) decides whether threads pay off. Where decoded is not null, the
// codes' values go there too as BF16 (quantize_fp8).
template <typename MakeRow>
CastStats produce_fp8_rows(uint8_t* y, bf16_t* decoded, float scale, DType f, int64_t rows,
                           int64_t out_cols, int64_t work, MakeRow make_row) {
  float amax = 0.0f;
  int64_t saturated = 0, flushed = 0;
#pragma omp parallel reduction(max : amax) reduction(+ : saturated, flushed) if (work >= kParallelMin)
  {
    // Each thread's own row buffer, grown once (a steady-state step allocates nothing).
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(out_cols)) row.resize(static_cast<size_t>(out_cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      make_row(r, row.data());
      const CastStats s =
          quantize_fp8_serial(y + r * out_cols, decoded ? decoded + r * out_cols : nullptr,
                              row.data(), out_cols, scale, f);
      amax = s.amax > amax ? s.amax : amax;
      saturated += s.saturated;
      flushed += s.flushed;
    }
  }
  return {amax, saturated, flushed};
}

// Their BF16 twin: each row rounded straight into y, the bits fp32_to_bf16 gives the whole
// FP32 output, which never exists.
template <typename MakeRow>
void produce_bf16_rows(bf16_t* y, int64_t rows, int64_t out_cols, int64_t work, MakeRow make_row) {
#pragma omp parallel if (work >= kParallelMin)
  {
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(out_cols)) row.resize(static_cast<size_t>(out_cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      make_row(r, row.data());
      fp32_to_bf16_serial(y + r * out_cols, row.data(), out_cols);
    }
  }
}

// Their block-scaled twin: rows made a stripe at a time into a per-thread buffer and cast
// (row-wise, and column-wise where asked) while it is in cache (block_cast_produced), the bits
// block_cast_pair gives the whole FP32 output, which never exists.
template <typename MakeRow>
void produce_block_rows(const BlockProducerOut& out, int64_t out_cols, MakeRow make_row) {
  block_cast_produced(*out.row, *out.row_out, out.col, out.col_out,
                      [&](int64_t r0, int64_t nr, float* stripe) {
                        for (int64_t r = 0; r < nr; ++r) make_row(r0 + r, stripe + r * out_cols);
                      });
}

}  // namespace fp8lm::cpu
