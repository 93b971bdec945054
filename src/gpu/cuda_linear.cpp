#include "gpu/cuda_linear.h"

#include "kernels/cuda/activations.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/quantize.h"

namespace fp8lm::gpu {

using cuda::GemmOptions;

CudaLinear::CudaLinear(int64_t in, int64_t out, Params p, ScalingSlots* slots, int index,
                       LinearScratch* scratch)
    : in_(in), out_(out), p_(p), slots_(slots), index_(index), scratch_(scratch) {}

void CudaLinear::set_fp8_weights(bool on) {
  fp8_weights_ = on;
  if (on) {
    qw_.resize(size_t(in_ * out_));
    qw_scale_inv_.resize(1);
  }
}

void CudaLinear::keep_fp8_weight_scale(cudaStream_t s) {
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(qw_scale_inv_.data(), slots_->scale_inv(index_, Slot::Weight),
                                   sizeof(float), cudaMemcpyDeviceToDevice, s));
}

Fp8Out CudaLinear::fp8_input(int64_t rows) {
  scratch_->x8.resize(size_t(rows * in_));
  slots_->set_cast_size(index_, Slot::Input, rows * in_);
  return slots_->out(index_, Slot::Input, scratch_->x8.data());
}

bf16_t* CudaLinear::bf16_input(int64_t rows) {
  x16_.resize(size_t(rows * in_));
  return x16_.data();
}

void CudaLinear::set_input(GemmMode mode, const float* x, int64_t rows, cudaStream_t s) {
  switch (mode) {
    case GemmMode::Fp8:
      cuda::quantize(fp8_input(rows), x, rows * in_, s);
      break;
    case GemmMode::Bf16:
      cuda::fp32_to_bf16(bf16_input(rows), x, rows * in_, s);
      break;
    case GemmMode::Fp32:
      set_fp32_input(x);
      break;
  }
}

void CudaLinear::forward(GemmMode mode, float* y, int64_t rows, cudaStream_t s) {
  mode_ = mode;
  const int64_t nw = in_ * out_;
  const GemmOptions bias{.bias = p_.b, .fast_accum = true};  // TE: fast accumulation forward
  switch (mode) {
    case GemmMode::Fp8: {
      const Fp8Format fx = slots_->format(index_, Slot::Input);
      const Fp8Format fw = slots_->format(index_, Slot::Weight);
      // Xᵀ for wgrad, from the codes the producer wrote.
      xt8_.resize(size_t(rows * in_));
      cuda::transpose_fp8(xt8_.data(), scratch_->x8.data(), rows, in_, s);
      wt8_.resize(size_t(nw));
      const uint8_t* w8;
      const float* w_scale_inv = slots_->scale_inv(index_, Slot::Weight);
      if (fp8_weights_) {  // the codes are the weight; only the transpose is made
        cuda::transpose_fp8(wt8_.data(), qw_.data(), out_, in_, s);
        w8 = qw_.data();
        w_scale_inv = qw_scale_inv_.data();
      } else {
        scratch_->w8.resize(size_t(nw));
        slots_->set_cast_size(index_, Slot::Weight, nw);
        cuda::cast_transpose(slots_->out(index_, Slot::Weight, scratch_->w8.data()), wt8_.data(),
                             p_.w, out_, in_, s);
        w8 = scratch_->w8.data();
      }
      cuda::gemm(
          Trans::N, Trans::T, rows, out_, in_, 1.0f,
          GemmOperand{scratch_->x8.data(), fp8_dtype(fx), slots_->scale_inv(index_, Slot::Input)},
          GemmOperand{w8, fp8_dtype(fw), w_scale_inv}, 0.0f, y, bias, s);
      break;
    }
    case GemmMode::Bf16:
      scratch_->w16.resize(size_t(nw));
      cuda::fp32_to_bf16(scratch_->w16.data(), p_.w, nw, s);
      cuda::gemm(Trans::N, Trans::T, rows, out_, in_, 1.0f, GemmOperand{x16_.data(), DType::BF16},
                 GemmOperand{scratch_->w16.data(), DType::BF16}, 0.0f, y, bias, s);
      break;
    case GemmMode::Fp32:
      cuda::gemm(Trans::N, Trans::T, rows, out_, in_, 1.0f, GemmOperand{x32_, DType::F32},
                 GemmOperand{p_.w, DType::F32}, 0.0f, y, bias, s);
      break;
  }
}

void CudaLinear::backward(const float* dy, float* dx, bool accumulate_dx, int64_t rows,
                          cudaStream_t s) {
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  const int64_t ny = rows * out_;
  switch (mode_) {
    case GemmMode::Fp8: {
      // TE: split (precise) accumulation for the gradient GEMMs.
      const GemmOptions precise{.bias = nullptr, .fast_accum = false};
      scratch_->dy8.resize(size_t(ny));
      scratch_->dyt8.resize(size_t(ny));
      slots_->set_cast_size(index_, Slot::GradOutput, ny);
      const Fp8Out q = slots_->out(index_, Slot::GradOutput, scratch_->dy8.data());
      if (p_.b) {
        scratch_->dbias.resize(size_t(out_));
        cuda::cast_transpose_dbias(q, scratch_->dyt8.data(), scratch_->dbias.data(), dy, rows, out_,
                                   s);
        cuda::accumulate(p_.db, scratch_->dbias.data(), out_, s);
      } else {
        cuda::cast_transpose(q, scratch_->dyt8.data(), dy, rows, out_, s);
      }
      const DType tdy = fp8_dtype(q.format);
      const float* dy_sinv = slots_->scale_inv(index_, Slot::GradOutput);
      const Fp8Format fx = slots_->format(index_, Slot::Input);
      const Fp8Format fw = slots_->format(index_, Slot::Weight);
      if (dx) {  // dX = dY · W, as dY · (Wᵀ)ᵀ
        cuda::gemm(Trans::N, Trans::T, rows, in_, out_, 1.0f,
                   GemmOperand{scratch_->dy8.data(), tdy, dy_sinv},
                   GemmOperand{wt8_.data(), fp8_dtype(fw),
                               fp8_weights_ ? qw_scale_inv_.data()
                                            : slots_->forward_scale_inv(index_, Slot::Weight)},
                   beta, dx, precise, s);
      }
      // dW = dYᵀ · X, as (dYᵀ) · (Xᵀ)ᵀ
      cuda::gemm(
          Trans::N, Trans::T, out_, in_, rows, 1.0f,
          GemmOperand{scratch_->dyt8.data(), tdy, dy_sinv},
          GemmOperand{xt8_.data(), fp8_dtype(fx), slots_->forward_scale_inv(index_, Slot::Input)},
          1.0f, p_.dw, precise, s);
      break;
    }
    case GemmMode::Bf16: {
      if (p_.b) cuda::bias_backward(p_.db, dy, rows, out_, s);
      const int64_t nw = in_ * out_;
      scratch_->dy16.resize(size_t(ny));
      cuda::fp32_to_bf16(scratch_->dy16.data(), dy, ny, s);
      scratch_->w16.resize(size_t(nw));
      cuda::fp32_to_bf16(scratch_->w16.data(), p_.w, nw, s);
      const GemmOperand g{scratch_->dy16.data(), DType::BF16};
      if (dx) {
        cuda::gemm(Trans::N, Trans::N, rows, in_, out_, 1.0f, g,
                   GemmOperand{scratch_->w16.data(), DType::BF16}, beta, dx, {}, s);
      }
      cuda::gemm(Trans::T, Trans::N, out_, in_, rows, 1.0f, g,
                 GemmOperand{x16_.data(), DType::BF16}, 1.0f, p_.dw, {}, s);
      break;
    }
    case GemmMode::Fp32: {
      if (p_.b) cuda::bias_backward(p_.db, dy, rows, out_, s);
      const GemmOperand g{dy, DType::F32};
      if (dx) {
        cuda::gemm(Trans::N, Trans::N, rows, in_, out_, 1.0f, g, GemmOperand{p_.w, DType::F32},
                   beta, dx, {}, s);
      }
      cuda::gemm(Trans::T, Trans::N, out_, in_, rows, 1.0f, g, GemmOperand{x32_, DType::F32}, 1.0f,
                 p_.dw, {}, s);
      break;
    }
  }
}

}  // namespace fp8lm::gpu
