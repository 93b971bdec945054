#include "dist/gradient_buckets.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "fp8lm/error.h"

namespace fp8lm {

namespace {

// n values from one storage type to another: a copy when they are the same, else a conversion.
template <class To, class From>
void convert(To* to, const From* from, size_t n) {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(to, from, n * sizeof(To));
  } else if constexpr (std::is_same_v<To, bf16_t>) {
    for (size_t i = 0; i < n; ++i) to[i] = bf16_from_float(from[i]);
  } else {
    for (size_t i = 0; i < n; ++i) to[i] = bf16_to_float(from[i]);
  }
}

// The pieces read_bytes and fill_bytes hand over are the buffer itself (host memory) or a
// staging buffer from operator new at multiples of its piece size: aligned for the values.
template <class T, class Stored>
void pack_one(const BackendBuffer<Stored>& grad, T*& flat) {
  grad.read_bytes([&](std::span<const uint8_t> bytes) {
    const size_t n = bytes.size() / sizeof(Stored);
    convert(flat, reinterpret_cast<const Stored*>(bytes.data()), n);
    flat += n;
  });
}

template <class T, class Stored>
void unpack_one(BackendBuffer<Stored>& grad, const T*& flat) {
  grad.fill_bytes([&](std::span<uint8_t> bytes) {
    const size_t n = bytes.size() / sizeof(Stored);
    convert(reinterpret_cast<Stored*>(bytes.data()), flat, n);
    flat += n;
  });
}

}  // namespace

template <class T>
void pack_gradients(const ParameterList& ps, size_t begin, size_t end, T* flat) {
  for (size_t i = begin; i < end; ++i) {
    if (ps[i]->bf16_grad()) {
      pack_one(ps[i]->grad16, flat);
    } else {
      pack_one(ps[i]->grad, flat);
    }
  }
}

template <class T>
void unpack_gradients(const ParameterList& ps, size_t begin, size_t end, const T* flat) {
  for (size_t i = begin; i < end; ++i) {
    if (ps[i]->bf16_grad()) {
      unpack_one(ps[i]->grad16, flat);
    } else {
      unpack_one(ps[i]->grad, flat);
    }
  }
}

template void pack_gradients(const ParameterList&, size_t, size_t, float*);
template void pack_gradients(const ParameterList&, size_t, size_t, bf16_t*);
template void unpack_gradients(const ParameterList&, size_t, size_t, const float*);
template void unpack_gradients(const ParameterList&, size_t, size_t, const bf16_t*);

GradientBuckets::GradientBuckets(ParameterList params, Communicator& ranks, bool bf16,
                                 size_t bucket_bytes, DeviceCollectives* device)
    : params_(std::move(params)),
      ranks_(ranks),
      bf16_(bf16),
      ready_(params_.size(), false),
      device_(device) {
  offset_.push_back(0);
  for (const Parameter* p : params_)
    offset_.push_back(offset_.back() + static_cast<size_t>(p->numel()));
  const size_t value_bytes = bf16 ? sizeof(bf16_t) : sizeof(float);
  // From the last parameter back: a bucket closes once it reaches the size.
  size_t end = params_.size();
  for (size_t i = params_.size(); i-- > 0;) {
    const size_t bytes = (offset_[end] - offset_[i]) * value_bytes;
    if (i == 0 || (bucket_bytes > 0 && bytes >= bucket_bytes)) {
      buckets_.push_back({i, end});
      end = i;
    }
  }
  if (device_) {
    Backend& be = params_.front()->grad.backend();
    for (const Parameter* p : params_)
      if (p->bf16_grad()) throw Error("internal: a GPU keeps FP32 gradients");
    if (bf16) {
      device16_ = std::make_unique<BackendBuffer<bf16_t>>(be, offset_.back());
    } else {
      device32_ = std::make_unique<BackendBuffer<float>>(be, offset_.back());
    }
  } else if (bf16) {
    flat16_.resize(offset_.back());
  } else {
    flat32_.resize(offset_.back());
  }
}

void GradientBuckets::start(size_t b) {
  const Bucket& k = buckets_[b];
  if (device_) {  // copied (or rounded to BF16) into the bucket on the GPU, reduced there
    Backend& be = params_.front()->grad.backend();
    for (size_t i = k.begin; i < k.end; ++i) {
      const Parameter& p = *params_[i];
      if (bf16_) {
        be.fp32_to_bf16(device16_->data() + offset_[i], p.grad.data(), p.numel());
      } else {
        be.copy(device32_->data() + offset_[i], p.grad.data(), p.grad.size() * sizeof(float));
      }
    }
    const size_t n = offset_[k.end] - offset_[k.begin];
    if (bf16_) {
      device_->start_all_reduce_sum(device16_->data() + offset_[k.begin], n, "gradient all-reduce");
    } else {
      device_->start_all_reduce_sum(device32_->data() + offset_[k.begin], n, "gradient all-reduce");
    }
    return;
  }
  if (bf16_) {
    pack_gradients(params_, k.begin, k.end, flat16_.data() + offset_[k.begin]);
    ranks_.start_all_reduce_sum(
        std::span(flat16_).subspan(offset_[k.begin], offset_[k.end] - offset_[k.begin]),
        "gradient all-reduce");
  } else {
    pack_gradients(params_, k.begin, k.end, flat32_.data() + offset_[k.begin]);
    ranks_.start_all_reduce_sum(
        std::span(flat32_).subspan(offset_[k.begin], offset_[k.end] - offset_[k.begin]),
        "gradient all-reduce");
  }
}

void GradientBuckets::ready(size_t first, size_t end) {
  std::fill(ready_.begin() + static_cast<ptrdiff_t>(first),
            ready_.begin() + static_cast<ptrdiff_t>(end), true);
  while (next_ < buckets_.size()) {
    const Bucket& k = buckets_[next_];
    if (!std::all_of(ready_.begin() + static_cast<ptrdiff_t>(k.begin),
                     ready_.begin() + static_cast<ptrdiff_t>(k.end), [](bool r) { return r; }))
      break;
    start(next_++);
  }
  ranks_.progress();
}

void GradientBuckets::finish() {
  while (next_ < buckets_.size()) start(next_++);
  if (device_) {
    device_->wait_all();
    Backend& be = params_.front()->grad.backend();
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      if (bf16_) {
        be.bf16_to_fp32(p.grad.data(), device16_->data() + offset_[i], p.numel());
      } else {
        be.copy(p.grad.data(), device32_->data() + offset_[i], p.grad.size() * sizeof(float));
      }
    }
  } else {
    ranks_.wait_all();
    if (bf16_) {
      unpack_gradients(params_, 0, params_.size(), flat16_.data());
    } else {
      unpack_gradients(params_, 0, params_.size(), flat32_.data());
    }
  }
  next_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
}

}  // namespace fp8lm
