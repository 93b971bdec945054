#pragma once
// Rotary position embeddings (RoFormer; Llama's layout): each head's hd values are hd/2 pairs
// (x_i, x_{i+hd/2}), and pair i at position p turns by the angle p * theta^(-2i/hd). Hugging
// Face's LlamaRotaryEmbedding with rotate_half, so that exported models give the same logits.
// Rotations keep lengths, and the inverse (the backward pass: the transpose of a rotation) turns
// by the negative angle.
#include <cstdint>

namespace fp8lm::cpu {

// The angle's parts as every implementation (CPU, CUDA, reference) forms them: the frequency
// rounded once to float from double, then float(p) * frequency in float, as Hugging Face forms
// its float32 angles; cos and sin of that float angle are then taken in double and rounded.
float rope_frequency(int64_t i, int64_t hd, float theta);

// In place on x: rows, each `stride` floats apart; in each, the `heads` heads of hd values
// (hd even) at columns [h*hd, (h+1)*hd); row r is at position pos0 + r % T. inverse turns back.
void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
          int64_t hd, float theta, bool inverse);

namespace ref {
// The oracle: every product in double, rounded once.
void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
          int64_t hd, float theta, bool inverse);
}  // namespace ref

}  // namespace fp8lm::cpu
