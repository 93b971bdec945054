#include "dist/optimizer_sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <span>

#include "dist/gradient_buckets.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

// Parameters [begin, end)'s buffers (those `of` picks) copied into one flat host buffer in
// order, and back.
void pack(const ParameterList& ps, size_t begin, size_t end, const OptimizerSharding::BufferOf& of,
          float* flat) {
  for (size_t i = begin; i < end; ++i) {
    of(i, *ps[i]).read_bytes([&](std::span<const uint8_t> bytes) {
      std::memcpy(flat, bytes.data(), bytes.size());
      flat += bytes.size() / sizeof(float);
    });
  }
}

void unpack(const ParameterList& ps, size_t begin, size_t end,
            const OptimizerSharding::BufferOf& of, const float* flat) {
  for (size_t i = begin; i < end; ++i) {
    of(i, *ps[i]).fill_bytes([&](std::span<uint8_t> bytes) {
      std::memcpy(bytes.data(), flat, bytes.size());
      flat += bytes.size() / sizeof(float);
    });
  }
}

size_t values_in(const ParameterList& ps) {
  size_t n = 0;
  for (const Parameter* p : ps) n += static_cast<size_t>(p->numel());  // masters kept or not
  return n;
}

// One reduce-scatter over flat buffers of the reduction's type (FP32 or BF16).
template <class T>
void reduce_scatter(Communicator& ranks, const ParameterList& ps, std::span<const size_t> begin,
                    std::span<const int> counts, std::vector<T>& all, std::vector<T>& mine) {
  const auto me = static_cast<size_t>(ranks.rank());
  all.resize(values_in(ps));
  mine.resize(static_cast<size_t>(counts[me]));
  pack_gradients(ps, 0, ps.size(), all.data());
  ranks.reduce_scatter_sum(std::span<const T>(all), mine, counts, "gradient reduce-scatter");
  unpack_gradients(ps, begin[me], begin[me + 1], mine.data());
}

}  // namespace

OptimizerSharding::OptimizerSharding(Communicator& ranks, const ParameterList& ps, bool bf16_reduce)
    : ranks_(ranks), bf16_reduce_(bf16_reduce) {
  const int n = ranks.size();
  int64_t total = 0;
  for (const Parameter* p : ps) total += p->numel();
  if (total > INT_MAX) {
    throw Error(
        fmt::format("--zero 1: {} parameters exceed what one MPI collective counts "
                    "({}); train without --zero",
                    total, INT_MAX));
  }
  begin_.assign(static_cast<size_t>(n) + 1, ps.size());
  begin_[0] = 0;
  int64_t before = 0;
  size_t r = 1;
  for (size_t i = 0; i < ps.size(); ++i) {
    while (r < static_cast<size_t>(n) && before * n >= total * static_cast<int64_t>(r))
      begin_[r++] = i;
    before += ps[i]->numel();
  }
  values_.assign(static_cast<size_t>(n), 0);
  for (size_t k = 0; k < static_cast<size_t>(n); ++k)
    for (size_t i = begin_[k]; i < begin_[k + 1]; ++i)
      values_[k] += static_cast<int>(ps[i]->numel());
}

void OptimizerSharding::reduce_scatter_gradients(const ParameterList& ps) {
  if (bf16_reduce_) {
    reduce_scatter(ranks_, ps, begin_, values_, flat16_, shard16_);
  } else {
    reduce_scatter(ranks_, ps, begin_, values_, flat_, shard_);
  }
}

void OptimizerSharding::all_gather_weights(const ParameterList& ps,
                                           const std::vector<Linear*>& as_fp8,
                                           const Fp8Recipe& recipe, const char* what) {
  const auto me = static_cast<size_t>(ranks_.rank());
  // What each parameter sends: FP8 codes with the scale and scale_inv they were cast with and
  // the amax the cast recorded, or its FP32 values.
  constexpr size_t kScales = 3 * sizeof(float);
  const auto sent_bytes = [&](size_t i) {
    const auto n = static_cast<size_t>(ps[i]->numel());
    return as_fp8[i] ? n + kScales : n * sizeof(float);
  };
  const size_t ranks = values_.size();
  std::vector<size_t> at(ranks + 1, 0);
  std::vector<int> counts(ranks);
  for (size_t k = 0; k < ranks; ++k) {
    size_t bytes = 0;
    for (size_t i = begin_[k]; i < begin_[k + 1]; ++i) bytes += sent_bytes(i);
    if (bytes > INT_MAX) {
      throw Error(
          fmt::format("--zero 1: rank {}'s {} bytes of weights exceed what one MPI "
                      "collective counts ({}); use more ranks or train without --zero",
                      k, bytes, INT_MAX));
    }
    counts[k] = static_cast<int>(bytes);
    at[k + 1] = at[k] + bytes;
  }
  // In the buffer the gradients were reduce-scattered in (they are unpacked by now): no second
  // copy of the model held for the step.
  flat_.resize((at[ranks] + sizeof(float) - 1) / sizeof(float));
  const std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(flat_.data()), at[ranks]);
  uint8_t* out = bytes.data() + at[me];
  for (size_t i = begin_[me]; i < begin_[me + 1]; ++i) {
    if (Linear* l = as_fp8[i]) {
      l->requantize_weight(recipe);
      const Linear::Fp8Weight w = l->fp8_weight();
      const float scales[] = {w.scale, w.scale_inv, w.amax};
      out = std::copy(w.codes.begin(), w.codes.end(), out);
      std::memcpy(out, scales, kScales);
      out += kScales;
    } else {
      ps[i]->value.read_bytes(
          [&](std::span<const uint8_t> b) { out = std::copy(b.begin(), b.end(), out); });
    }
  }
  ranks_.all_gather(bytes, counts, what);
  for (size_t k = 0; k < ranks; ++k) {
    if (k == me) continue;
    const uint8_t* in = bytes.data() + at[k];
    for (size_t i = begin_[k]; i < begin_[k + 1]; ++i) {
      Parameter& p = *ps[i];
      const auto n = static_cast<size_t>(p.numel());
      if (Linear* l = as_fp8[i]) {
        float scales[3];
        std::memcpy(scales, in + n, kScales);
        l->adopt_fp8_weight({in, n}, scales[0], scales[1], scales[2]);
        p.value.clear();  // its master is the updating rank's alone
      } else {
        p.value.resize(n);  // whole again where it was released
        p.value.fill_bytes([&](std::span<uint8_t> b) {
          std::memcpy(b.data(), in, b.size());
          in += b.size();
        });
        ++p.version;
        continue;
      }
      in += n + kScales;
    }
  }
}

void OptimizerSharding::gather_to_first(const ParameterList& ps, const BufferOf& of,
                                        const char* what) {
  const auto me = static_cast<size_t>(ranks_.rank());
  // Into the buffer the gradients are reduce-scattered in: a checkpoint allocates no second
  // whole-model buffer.
  flat_.resize(me == 0 ? values_in(ps) : 0);
  shard_.resize(static_cast<size_t>(values_[me]));
  pack(ps, begin_[me], begin_[me + 1], of, shard_.data());
  ranks_.gather_to_first(shard_, flat_, values_, what);
  if (me == 0) unpack(ps, 0, ps.size(), of, flat_.data());
}

}  // namespace fp8lm
