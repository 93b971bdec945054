#pragma once
// FP8 operand copies of the CUDA backend (issue 34). Its entry points' device times by kind of
// op are kernels/op_times.h's (recorded by OpScope, op_profile.h). No CUDA types here, so that
// host code (bench/) calls it in any build (without the CUDA backend: nothing is recorded).
#include <cstdint>

namespace fp8lm::cuda {

// FP8 GEMM operands the CUDA backends transposed or zero-padded for cuBLASLt (which takes FP8
// only K-major, in multiples of 16) since the process started: none in a step whose modules
// pass operands already so (Backend::fp8_gemms_want_tn) at sizes that are multiples of 16.
int64_t fp8_operand_copies();

}  // namespace fp8lm::cuda
