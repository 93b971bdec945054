#pragma once
// A Linear on the device (nn/linear.h's semantics): y = x · Wᵀ + b, with the GEMM in FP8, BF16
// or FP32. The weight, bias and their gradients are views into the model's device arenas; the
// FP8 scaling state is the model's slot arrays (cuda_scaling.h).
//
// FP8 follows TE on Hopper, where cuBLASLt takes only C = A · Bᵀ: forward casts W into codes and
// their transpose in one pass (cast_transpose) and keeps Wᵀ for dgrad; the input's codes are
// transposed into Xᵀ for wgrad; backward quantizes dY with its transpose and the bias gradient
// in one pass (cast_transpose_dbias). dgrad = dY · (Wᵀ)ᵀ and wgrad = dYᵀ · (Xᵀ)ᵀ are then both
// "TN" GEMMs.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda_scaling.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/tensor.h"
#include "nn/linear.h"  // GemmMode

namespace fp8lm::gpu {

// Temporaries every Linear shares: only one GEMM runs at a time.
struct LinearScratch {
  cuda::DeviceBuffer<uint8_t> x8, w8, dy8, dyt8;
  cuda::DeviceBuffer<bf16_t> w16, dy16;
  cuda::DeviceBuffer<float> dbias;
};

class CudaLinear {
 public:
  struct Params {
    float *w, *dw, *b, *db;  // b, db nullptr without a bias
  };
  CudaLinear(int64_t in, int64_t out, Params p, ScalingSlots* slots, int index,
             LinearScratch* scratch);

  // The input in the form this mode's GEMM takes, for a producer (norm, activation) to write
  // before forward(): FP8 codes with the input slot's scale and amax, or BF16 (kept for wgrad).
  Fp8Out fp8_input(int64_t rows);
  bf16_t* bf16_input(int64_t rows);
  // FP32 mode: x must stay valid until backward.
  void set_fp32_input(const float* x) { x32_ = x; }
  // Casts an FP32 x into the mode's input (FP8 and BF16), or keeps it (FP32).
  void set_input(GemmMode mode, const float* x, int64_t rows, cudaStream_t s);

  // y [rows, out] overwritten, bias fused into the GEMM; the input must be set for this mode.
  void forward(GemmMode mode, float* y, int64_t rows, cudaStream_t s);
  // dx (nullable) += or = dL/dx; dW, db +=. Uses what forward saved.
  void backward(const float* dy, float* dx, bool accumulate_dx, int64_t rows, cudaStream_t s);

  // --fp8-weights: the weight is these codes, written by the optimizer after each step.
  void set_fp8_weights(bool on);
  uint8_t* fp8_weight_codes() { return qw_.data(); }
  // After the codes were (re)written at the weight slot's current scale: keeps its scale_inv
  // with them, since the slot's changes with every forward update while the codes do not.
  void keep_fp8_weight_scale(cudaStream_t s);
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int index() const { return index_; }

 private:
  int64_t in_, out_;
  Params p_;
  ScalingSlots* slots_;
  int index_;  // the Linear's number in the model: its slots
  LinearScratch* scratch_;
  GemmMode mode_ = GemmMode::Fp32;
  bool fp8_weights_ = false;
  const float* x32_ = nullptr;
  cuda::DeviceBuffer<bf16_t> x16_;
  cuda::DeviceBuffer<uint8_t> xt8_, wt8_, qw_;
  cuda::DeviceBuffer<float> qw_scale_inv_;  // the scale_inv the codes of qw_ were made with
};

}  // namespace fp8lm::gpu
