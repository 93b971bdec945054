// Per-GEMM precision (issue 14, point 4): the map's patterns and its Megatron shortcut pick the
// GEMMs by name, a pattern that picks none is an error naming it, and in a run the GEMMs it
// keeps never cast to FP8 (their slots record no amax) while the others do, under a per-tensor
// and a block-scaled recipe.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "demo_config.h"
#include "fp8lm/error.h"
#include "nn/autocast.h"
#include "nn/precision_map.h"
#include "train/trainer.h"

namespace fp8lm {
namespace {

using Names = std::vector<std::string>;

TEST(PrecisionMap, PatternsAndTheShortcutPickGemmsByName) {
  EXPECT_EQ(precision_map_gemms(3, ""), Names{});
  EXPECT_EQ(precision_map_gemms(3, "*.fc2"),
            (Names{"layers.0.fc2", "layers.1.fc2", "layers.2.fc2"}));
  EXPECT_EQ(
      precision_map_gemms(3, "layers.1.*, layers.2.qkv"),
      (Names{"layers.1.qkv", "layers.1.proj", "layers.1.fc1", "layers.1.fc2", "layers.2.qkv"}));
  EXPECT_EQ(precision_map_gemms(3, "first-last-layers").size(), 8u);
  EXPECT_EQ(precision_map_gemms(3, "first-last-layers")[4], "layers.2.qkv");
  EXPECT_EQ(precision_map_gemms(1, "first-last-layers").size(), 4u);
  EXPECT_EQ(precision_map_gemms(3, "lm_head"), Names{});  // the head is BF16 already
  try {
    precision_map_gemms(3, "*.fc2,layers.3.*");
    FAIL() << "layers.3.* matches nothing in 3 layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layers.3.*' matches no GEMM"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(precision_map_gemms(3, "*.fc2,,*.fc1"), Error);
}

TEST(PrecisionMap, KeptGemmsNeverCastToFp8) {
  for (const ScalingKind kind : {ScalingKind::Delayed, ScalingKind::Mxfp8}) {
    TrainConfig c = test::small_stride_demo();
    c.precision = Precision::Fp8;
    c.recipe.kind = kind;
    c.steps = 3;
    c.evaluate = false;
    c.model.n_layers = 3;  // the middle layer stays in FP8
    c.precision_map = "first-last-layers";
    Trainer t(c);
    for (int i = 0; i < 3; ++i) t.train_step();
    EXPECT_EQ(t.kept_in_bf16().size(), 8u);  // layers 0 and 2
    for (Linear* l : t.model().linears()) {
      const bool kept = !l->name().starts_with("layers.1.");
      EXPECT_EQ(l->kept_in_bf16(), kept) << l->name();
      {
        const Autocast fp8(true, c.recipe);
        EXPECT_EQ(l->gemm_precision(), kept ? Precision::Bf16 : Precision::Fp8) << l->name();
      }
      // Per-tensor scaling records each cast's amax; a kept GEMM has cast nothing.
      if (kind == ScalingKind::Delayed) {
        const Fp8Meta meta = l->fp8_meta();
        float amax = 0;
        for (float v : meta[Slot::Input].amax_history) amax = std::max(amax, v);
        EXPECT_EQ(amax > 0, !kept) << l->name();
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
