#pragma once
// Where a step's device time goes, by kind of op (issue 34: scripts/gpu-check's breakdown of a
// training step into GEMMs, casts, attention and the rest). While profiling is on, every CUDA
// backend entry point records an event before and after the work it queues (OpScope,
// op_profile.h); take_op_times() waits for them and sums each kind's elapsed time. The events
// are on the backend's stream, where its work runs in order, so the kinds' times add up to the
// device's busy time: a step's wall time minus that is the time the device sat idle. No CUDA
// types here, so that host code (bench/) calls it in any build (without the CUDA backend:
// nothing is recorded).
#include <array>
#include <cstdint>

namespace fp8lm::cuda {

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
};

void profile_ops(bool on);
// The device seconds and count of each kind's ops since the last call (waits for them; zeros
// when profiling was off).
OpTimes take_op_times();

// FP8 GEMM operands the CUDA backends transposed or zero-padded for cuBLASLt (which takes FP8
// only K-major, in multiples of 16) since the process started: none in a step whose modules
// pass operands already so (Backend::fp8_gemms_want_tn) at sizes that are multiples of 16.
int64_t fp8_operand_copies();

}  // namespace fp8lm::cuda
