#pragma once
// Warp shuffles and votes. Each is a real exchange between the lanes' fibres: a lane deposits
// its value, waits until every lane named in the mask has arrived at a warp collective, then
// reads the lane it asked for. A lane of the mask that has exited, or a source lane outside
// the mask, is an error or reads poison (0xFF bytes), where a GPU would give an undefined value.
#include <cstring>
#include <type_traits>

#include "emu/thread.h"

namespace emu {

// Room for one lane's share of two WMMA fragments (mma_sync exchanges its A and B at once).
inline constexpr int kWarpSlotBytes = 64;

// What one warp collective saw: the lanes that took part, and each one's deposited bytes.
struct WarpSlots {
  unsigned mask;
  const unsigned char (*data)[kWarpSlotBytes];  // [32]
};

// The running lane deposits `bytes` bytes (at most kWarpSlotBytes) of `value` and waits for
// the lanes of mask (which must include itself). The slots stay valid until its next warp
// collective.
WarpSlots warp_exchange(unsigned mask, const void* value, std::size_t bytes);

inline int lane_id() {
  return static_cast<int>(linear_thread() % 32);
}

template <typename T>
T shuffle_from(unsigned mask, T v, int src) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16,
                "a shuffle moves a trivially copyable value of at most 16 bytes");
  const WarpSlots s = warp_exchange(mask, &v, sizeof v);
  T r;
  if (src < 0 || src > 31 || !(s.mask >> src & 1u)) {
    std::memset(&r, 0xff, sizeof r);  // a lane that did not take part: undefined on a GPU
  } else {
    std::memcpy(&r, s.data[src], sizeof r);
  }
  return r;
}

// The segment of `width` lanes (a power of two up to 32) the running lane belongs to.
inline int segment_base(int width) {
  return lane_id() & ~(width - 1);
}

}  // namespace emu

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
  return emu::shuffle_from(mask, v, emu::segment_base(width) + (src_lane & (width - 1)));
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  const int lane = emu::lane_id();
  const int src = lane ^ lane_mask;
  return emu::shuffle_from(mask, v, src / width == lane / width ? src : lane);
}

template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int lane = emu::lane_id();
  const int in_segment = (lane & (width - 1)) + static_cast<int>(delta);
  return emu::shuffle_from(mask, v, in_segment < width ? lane + static_cast<int>(delta) : lane);
}

template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int lane = emu::lane_id();
  const bool inside = (lane & (width - 1)) >= static_cast<int>(delta);
  return emu::shuffle_from(mask, v, inside ? lane - static_cast<int>(delta) : lane);
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  const int p = predicate != 0;
  const emu::WarpSlots s = emu::warp_exchange(mask, &p, sizeof p);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) {
    int q = 0;
    if (s.mask >> l & 1u) std::memcpy(&q, s.data[l], sizeof q);
    ballot |= static_cast<unsigned>(q) << l;
  }
  return ballot;
}

inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}

inline int __all_sync(unsigned mask, int predicate) {
  return (__ballot_sync(mask, predicate) & mask) == mask;  // every lane of mask took part
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  emu::warp_exchange(mask, nullptr, 0);
}

// The lanes of the running warp that have not exited.
namespace emu {
unsigned active_lanes();
}
inline unsigned __activemask() {
  return emu::active_lanes();
}
