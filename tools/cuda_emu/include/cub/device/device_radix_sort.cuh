#pragma once
// cub::DeviceRadixSort::SortPairs on the host: a stable sort of (key, value) pairs by the key
// bits [begin_bit, end_bit), signed keys ordered as numbers (cub flips their sign bit). The
// two-call protocol is kept: a null d_temp_storage asks for the bytes, and the real call
// checks it was given at least that many, and that every array is device memory.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cuda_runtime_api.h"

namespace emu {
// Whether [p, p + bytes) is inside one cudaMalloc allocation (reported when not).
bool check_device_range(const void* p, std::size_t bytes, const char* what);
// Runs work now, or keeps it as the next graph node if stream captures (src/graphs.cpp).
cudaError_t run_on_stream(cudaStream_t stream, std::function<void()> work);
}  // namespace emu

namespace cub {

struct DeviceRadixSort {
  // What the emulation asks for: room for a copy of keys and values, as a real radix sort's
  // double buffers need, plus alignment slack.
  template <typename KeyT, typename ValueT>
  static std::size_t temp_bytes(std::size_t n) {
    return n * (sizeof(KeyT) + sizeof(ValueT)) + 256;
  }

  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const KeyT* d_keys_in, KeyT* d_keys_out, const ValueT* d_values_in,
                               ValueT* d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = nullptr) {
    static_assert(std::is_integral_v<KeyT>, "the emulator sorts integer keys");
    if (num_items < 0 || begin_bit < 0 || end_bit > static_cast<int>(sizeof(KeyT) * 8) ||
        begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    const auto n = static_cast<std::size_t>(num_items);
    const std::size_t need = temp_bytes<KeyT, ValueT>(n);
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (temp_storage_bytes < need ||
        !emu::check_device_range(d_temp_storage, temp_storage_bytes, "SortPairs temp storage") ||
        !emu::check_device_range(d_keys_in, n * sizeof(KeyT), "SortPairs keys in") ||
        !emu::check_device_range(d_keys_out, n * sizeof(KeyT), "SortPairs keys out") ||
        !emu::check_device_range(d_values_in, n * sizeof(ValueT), "SortPairs values in") ||
        !emu::check_device_range(d_values_out, n * sizeof(ValueT), "SortPairs values out"))
      return cudaErrorInvalidValue;
    return emu::run_on_stream(stream, [=] {
      sort(d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, d_values_in, d_values_out, n,
           begin_bit, end_bit);
    });
  }

 private:
  template <typename KeyT, typename ValueT>
  static void sort(void* d_temp_storage, std::size_t temp_storage_bytes, const KeyT* d_keys_in,
                   KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out, std::size_t n,
                   int begin_bit, int end_bit) {
    using U = std::make_unsigned_t<KeyT>;
    constexpr U kSign = std::is_signed_v<KeyT> ? U(U(1) << (sizeof(KeyT) * 8 - 1)) : U(0);
    const U mask = static_cast<U>((end_bit - begin_bit >= static_cast<int>(sizeof(U) * 8)
                                       ? ~U(0)
                                       : U((U(1) << (end_bit - begin_bit)) - 1))
                                  << begin_bit);
    auto radix = [&](KeyT k) { return static_cast<U>((static_cast<U>(k) ^ kSign) & mask); };
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return radix(d_keys_in[a]) < radix(d_keys_in[b]);
    });
    std::vector<KeyT> keys(n);
    std::vector<ValueT> values(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = d_keys_in[order[i]];
      values[i] = d_values_in[order[i]];
    }
    std::copy(keys.begin(), keys.end(), d_keys_out);
    std::copy(values.begin(), values.end(), d_values_out);
    std::memset(d_temp_storage, 0xff, temp_storage_bytes);  // scratch is garbage afterwards
  }
};

}  // namespace cub
