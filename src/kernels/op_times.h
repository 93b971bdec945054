#pragma once
// Where a step's time goes, by kind of op: bench_train's breakdown of a training step into
// GEMMs, casts, attention and the rest (issue 34 on a GPU, issue 35 on a CPU). While profiling
// is on, every backend entry point is timed: a host backend's (the CPU's) by the wall clock
// around it (HostOpScope), the CUDA backend's by events around the work it queues
// (kernels/cuda/op_profile.h), which it hands over through a time source. One entry point
// calling another is timed once, as the outer one's kind. What the step's wall time leaves is
// time spent outside the backend (the host's own work, or the device sitting idle).
#include <array>
#include <cstdint>

namespace fp8lm {

enum class OpKind : uint8_t { Gemm, Cast, Attention, Norm, Elementwise, Loss, Optimizer, Copy };
inline constexpr int kOpKinds = 8;
inline const char* op_kind_name(OpKind k) {
  static constexpr const char* kNames[kOpKinds] = {"gemm",        "cast", "attention", "norm",
                                                   "elementwise", "loss", "optimizer", "copy"};
  return kNames[static_cast<int>(k)];
}

struct OpTimes {
  std::array<double, kOpKinds> seconds{};
  std::array<int64_t, kOpKinds> ops{};
  OpTimes& operator+=(const OpTimes& o);
};

void profile_ops(bool on);
bool profiling_ops();
// The seconds and count of each kind's ops since the last call, every backend's together
// (a device's waited for); zeros where profiling was off.
OpTimes take_op_times();

// A device backend's times, taken with the host's (registered once per source).
void add_op_time_source(OpTimes (*take)());

// A host backend's entry point, timed while profiling (the outermost of nested ones).
class HostOpScope {
 public:
  explicit HostOpScope(OpKind kind);
  ~HostOpScope();
  HostOpScope(const HostOpScope&) = delete;
  HostOpScope& operator=(const HostOpScope&) = delete;

 private:
  OpKind kind_;
  bool timed_;
  int64_t start_ns_ = 0;
};

}  // namespace fp8lm
