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

// A setting each thread holds, starting at kInitial (Tag tells settings of one type apart):
// value() reads it, and a Scope sets it until the scope ends.
template <class T, T kInitial, class Tag>
struct ThreadSetting {
  static T& slot() {
    thread_local T v = kInitial;
    return v;
  }
  static T value() { return slot(); }
  struct Scope : ScopedValue<T> {
    explicit Scope(T v) : ScopedValue<T>(slot(), v) {}
  };
};

}  // namespace fp8lm
