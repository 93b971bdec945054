#include "gpu/cuda_scaling.h"

#include "core/fp8_dtype.h"

namespace fp8lm::gpu {

ScalingSlots::ScalingSlots(const std::vector<Fp8Meta*>& metas)
    : n_linears_(static_cast<int>(metas.size())),
      history_(metas.empty() ? 1 : static_cast<int>((*metas[0])[Slot::Input].amax_history.size())),
      cast_n_(size_t(5 * metas.size()), 0) {
  const size_t n = 5 * metas.size();
  history_buf_.resize(n * size_t(history_));
  scale_.resize(n);
  scale_inv_.resize(n);
  fp8_max_.resize(n);
  forward_scale_inv_.resize(n);
  saturated_.resize(n);
  flushed_.resize(n);
  upload(metas);
}

int ScalingSlots::slot(int linear, Slot s) const {
  const int k = static_cast<int>(s);
  return slot_direction(s) == Direction::Forward ? 3 * linear + k
                                                 : 3 * n_linears_ + 2 * linear + (k - 3);
}

Fp8Out ScalingSlots::out(int linear, Slot s, uint8_t* codes) {
  const size_t i = size_t(slot(linear, s));
  Fp8Out o;
  o.data = codes;
  o.scale = scale_.data() + i;
  o.amax = history_buf_.data() + i * size_t(history_);
  o.format = format_[i];
  o.saturated = saturated_.data() + i;
  o.flushed = flushed_.data() + i;
  return o;
}

const float* ScalingSlots::scale_inv(int linear, Slot s) const {
  return scale_inv_.data() + slot(linear, s);
}

const float* ScalingSlots::forward_scale_inv(int linear, Slot s) const {
  return forward_scale_inv_.data() + slot(linear, s);
}

cuda::ScalingSlots ScalingSlots::view() {
  return {history_buf_.data(), scale_.data(),  scale_inv_.data(),
          fp8_max_.data(),     5 * n_linears_, history_};
}

void ScalingSlots::begin(Direction d, cudaStream_t s) {
  const size_t first = d == Direction::Forward ? 0 : size_t(3 * n_linears_);
  const size_t count = size_t(d == Direction::Forward ? 3 : 2) * size_t(n_linears_);
  FP8LM_CUDA_CHECK(
      cudaMemsetAsync(saturated_.data() + first, 0, count * sizeof(unsigned long long), s));
  FP8LM_CUDA_CHECK(
      cudaMemsetAsync(flushed_.data() + first, 0, count * sizeof(unsigned long long), s));
}

void ScalingSlots::update(Direction d, const DelayedScaling& recipe, cudaStream_t s) {
  if (n_linears_ == 0) return;
  if (d == Direction::Forward) {
    FP8LM_CUDA_CHECK(cudaMemcpyAsync(forward_scale_inv_.data(), scale_inv_.data(),
                                     size_t(3 * n_linears_) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s));
    cuda::update_delayed_scaling(view(), 0, 3 * n_linears_, recipe.margin, recipe.amax_compute_algo,
                                 s);
  } else {
    cuda::update_delayed_scaling(view(), 3 * n_linears_, 2 * n_linears_, recipe.margin,
                                 recipe.amax_compute_algo, s);
  }
}

void ScalingSlots::upload(const std::vector<Fp8Meta*>& metas) {
  const size_t n = 5 * metas.size(), H = size_t(history_);
  std::vector<float> hist(n * H), scale(n), scale_inv(n), fmax(n);
  format_.assign(n, Fp8Format::E4M3);
  for (int l = 0; l < n_linears_; ++l) {
    for (Slot s : {Slot::Input, Slot::Weight, Slot::Output, Slot::GradOutput, Slot::GradInput}) {
      const ScalingState& st = (*metas[size_t(l)])[s];
      const size_t i = size_t(slot(l, s));
      if (st.amax_history.size() != H) throw Error("FP8 metas differ in amax history length");
      std::copy(st.amax_history.begin(), st.amax_history.end(), hist.begin() + long(i * H));
      scale[i] = st.scale;
      scale_inv[i] = st.scale_inv;
      fmax[i] = fp8_max(st.format);
      format_[i] = st.format;
      cast_n_[i] = st.last_cast.n;
    }
  }
  cuda::upload(history_buf_.data(), hist.data(), hist.size());
  cuda::upload(scale_.data(), scale.data(), n);
  cuda::upload(scale_inv_.data(), scale_inv.data(), n);
  cuda::upload(forward_scale_inv_.data(), scale_inv.data(), n);
  cuda::upload(fp8_max_.data(), fmax.data(), n);
  saturated_.zero();
  flushed_.zero();
}

void ScalingSlots::download(const std::vector<Fp8Meta*>& metas) const {
  const size_t n = 5 * metas.size(), H = size_t(history_);
  const auto hist = cuda::to_host(history_buf_.data(), n * H);
  const auto scale = cuda::to_host(scale_.data(), n);
  const auto scale_inv = cuda::to_host(scale_inv_.data(), n);
  const auto sat = cuda::to_host(saturated_.data(), n);
  const auto flush = cuda::to_host(flushed_.data(), n);
  for (int l = 0; l < n_linears_; ++l) {
    for (Slot s : {Slot::Input, Slot::Weight, Slot::Output, Slot::GradOutput, Slot::GradInput}) {
      ScalingState& st = (*metas[size_t(l)])[s];
      const size_t i = size_t(slot(l, s));
      std::copy(hist.begin() + long(i * H), hist.begin() + long((i + 1) * H),
                st.amax_history.begin());
      st.scale = scale[i];
      st.scale_inv = scale_inv[i];
      st.last_cast = {cast_n_[i], static_cast<int64_t>(sat[i]), static_cast<int64_t>(flush[i])};
    }
  }
}

namespace {
template <typename T>
void copy_buffer(cuda::DeviceBuffer<T>& dst, const cuda::DeviceBuffer<T>& src) {
  dst.resize(src.size());
  FP8LM_CUDA_CHECK(cudaMemcpy(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice));
}
}  // namespace

void ScalingSlots::save() {
  copy_buffer(saved_history_, history_buf_);
  copy_buffer(saved_scale_, scale_);
  copy_buffer(saved_scale_inv_, scale_inv_);
  copy_buffer(saved_saturated_, saturated_);
  copy_buffer(saved_flushed_, flushed_);
  saved_cast_n_ = cast_n_;
}

void ScalingSlots::restore() {
  copy_buffer(history_buf_, saved_history_);
  copy_buffer(scale_, saved_scale_);
  copy_buffer(scale_inv_, saved_scale_inv_);
  copy_buffer(saturated_, saved_saturated_);
  copy_buffer(flushed_, saved_flushed_);
  cast_n_ = saved_cast_n_;
}

}  // namespace fp8lm::gpu
