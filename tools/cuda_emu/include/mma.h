#pragma once
// nvcuda::wmma on the emulator. A fragment is spread over the warp as on a GPU: each lane
// holds num_elements of the tile, here lane l element e being tile entry e * 32 + l in
// row-major order (the GPU's assignment is different and undocumented; code must not depend on
// it, and code that does gets wrong answers here). mma_sync is a warp collective: the lanes
// exchange their A and B elements, then each computes its own D elements as an FP32 sum over k
// in order, products exact (a 16-bit x 16-bit product fits a float). Tensor cores may sum in
// another order and precision; see tools/cuda_emu/README.md.
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "emu/warp.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {

// The tile a fragment holds: matrix_a is M x K, matrix_b K x N, the accumulator M x N.
template <typename Use, int M, int N, int K>
struct TileShape {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
};

inline float to_float(float v) {
  return v;
}
inline float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// WMMA's documented requirements: a 256-bit aligned pointer, ldm a multiple of 16 bytes.
template <typename T>
void check_memory(const T* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) emu::device_error(what);
  if (ldm * sizeof(T) % 16 != 0) emu::device_error(what);
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                    (M == 8 && N == 32 && K == 16),
                "the emulator has the 16-bit WMMA shapes only");

 public:
  using Shape = detail::TileShape<Use, M, N, K>;
  using element_type = T;
  static constexpr int num_elements = Shape::rows * Shape::cols / 32;
  T x[num_elements];

  // Row and column of element e of the running lane.
  static int row_of(int e) { return (e * 32 + emu::lane_id()) / Shape::cols; }
  static int col_of(int e) { return (e * 32 + emu::lane_id()) % Shape::cols; }
};

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, std::type_identity_t<T> v) {
  for (T& e : f.x) e = v;
}

// matrix_a / matrix_b with their layout in the type.
template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  static_assert(std::is_same_v<L, row_major> || std::is_same_v<L, col_major>);
  detail::check_memory(
      p, ldm,
      "wmma::load_matrix_sync: pointer not 32-byte aligned or ldm not a multiple of 16 bytes");
  using F = fragment<Use, M, N, K, T, L>;
  for (int e = 0; e < F::num_elements; ++e) {
    const int r = F::row_of(e), c = F::col_of(e);
    f.x[e] = std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r];
  }
}

// The accumulator, its layout given at the call.
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm,
                      layout_t layout) {
  detail::check_memory(
      p, ldm,
      "wmma::load_matrix_sync: pointer not 32-byte aligned or ldm not a multiple of 16 bytes");
  using F = fragment<accumulator, M, N, K, T>;
  for (int e = 0; e < F::num_elements; ++e) {
    const int r = F::row_of(e), c = F::col_of(e);
    f.x[e] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                       layout_t layout) {
  detail::check_memory(
      p, ldm,
      "wmma::store_matrix_sync: pointer not 32-byte aligned or ldm not a multiple of 16 bytes");
  using F = fragment<accumulator, M, N, K, T>;
  for (int e = 0; e < F::num_elements; ++e) {
    const int r = F::row_of(e), c = F::col_of(e);
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}

// d = a * b + c (d may be c).
template <int M, int N, int K, typename Tab, typename LA, typename LB, typename Tc>
void mma_sync(fragment<accumulator, M, N, K, Tc>& d, const fragment<matrix_a, M, N, K, Tab, LA>& a,
              const fragment<matrix_b, M, N, K, Tab, LB>& b,
              const fragment<accumulator, M, N, K, Tc>& c) {
  using FA = fragment<matrix_a, M, N, K, Tab, LA>;
  using FB = fragment<matrix_b, M, N, K, Tab, LB>;
  using FC = fragment<accumulator, M, N, K, Tc>;
  static_assert(sizeof a.x + sizeof b.x <= emu::kWarpSlotBytes);
  unsigned char mine[sizeof a.x + sizeof b.x];
  std::memcpy(mine, a.x, sizeof a.x);
  std::memcpy(mine + sizeof a.x, b.x, sizeof b.x);
  const emu::WarpSlots s = emu::warp_exchange(0xffffffffu, mine, sizeof mine);
  // Entry i of a tile lives in lane i % 32, element i / 32.
  auto a_at = [&](int r, int k) {
    const int i = r * K + k;
    Tab v;
    std::memcpy(&v, s.data[i % 32] + (i / 32) * sizeof(Tab), sizeof v);
    return detail::to_float(v);
  };
  auto b_at = [&](int k, int col) {
    const int i = k * N + col;
    Tab v;
    std::memcpy(&v, s.data[i % 32] + sizeof a.x + (i / 32) * sizeof(Tab), sizeof v);
    return detail::to_float(v);
  };
  static_assert(FA::num_elements * 32 == M * K && FB::num_elements * 32 == K * N);
  // k outermost, so that the lane's num_elements sums advance side by side; each is still
  // the sum over k in order from c.
  float acc[FC::num_elements];
  for (int e = 0; e < FC::num_elements; ++e) acc[e] = c.x[e];
  if constexpr (M == 16 && N == 16 && K == 16 && std::is_same_v<Tab, __nv_bfloat16>) {
    // The hot shape, unrolled from the layout: lane l's elements e sit at row 2e + l / 16 and
    // column l % 16, so A(row_e, k) is element e of lane (l / 16) * 16 + k (8 consecutive
    // values) and B(k, column) element k / 2 of lane (k % 2) * 16 + l % 16.
    const int lane = emu::lane_id();
    for (int k = 0; k < K; ++k) {
      const unsigned char* a_k = s.data[(lane / 16) * 16 + k];
      const float b_k = b_at(k, lane % 16);
      for (int e = 0; e < FC::num_elements; ++e) {
        uint16_t bits;
        std::memcpy(&bits, a_k + 2 * e, 2);
        acc[e] += std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) * b_k;
      }
    }
  } else {
    int row[FC::num_elements], col[FC::num_elements];
    for (int e = 0; e < FC::num_elements; ++e) {
      row[e] = FC::row_of(e);
      col[e] = FC::col_of(e);
    }
    for (int k = 0; k < K; ++k)
      for (int e = 0; e < FC::num_elements; ++e) acc[e] += a_at(row[e], k) * b_at(k, col[e]);
  }
  for (int e = 0; e < FC::num_elements; ++e) d.x[e] = acc[e];
}

}  // namespace nvcuda::wmma
