// NVFP4's casts with each block in registers (AVX-512): a 1D block of 16 is one register, so a
// block's amax, its E4M3 scale, the multiplier and the E2M1 codes never leave registers, and the
// column-wise copy's Hadamard transform runs on the sixteen rows of a stripe as they are loaded,
// never written; the weights' 16x16 blocks take their amaxes down a stripe's rows in registers,
// then cast each block's rows from cache. A tensor's two copies cast together (block_cast_pair)
// keep every block's amax from the sweep for the global amaxes, and each stripe takes all of its
// scales before it casts a value. Every step is the scalar twin's float operation in the same
// order (nvfp4_quantize.cpp's rule, hadamard.cpp's butterflies), so the bits are the same.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>
#include <vector>

#include "core/grown.h"
#include "fp8/hadamard.h"
#include "fp8/lanes_avx512.h"
#include "fp8/quantize_isa.h"

namespace fp8lm::isa {
namespace {

// Nvfp4Rule on sixteen block amaxes: the E4M3 block scale codes, their values b, and the
// multipliers min(1 / (b * (1/S)), FLT_MAX) (minps gives FLT_MAX for an Inf or NaN quotient,
// as the twin's comparison does).
struct Nvfp4ScaleLanes {
  const Fp8Lanes<DType::E4M3> e4m3{true};
  const __m512 k, inv_global;
  explicit Nvfp4ScaleLanes(float global_encode)
      : k(_mm512_set1_ps(global_encode * (1.0f / kE2M1Max))),
        inv_global(_mm512_set1_ps(1.0f / global_encode)) {}

  void apply(__m512 amax, __m512i* code, __m512* b, __m512* mult) const {
    __mmask16 over, flush;
    *code = e4m3.encode(_mm512_castps_si512(_mm512_mul_ps(amax, k)), 0xffff, &over, &flush);
    *b = decode_fp8_lanes(_mm512_cvtepi32_epi8(*code), true);
    *mult = _mm512_min_ps(_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(*b, inv_global)),
                          _mm512_set1_ps(FLT_MAX));
  }
};

// One butterfly stage of the fast Walsh-Hadamard transform: rows j and j + h for each j
// whose bit h is clear.
template <int H>
[[gnu::always_inline]] inline void butterfly_stage(__m512 (&v)[16]) {
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    if (j & H) continue;
    const __m512 a = v[j], b = v[j + H];
    v[j] = _mm512_add_ps(a, b);
    v[j + H] = _mm512_sub_ps(a, b);
  }
}

// rht16_rows on sixteen rows of sixteen columns without its final 1/4: the signs, then the
// four butterfly stages (each pair's sum and difference as hadamard.cpp forms them). Unrolled
// and inlined so that the rows stay in registers.
[[gnu::always_inline]] inline void unscaled_rht16_lanes(__m512 (&v)[16]) {
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = _mm512_mul_ps(v[i], _mm512_set1_ps(kRhtSigns[i]));
  butterfly_stage<1>(v);
  butterfly_stage<2>(v);
  butterfly_stage<4>(v);
  butterfly_stage<8>(v);
}

// rht16_rows on sixteen rows of sixteen columns: the unscaled transform, then the exact 1/4.
[[gnu::always_inline]] inline void rht16_lanes(__m512 (&v)[16]) {
  unscaled_rht16_lanes(v);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = _mm512_mul_ps(v[i], _mm512_set1_ps(0.25f));
}

// Each lane's largest |v[r]| over the sixteen rows, a NaN left out (maxps keeps its second
// operand where the first is NaN): the column blocks' amaxes.
[[gnu::always_inline]] inline __m512 abs_max_down(const __m512 (&v)[16]) {
  __m512 m = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) m = _mm512_max_ps(_mm512_abs_ps(v[r]), m);
  return m;
}

// Sixteen columns from c0 of the first `rows` (at most 16) rows of x, the rest zero: plain loads
// where all sixteen rows and columns are there (the masked form is slower on Zen 4).
[[gnu::always_inline]] inline void load_sixteen_rows(__m512 (&v)[16], const float* x, int64_t rows,
                                                     int64_t cols, int64_t c0) {
  if (rows >= 16 && cols - c0 >= 16) {
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_ps(x + r * cols + c0);
    return;
  }
  const __mmask16 live = live_lanes(cols - c0);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) v[r] = load_live(r < rows ? live : __mmask16(0), x + r * cols + c0);
}

// Sixteen values' E2M1 codes (kept where codes is not null) and their BF16 operand values:
// the E2M1 value times the block scale b. That product is exact in BF16 (2 and 4 significant
// bits, between 2^-10 and 2688, or zero), so store_exact_bf16 stores its top half without
// the rounding; the codes' narrowing stays in registers (the memory forms of the narrowing
// moves are slow on some cores).
template <bool KeepCodes, bool Stochastic>
struct Nvfp4Store {
  const E2m1Lanes e2m1;
  const __m512 values = _mm512_loadu_ps(kE2M1Values.data());
  explicit Nvfp4Store(const uint32_t* sr_key) : e2m1(sr_key) {}

  // The hash counters of the sixteen values from `index` on (E2m1Lanes::counter; zeros where
  // no draws are made).
  __m512i counter(int64_t index) const {
    if constexpr (Stochastic) return e2m1.counter(static_cast<uint32_t>(index));
    return _mm512_setzero_si512();
  }

  // The operand values (the codes stored where kept), the lanes' draws from their counters.
  __m512 operand(uint8_t* codes, __m512 v, __m512 b, __mmask16 live, __m512i counter) const {
    __m512 value;
    if constexpr (KeepCodes) {
      const __m512i code = e2m1.encode_counted(v, counter);
      value = _mm512_permutexvar_ps(code, values);
      if (live == 0xffff) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtepi32_epi8(code));
      } else {
        _mm_mask_storeu_epi8(codes, live, _mm512_cvtepi32_epi8(code));
      }
    } else {
      value = e2m1.template value_counted<Stochastic>(v, counter);
    }
    return _mm512_mul_ps(value, b);
  }

  void operator()(uint8_t* codes, bf16_t* out, __m512 v, __m512 b, __mmask16 live,
                  __m512i counter) const {
    store_exact_bf16(out, operand(codes, v, b, live, counter), live);
  }
  void operator()(uint8_t* codes, bf16_t* out, __m512 v, __m512 b, __mmask16 live,
                  int64_t index) const {
    (*this)(codes, out, v, b, live, counter(index));
  }
};

template <bool KeepCodes, bool Stochastic>
void nvfp4_rows(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x, int64_t rows,
                int64_t cols, float global_encode, const uint32_t* sr_key, int64_t first_index) {
  const Nvfp4ScaleLanes rule(global_encode);
  const Nvfp4Store<KeepCodes, Stochastic> store(sr_key);
  cast_rows_of_blocks<1>(
      x, rows, cols, scales, rule, [&](int64_t i, __mmask16 live, __m512 m, __m512 b) {
        store(KeepCodes ? codes + i : nullptr, operand + i,
              _mm512_mul_ps(load_live(live, x + i), m), b, live, first_index + i);
      });
}

template <bool KeepCodes, bool Stochastic>
void nvfp4_columns(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x, int64_t rows,
                   int64_t cols, float global_encode, bool rht, const uint32_t* sr_key,
                   int64_t first_index) {
  const Nvfp4ScaleLanes rule(global_encode);
  const Nvfp4Store<KeepCodes, Stochastic> store(sr_key);
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const __mmask16 live = live_lanes(cols - c0);
    // Rows past the stripe's end (its last, short stripe) load as zeros: they leave the amax
    // alone and are not stored.
    __m512 v[16];
    load_sixteen_rows(v, x, rows, cols, c0);
    if (rht) rht16_lanes(v);
    const __m512 amax = abs_max_down(v);
    __m512i code;
    __m512 b, mult;
    rule.apply(amax, &code, &b, &mult);
    _mm512_mask_cvtepi32_storeu_epi8(scales + c0, live, code);
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      if (r >= rows) break;
      const int64_t i = r * cols + c0;
      store(KeepCodes ? codes + i : nullptr, operand + i, _mm512_mul_ps(v[r], mult), b, live,
            first_index + i);
    }
  }
}

// 16x16 blocks (the weights' 2D quantization) on a stripe of at most sixteen rows, sixteen
// blocks (256 columns) at a time: each block's |x| maxed down its rows into one register (a
// NaN left out, as in the rows' blocks), the sixteen registers' maxima into one
// (max_of_each) for the scales, then each block's rows cast again from cache.
template <bool KeepCodes, bool Stochastic>
void nvfp4_tiles(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x, int64_t rows,
                 int64_t cols, float global_encode, const uint32_t* sr_key, int64_t first_index) {
  const Nvfp4ScaleLanes rule(global_encode);
  const Nvfp4Store<KeepCodes, Stochastic> store(sr_key);
  const int64_t blocks = (cols + 15) / 16;
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int64_t nb = std::min<int64_t>(16, blocks - b0);
    __m512 a[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      a[j] = _mm512_setzero_ps();
      if (j >= nb) continue;  // blocks past the row's end: no lanes
      const int64_t c0 = (b0 + j) * 16;
      const __mmask16 live = live_lanes(cols - c0);
      for (int64_t r = 0; r < rows; ++r)
        a[j] = _mm512_max_ps(_mm512_abs_ps(load_live(live, x + r * cols + c0)), a[j]);
    }
    scale_sixteen_blocks(a, nb, scales + b0, rule, [&](int64_t j, __m512 m, __m512 bj) {
      const int64_t c0 = (b0 + j) * 16;
      const __mmask16 live = live_lanes(cols - c0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r * cols + c0;
        store(KeepCodes ? codes + i : nullptr, operand + i,
              _mm512_mul_ps(load_live(live, x + i), m), bj, live, first_index + i);
      }
    });
  }
}

// The casts of block_cast_pair's NVFP4 pair on a stripe of whole groups of 16 rows, each
// block's scale from the amax its sweep kept (nvfp4_pair_amaxes_avx512): every scale of the
// stripe first, then the values. A block's scale is a long chain of dependent steps (its amax,
// the E4M3 encode and decode, a division); taken just before the block's cast, as the casts
// above take it, it holds the cast's independent arithmetic back; taken all at once, the
// chains overlap one another.
template <bool KeepCodes, bool Stochastic>
void nvfp4_rows_from_amaxes(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                            int64_t rows, int64_t cols, float global_encode, const uint32_t* sr_key,
                            int64_t first_index, const float* row_amax) {
  const Nvfp4ScaleLanes rule(global_encode);
  const Nvfp4Store<KeepCodes, Stochastic> store(sr_key);
  const int64_t tiles = (cols + 15) / 16, n = rows * tiles;
  thread_local std::vector<float> mult_storage, b_storage;
  float* mult = grown(mult_storage, static_cast<size_t>(n));
  float* bs = grown(b_storage, static_cast<size_t>(n));
  // Tile k (16 rows, 16 columns) holds lane r's block in row 16 (k / tiles) + r.
  for (int64_t k = 0; k < n / 16; ++k) {
    __m512i code;
    __m512 b, m;
    rule.apply(_mm512_loadu_ps(row_amax + 16 * k), &code, &b, &m);
    _mm512_storeu_ps(mult + 16 * k, m);
    _mm512_storeu_ps(bs + 16 * k, b);
    alignas(16) uint8_t c8[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(c8), _mm512_cvtepi32_epi8(code));
    uint8_t* s = scales + (k / tiles) * 16 * tiles + k % tiles;
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) s[r * tiles] = c8[r];
  }
  // Block t of row r (its first value x[i]), scaled, rounded and times its scale.
  const auto block = [&](int64_t r, int64_t t, __mmask16 live, __m512i counter) {
    const int64_t i = r * cols + 16 * t, at = (r / 16 * tiles + t) * 16 + r % 16;
    return store.operand(KeepCodes ? codes + i : nullptr,
                         _mm512_mul_ps(load_live(live, x + i), _mm512_set1_ps(mult[at])),
                         _mm512_set1_ps(bs[at]), live, counter);
  };
  // Rows of an even number of whole blocks (most tensors): every lane live, known to the
  // compiler, and two blocks' operands stored at once. The blocks follow one another with no
  // gap, so the hash counters run on by sixteen values a block.
  if (tiles % 2 == 0 && cols % 16 == 0) {
    const __m512i sixteen = E2m1Lanes::advance(16);
    __m512i counter = store.counter(first_index);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < tiles; t += 2) {
        const __m512 first = block(r, t, 0xffff, counter);
        counter = _mm512_add_epi32(counter, sixteen);
        store_exact_bf16_pair(operand + r * cols + 16 * t, first, block(r, t + 1, 0xffff, counter));
        counter = _mm512_add_epi32(counter, sixteen);
      }
    }
    return;
  }
  const auto cast = [&](auto whole) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < tiles; ++t) {
        const __mmask16 live = whole ? __mmask16(0xffff) : live_lanes(cols - 16 * t);
        const int64_t i = r * cols + 16 * t;
        store_exact_bf16(operand + i, block(r, t, live, store.counter(first_index + i)), live);
      }
    }
  };
  if (cols % 16 == 0) {
    cast(std::true_type{});
  } else {
    cast(std::false_type{});
  }
}

template <bool KeepCodes, bool Stochastic>
void nvfp4_columns_from_amaxes(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                               int64_t rows, int64_t cols, float global_encode,
                               const uint32_t* sr_key, int64_t first_index, const float* col_amax) {
  const Nvfp4ScaleLanes rule(global_encode);
  const Nvfp4Store<KeepCodes, Stochastic> store(sr_key);
  const int64_t n = rows / 16 * cols;
  thread_local std::vector<float> mult_storage, b_storage;
  // Sixteen lanes past the end: the last run's dead lanes load from there.
  float* mult = grown(mult_storage, static_cast<size_t>(n + 16));
  float* bs = grown(b_storage, static_cast<size_t>(n + 16));
  for (int64_t g = 0; g < n; g += cols) {
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const __mmask16 live = live_lanes(cols - c0);
      __m512i code;
      __m512 b, m;
      rule.apply(load_live(live, col_amax + g + c0), &code, &b, &m);
      _mm512_mask_cvtepi32_storeu_epi8(scales + g + c0, live, code);
      store_live(live, mult + g + c0, m);
      store_live(live, bs + g + c0, b);
    }
  }
  // Rows of whole runs of sixteen (most tensors) with every lane live, known to the compiler.
  const __m512i down = E2m1Lanes::advance(cols);
  const auto cast = [&](auto whole) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      const int64_t g = r0 / 16 * cols;
      for (int64_t c0 = 0; c0 < cols; c0 += 16) {
        const __mmask16 live = whole ? __mmask16(0xffff) : live_lanes(cols - c0);
        __m512 v[16];
        load_sixteen_rows(v, x + r0 * cols, 16, cols, c0);
        rht16_lanes(v);
        const __m512 m = _mm512_loadu_ps(mult + g + c0), b = _mm512_loadu_ps(bs + g + c0);
        // The hash counters down the sixteen rows: a row's values are `cols` on.
        __m512i counter = store.counter(first_index + r0 * cols + c0);
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          const int64_t i = (r0 + r) * cols + c0;
          store(KeepCodes ? codes + i : nullptr, operand + i, _mm512_mul_ps(v[r], m), b, live,
                counter);
          counter = _mm512_add_epi32(counter, down);
        }
      }
    }
  };
  if (cols % 16 == 0) {
    cast(std::true_type{});
  } else {
    cast(std::false_type{});
  }
}

// kernel<KeepCodes, Stochastic> for whether codes are kept and whether an sr key is given: the
// loops over values then test neither.
template <class Kernel, class Make>
Kernel pick(const uint8_t* codes, const uint32_t* sr_key, Make make) {
  using Yes = std::true_type;
  using No = std::false_type;
  if (codes) return sr_key ? make(Yes{}, Yes{}) : make(Yes{}, No{});
  return sr_key ? make(No{}, Yes{}) : make(No{}, No{});
}

}  // namespace

void nvfp4_tiles_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                        int64_t rows, int64_t cols, float global_encode, const uint32_t* sr_key,
                        int64_t first_index) {
  pick<decltype(&nvfp4_tiles<true, true>)>(codes, sr_key, [](auto keep, auto sr) {
    return &nvfp4_tiles<decltype(keep)::value, decltype(sr)::value>;
  })(codes, scales, operand, x, rows, cols, global_encode, sr_key, first_index);
}

void nvfp4_rows_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                       int64_t rows, int64_t cols, float global_encode, const uint32_t* sr_key,
                       int64_t first_index) {
  pick<decltype(&nvfp4_rows<true, true>)>(codes, sr_key, [](auto keep, auto sr) {
    return &nvfp4_rows<decltype(keep)::value, decltype(sr)::value>;
  })(codes, scales, operand, x, rows, cols, global_encode, sr_key, first_index);
}

void nvfp4_columns_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                          int64_t rows, int64_t cols, float global_encode, bool rht,
                          const uint32_t* sr_key, int64_t first_index) {
  pick<decltype(&nvfp4_columns<true, true>)>(codes, sr_key, [](auto keep, auto sr) {
    return &nvfp4_columns<decltype(keep)::value, decltype(sr)::value>;
  })(codes, scales, operand, x, rows, cols, global_encode, rht, sr_key, first_index);
}

void nvfp4_rows_from_amaxes_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand, const float* x,
                                   int64_t rows, int64_t cols, float global_encode,
                                   const uint32_t* sr_key, int64_t first_index,
                                   const float* row_amax) {
  pick<decltype(&nvfp4_rows_from_amaxes<true, true>)>(codes, sr_key, [](auto keep, auto sr) {
    return &nvfp4_rows_from_amaxes<decltype(keep)::value, decltype(sr)::value>;
  })(codes, scales, operand, x, rows, cols, global_encode, sr_key, first_index, row_amax);
}

void nvfp4_columns_from_amaxes_avx512(uint8_t* codes, uint8_t* scales, bf16_t* operand,
                                      const float* x, int64_t rows, int64_t cols,
                                      float global_encode, const uint32_t* sr_key,
                                      int64_t first_index, const float* col_amax) {
  pick<decltype(&nvfp4_columns_from_amaxes<true, true>)>(codes, sr_key, [](auto keep, auto sr) {
    return &nvfp4_columns_from_amaxes<decltype(keep)::value, decltype(sr)::value>;
  })(codes, scales, operand, x, rows, cols, global_encode, sr_key, first_index, col_amax);
}

float nvfp4_pair_amaxes_avx512(const float* x, int64_t rows, int64_t cols, float* row_amax,
                               float* col_amax, float* plain_amax) {
  const int64_t tiles = (cols + 15) / 16;
  __m512 amax = _mm512_setzero_ps(), plain = _mm512_setzero_ps();
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t c0 = 16 * t;
      __m512 v[16], a[16];
      load_sixteen_rows(v, x + r0 * cols, 16, cols, c0);
      // Each row's block: |x| maxed with zero (a NaN left out, as the casts' amaxes leave it).
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) a[r] = _mm512_max_ps(_mm512_abs_ps(v[r]), _mm512_setzero_ps());
      const __m512 rows_max = max_of_each(a);
      _mm512_storeu_ps(row_amax + (r0 / 16 * tiles + t) * 16, rows_max);
      plain = _mm512_max_ps(rows_max, plain);
      unscaled_rht16_lanes(v);
      const __m512 col = abs_max_down(v);
      amax = _mm512_max_ps(col, amax);
      // The transform's 1/4 on each block's maximum (rht16_absmax_avx512 says why that is the
      // maximum of the quarters).
      store_live(live_lanes(cols - c0), col_amax + r0 / 16 * cols + c0,
                 _mm512_mul_ps(col, _mm512_set1_ps(0.25f)));
    }
  }
  *plain_amax = _mm512_reduce_max_ps(plain);
  return _mm512_reduce_max_ps(amax) * 0.25f;
}

float rht16_absmax_avx512(const float* x, int64_t rows, int64_t cols, float* plain_amax) {
  __m512 amax = _mm512_setzero_ps(), plain = _mm512_setzero_ps();
  for (int64_t g = 0; g < rows; g += 16) {
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512 v[16];
      load_sixteen_rows(v, x + g * cols, 16, cols, c0);
      if (plain_amax) plain = _mm512_max_ps(abs_max_down(v), plain);
      unscaled_rht16_lanes(v);
      amax = _mm512_max_ps(abs_max_down(v), amax);
    }
  }
  if (plain_amax) *plain_amax = _mm512_reduce_max_ps(plain);
  // The 1/4 once, on the maximum: |v| / 4 rounds monotonically, so the largest of the rounded
  // quarters is the rounded quarter of the largest (NaN lanes were left out either way).
  return _mm512_reduce_max_ps(amax) * 0.25f;
}

}  // namespace fp8lm::isa
