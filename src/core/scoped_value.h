#pragma once
// Sets a (per-thread) setting for a scope and restores what it was on exit: the shape of
// GemmPrecision, FusionScope and TrainingForward.
#include <utility>

namespace fp8lm {

template <class T>
class ScopedValue {
 public:
  ScopedValue(T& slot, T value) : slot_(slot), saved_(std::exchange(slot, std::move(value))) {}
  ~ScopedValue() { slot_ = std::move(saved_); }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 private:
  T& slot_;
  T saved_;
};

}  // namespace fp8lm
