// fp8lm advise's roofline model (issue 32) against the arithmetic written out by hand: a GEMM's
// time is the longer of its FLOPs at the dense peak and its bytes at the bandwidth, the recipe's
// casts are passes over memory, and a recipe the GPU's tensor cores lack runs in BF16.
#include <gtest/gtest.h>

#include "train/roofline.h"

namespace fp8lm {
namespace {

const GpuPeaks& gpu(const std::string& name) {
  for (const GpuPeaks& g : datasheet_gpus())
    if (g.name == name) return g;
  throw std::runtime_error("no GPU " + name);
}

TEST(Roofline, ASquareGemmIsBoundByItsArithmetic) {
  const GemmShape g{"fc1 fprop", 4096, 4096, 4096, 1};
  const double n = 4096.0 * 4096.0, flops = 2 * n * 4096.0;
  const GpuPeaks& h100 = gpu("H100 SXM");
  const GemmEstimate e = estimate_gemm(g, h100, ScalingKind::Delayed);
  EXPECT_DOUBLE_EQ(e.bf16_s, flops / 989.4e12);
  EXPECT_DOUBLE_EQ(e.fp8_s, flops / 1978.9e12);
  // Casts: the input read in BF16 and written in FP8 both ways (2 + 2 bytes), the weight read in
  // FP32 and written both ways (4 + 2).
  EXPECT_DOUBLE_EQ(e.cast_s, (4 * n + 6 * n) / 3.35e12);
  // Current scaling reads each tensor once more for its amax.
  EXPECT_DOUBLE_EQ(estimate_gemm(g, h100, ScalingKind::Current).cast_s, (6 * n + 10 * n) / 3.35e12);
  // A wgrad casts nothing of its own: its operands are the column-wise copies.
  EXPECT_EQ(estimate_gemm({"fc1 wgrad", 4096, 4096, 4096, 1}, h100, ScalingKind::Delayed).cast_s,
            0.0);
}

TEST(Roofline, AThinGemmIsBoundByMemory) {
  const GemmShape g{"proj dgrad", 16, 8192, 8192, 1};
  const double a = 16.0 * 8192, b = 8192.0 * 8192, c = 16.0 * 8192;
  const GpuPeaks& h200 = gpu("H200 SXM");
  const GemmEstimate e = estimate_gemm(g, h200, ScalingKind::Delayed);
  EXPECT_DOUBLE_EQ(e.bf16_s, (2 * (a + b) + 4 * c) / 4.8e12);
  EXPECT_DOUBLE_EQ(e.fp8_s, ((a + b) + 4 * c) / 4.8e12);
}

TEST(Roofline, BlockFormatsAreNativeOnBlackwellOnly) {
  const GemmShape g{"qkv fprop", 8192, 6144, 4096, 1};
  for (const char* name : {"H100 SXM", "H200 SXM"}) {
    for (const ScalingKind r : {ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
      const GemmEstimate e = estimate_gemm(g, gpu(name), r);
      EXPECT_FALSE(e.native) << name;
      EXPECT_EQ(e.fp8_s, e.bf16_s) << name;
      EXPECT_GT(e.cast_s, 0.0) << name;  // cast, then decoded: only slower
    }
    EXPECT_TRUE(estimate_gemm(g, gpu(name), ScalingKind::Block).native);
  }
  const GemmEstimate fp4 = estimate_gemm(g, gpu("B200"), ScalingKind::Nvfp4);
  EXPECT_TRUE(fp4.native);
  EXPECT_DOUBLE_EQ(fp4.fp8_s, 2.0 * 8192 * 6144 * 4096 / 9000e12);
}

TEST(Roofline, AStepHoldsEveryLinearsThreeGemmsPerLayer) {
  TrainConfig c;
  c.model.d_model = 4096;
  c.model.n_layers = 32;
  c.model.n_heads = 32;
  c.model.n_kv_heads = 8;
  c.model.ffn = 14336;
  c.model.activation = Activation::Swiglu;
  c.model.seq_len = 8192;
  c.batch_size = 1;
  const std::vector<GemmShape> g = fp8_gemms(c);
  ASSERT_EQ(g.size(), 12u);
  EXPECT_EQ(g[0].name, "qkv fprop");
  EXPECT_EQ(g[0].N, 4096 + 2 * 1024);  // q and the 8 key/value heads' k and v
  EXPECT_EQ(g[6].name, "fc1 fprop");
  EXPECT_EQ(g[6].N, 2 * 14336);  // SwiGLU's gate and value
  EXPECT_EQ(g[8].name, "fc1 wgrad");
  EXPECT_EQ(g[8].K, 8192);  // the tokens
  for (const GemmShape& s : g) EXPECT_EQ(s.per_step, 32);
  const StepEstimate s = estimate_step(c, gpu("H100 SXM"), ScalingKind::Delayed);
  EXPECT_GT(s.speedup(), 1.0);
  EXPECT_LT(s.speedup(), 2.0);  // the rest of the step and the casts stay
  EXPECT_DOUBLE_EQ(s.bf16_s(), s.gemm_bf16_s + s.other_s);
}

}  // namespace
}  // namespace fp8lm
