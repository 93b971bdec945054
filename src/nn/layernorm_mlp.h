#pragma once
// TE's LayerNormMLP: norm -> fc1 -> activation -> fc2. Under FP8 delayed scaling the norm
// quantizes into fc1's input and the bias+activation quantizes into fc2's input, each taking
// its amax in the same pass (docs/ARCHITECTURE.md: one training step).
#include <string>

#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/saved_activation.h"

namespace fp8lm {

class LayerNormMLP {
 public:
  // Names: {prefix}.ln2, {prefix}.fc1, {prefix}.fc2. SwiGLU's fc1 has 2*ffn outputs (gate, value).
  LayerNormMLP(const std::string& prefix, int64_t d, int64_t ffn, Activation act,
               Normalization norm, bool bias = true, Backend& backend = cpu_backend());

  // y overwritten. With r, on s = x + r (the block's mid residual), written to s in the norm's
  // pass.
  void forward(const float* x, float* y, int64_t rows, const float* r = nullptr,
               float* s = nullptr);
  void backward(const float* dy, float* dx, int64_t rows);  // dx +=, dx may be dy (read first)

  Norm& norm() { return norm_; }
  Linear& fc1() { return fc1_; }
  Linear& fc2() { return fc2_; }
  ParameterList parameters();
  MemoryUse memory_use() const {
    MemoryUse m{bytes_of(normed_) + h_.bytes() + bytes_of(a_), 0};
    m += norm_.memory_use();
    m += fc1_.memory_use();
    m += fc2_.memory_use();
    return m;
  }

 private:
  Backend& be_;
  Activation act_;
  int64_t ffn_;
  Norm norm_;
  Linear fc1_, fc2_;
  // Saved for backward: the pre-activation h, and under FP32 GEMMs the norm and activation
  // outputs (fc1's and fc2's inputs); other modes keep those in scratch.
  BackendBuffer<float> normed_{be_}, a_{be_};
  SavedActivation h_{Scratch::MlpPre, be_};  // the pre-activation (BF16 in low precision)
};

}  // namespace fp8lm
