#pragma once
// A trainable tensor: its FP32 master value, its gradient, and what the optimizer and the
// checkpoint need to know about it.
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "kernels/backend_buffer.h"

namespace fp8lm {

// What a module holds beyond its parameters, for the memory breakdown: tensors saved from
// forward for backward, and casts of its weights (BF16 values, FP8 codes).
struct MemoryUse {
  size_t saved = 0, weight_casts = 0;
  MemoryUse& operator+=(const MemoryUse& o) {
    saved += o.saved;
    weight_casts += o.weight_casts;
    return *this;
  }
};

template <class T>
size_t bytes_of(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}
template <class T>
size_t bytes_of(const BackendBuffer<T>& b) {
  return b.bytes();
}

struct Parameter {
  std::string name;  // docs/reference/checkpoint-names.md, e.g. "layers.0.qkv.weight"
  std::vector<int64_t> shape;
  // In the owning module's backend memory (kernels/backend_buffer.h).
  BackendBuffer<float> value;  // FP32 master weights
  BackendBuffer<float> grad;   // accumulated by backward, zeroed by the trainer
  // --fp8-weights: the gradient is kept in BF16 instead (grad is then empty), as TE keeps the
  // gradients of FP8 parameters in the activation dtype; it halves gradient memory.
  BackendBuffer<bf16_t> grad16;
  bool decay = false;  // weight decay applies (matrices, not norms, biases or positions)
  // Bumped whenever value changes, so modules know their cached casts of it are stale.
  uint64_t version = 0;
  // value rounded to BF16 (bf16_from_float), BF16 GEMMs' weight operand, current while
  // value16_version is version: forward and dgrad share it, and generation makes it once, not
  // per token (torch.autocast caches a weight's cast the same way). bf16_value() makes it on
  // first use after value changed, unless the optimizer wrote it in the pass that changed value
  // (AdamWTensor::param16), which saves a training step a pass over every weight. Empty until
  // first asked for; then 2 bytes per value, as block recipes keep.
  BackendBuffer<bf16_t> value16;
  uint64_t value16_version = ~uint64_t{0};

  Parameter(std::string n, std::vector<int64_t> s, bool decays, Backend& backend = cpu_backend())
      : name(std::move(n)),
        shape(std::move(s)),
        value(backend, static_cast<size_t>(numel())),
        grad(backend, static_cast<size_t>(numel())),
        grad16(backend),
        decay(decays),
        value16(backend) {
    value.zero();
    grad.zero();
  }
  int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
  bool bf16_grad() const { return grad16.size() != 0; }
  void keep_grad_in_bf16() {
    grad.clear();
    grad16.resize(static_cast<size_t>(numel()));
    grad16.zero();
  }
  size_t grad_bytes() const { return grad.bytes() + grad16.bytes(); }
  bool bf16_value_current() const { return value16.size() != 0 && value16_version == version; }
  const bf16_t* bf16_value() {
    if (!bf16_value_current()) {
      value16.resize(static_cast<size_t>(numel()));
      value.backend().fp32_to_bf16(value16.data(), value.data(), numel());
      value16_version = version;
    }
    return value16.data();
  }
  float* data() { return value.data(); }
  const float* data() const { return value.data(); }
  // The values as host copies, and replacing them (Error unless numel() of them).
  const std::vector<float> values() const { return value.to_host(); }
  void set_values(const std::vector<float>& v) {
    value.upload(v, name);
    ++version;
  }
};

using ParameterList = std::vector<Parameter*>;

}  // namespace fp8lm
