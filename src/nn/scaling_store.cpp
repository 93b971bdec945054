#include "nn/scaling_store.h"

namespace fp8lm {
namespace {

constexpr Slot kSlots[] = {Slot::Input, Slot::Weight, Slot::Output, Slot::GradOutput,
                           Slot::GradInput};

template <class T>
T read_one(Backend& be, const T* p) {
  T v{};
  be.download(&v, p, sizeof(T));
  return v;
}

template <class T>
void write_one(Backend& be, T* p, T v) {
  be.upload(p, &v, sizeof(T));
}

template <class T>
void copy_all(BackendBuffer<T>& dst, const BackendBuffer<T>& src) {
  dst.resize(src.size());
  src.backend().copy(dst.data(), src.data(), src.size() * sizeof(T));
}

// The same into a buffer of src's size, when *flag is non-zero.
template <class T>
void copy_all_if(BackendBuffer<T>& dst, const BackendBuffer<T>& src, const int32_t* flag) {
  src.backend().copy_if(dst.data(), src.data(), src.size() * sizeof(T), flag);
}

}  // namespace

ScalingStore::ScalingStore(Backend& backend, int gemms, const DelayedScaling& recipe)
    : be_(backend), n_(gemms) {
  build(recipe);
}

void ScalingStore::build(const DelayedScaling& recipe) {
  history_ = recipe.amax_history_len;
  recipe_format_ = recipe.format;
  ++generation_;
  const auto slots = static_cast<size_t>(5 * n_);
  format_.assign(slots, DType::E4M3);
  for (int g = 0; g < n_; ++g)
    for (Slot s : kSlots) format_[index(g, s)] = tensor_format(recipe.format, slot_direction(s));
  cast_n_.assign(slots, 0);
  scale_version_.resize(slots);
  bump_scale_versions(0, slots);
  history_buf_.resize(slots * static_cast<size_t>(history_));
  history_buf_.zero();
  scale_.resize(slots);
  scale_inv_.resize(slots);
  fp8_max_.resize(slots);
  counts_.resize(2 * slots);
  counts_.zero();
  std::vector<float> ones(slots, 1.0f), max(slots);
  for (size_t i = 0; i < slots; ++i) max[i] = fp8_max(format_[i]);
  scale_.upload(ones, "FP8 scales");
  scale_inv_.upload(ones, "FP8 scale_invs");
  fp8_max_.upload(max, "FP8 maxima");
}

bool ScalingStore::conform(const DelayedScaling& recipe) {
  if (recipe.amax_history_len == history_ && recipe.format == recipe_format_) return false;
  build(recipe);
  return true;
}

size_t ScalingStore::index(int gemm, Slot s) const {
  const auto k = static_cast<int>(s);
  const int i = slot_direction(s) == Direction::Forward ? 3 * gemm + k : 3 * n_ + 2 * gemm + k - 3;
  return static_cast<size_t>(i);
}

void ScalingStore::bump_scale_versions(size_t first, size_t count) {
  // From one counter, never reset, so a version is never handed out twice (not even across a
  // rebuild).
  ++versions_;
  for (size_t i = first; i < first + count; ++i) scale_version_[i] = versions_;
}

Fp8Out ScalingStore::begin_cast(int gemm, Slot s, uint8_t* codes, int64_t n) {
  const size_t i = index(gemm, s);
  cast_n_[i] = n;
  bump_scale_versions(i, 1);
  unsigned long long* c = counts_.data() + 2 * i;
  be_.zero(c, 2 * sizeof(unsigned long long));
  return {codes, scale(gemm, s), amax(gemm, s), format_[i], c, c + 1};
}

void ScalingStore::scale_from_amax(int gemm, Slot s, const float* amax,
                                   const CurrentScaling& recipe) {
  bump_scale_versions(index(gemm, s), 1);
  be_.scale_from_amax(scale(gemm, s), scale_inv(gemm, s), amax, fp8_max(format(gemm, s)),
                      recipe.margin);
}

void ScalingStore::update(Direction d, const DelayedScaling& recipe, const AmaxReducer& reduce) {
  const int first = d == Direction::Forward ? 0 : 3 * n_;
  const int count = d == Direction::Forward ? 3 * n_ : 2 * n_;
  const auto H = static_cast<size_t>(history_);
  float* newest = history_buf_.data() + static_cast<size_t>(first) * H;
  if (recipe.reduce_amax && reduce) {
    // Each slot's history[0], gathered in slot order, max-reduced, and put back, through
    // buffers kept from step to step: an allocation per step would be a device-wide
    // synchronisation on a GPU (cudaMalloc/cudaFree).
    const auto n = static_cast<size_t>(count);
    reduce_gathered_.resize(n);
    reduce_host_.resize(n);
    const size_t pitch = H * sizeof(float);
    be_.copy_rows(reduce_gathered_.data(), sizeof(float), newest, pitch, sizeof(float), n);
    be_.download(reduce_host_.data(), reduce_gathered_.data(), n * sizeof(float));
    reduce(reduce_host_);
    be_.upload(reduce_gathered_.data(), reduce_host_.data(), n * sizeof(float));
    be_.copy_rows(newest, pitch, reduce_gathered_.data(), sizeof(float), sizeof(float), n);
  }
  const ScalingSlots view{history_buf_.data(), scale_.data(), scale_inv_.data(),
                          fp8_max_.data(),     5 * n_,        history_};
  be_.update_delayed_scaling(view, first, count, recipe.margin, recipe.amax_compute_algo);
  bump_scale_versions(static_cast<size_t>(first), static_cast<size_t>(count));
}

std::vector<ScalingStore::Saturation> ScalingStore::saturation() const {
  return saturation(counts_.to_host().data());
}

std::vector<ScalingStore::Saturation> ScalingStore::saturation(
    const unsigned long long* counts) const {
  std::vector<Saturation> out(static_cast<size_t>(n_));
  for (int g = 0; g < n_; ++g) {
    for (Slot s : kSlots) {
      const size_t i = index(g, s);
      if (cast_n_[i] <= 0) continue;
      const double f = static_cast<double>(counts[2 * i]) / static_cast<double>(cast_n_[i]);
      if (f > out[static_cast<size_t>(g)].fraction) out[static_cast<size_t>(g)] = {f, s};
    }
  }
  return out;
}

Fp8Meta ScalingStore::meta(int gemm) const {
  Fp8Meta m(recipe_format_, history_);
  for (Slot s : kSlots) {
    const size_t i = index(gemm, s);
    ScalingState& st = m[s];
    st.format = format_[i];
    st.scale = read_one(be_, scale_.data() + i);
    st.scale_inv = read_one(be_, scale_inv_.data() + i);
    be_.download(st.amax_history.data(), history_buf_.data() + i * static_cast<size_t>(history_),
                 static_cast<size_t>(history_) * sizeof(float));
    const auto sat = read_one(be_, counts_.data() + 2 * i);
    const auto flushed = read_one(be_, counts_.data() + 2 * i + 1);
    st.last_cast = {cast_n_[i], static_cast<int64_t>(sat), static_cast<int64_t>(flushed)};
  }
  return m;
}

void ScalingStore::set_meta(int gemm, const Fp8Meta& m) {
  // The recipe the meta was made for: its history length, and HYBRID when its backward slots
  // are E5M2. A store made for another is rebuilt to it first.
  DelayedScaling r;
  r.amax_history_len = static_cast<int>(m[Slot::Input].amax_history.size());
  r.format = m[Slot::GradOutput].format == DType::E5M2 ? Format::Hybrid : Format::E4M3;
  conform(r);
  for (Slot s : kSlots) {
    const size_t i = index(gemm, s);
    const ScalingState& st = m[s];
    write_one(be_, scale_.data() + i, st.scale);
    write_one(be_, scale_inv_.data() + i, st.scale_inv);
    std::vector<float> h = st.amax_history;  // a slot of another length: cut or zero-padded
    h.resize(static_cast<size_t>(history_), 0.0f);
    be_.upload(history_buf_.data() + i * static_cast<size_t>(history_), h.data(),
               h.size() * sizeof(float));
    write_one(be_, counts_.data() + 2 * i, static_cast<unsigned long long>(st.last_cast.saturated));
    write_one(be_, counts_.data() + 2 * i + 1,
              static_cast<unsigned long long>(st.last_cast.flushed));
    cast_n_[i] = st.last_cast.n;
    bump_scale_versions(i, 1);
  }
}

void ScalingStore::remember() {
  saved_history_ = history_;
  saved_format_ = recipe_format_;
  saved_cast_n_ = cast_n_;
  copy_all(saved_history_buf_, history_buf_);
  copy_all(saved_scale_, scale_);
  copy_all(saved_scale_inv_, scale_inv_);
  copy_all(saved_counts_, counts_);
}

void ScalingStore::roll_back() {
  if (saved_history_ == 0) return;  // nothing remembered
  if (saved_history_ != history_ || saved_format_ != recipe_format_) {
    DelayedScaling r;  // the step rebuilt the store for its recipe: back to the old layout
    r.amax_history_len = saved_history_;
    r.format = saved_format_;
    build(r);
  }
  cast_n_ = saved_cast_n_;
  bump_scale_versions(0, scale_version_.size());
  copy_all(history_buf_, saved_history_buf_);
  copy_all(scale_, saved_scale_);
  copy_all(scale_inv_, saved_scale_inv_);
  copy_all(counts_, saved_counts_);
}

bool ScalingStore::roll_back_if(const int32_t* skip) {
  if (saved_history_ == 0) return true;  // nothing remembered: nothing to go back to
  if (saved_history_ != history_ || saved_format_ != recipe_format_) return false;
  // The host cannot know whether the scales changed back: casts made since are stale.
  bump_scale_versions(0, scale_version_.size());
  copy_all_if(history_buf_, saved_history_buf_, skip);
  copy_all_if(scale_, saved_scale_, skip);
  copy_all_if(scale_inv_, saved_scale_inv_, skip);
  copy_all_if(counts_, saved_counts_, skip);
  return true;
}

}  // namespace fp8lm
