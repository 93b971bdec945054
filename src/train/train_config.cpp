// TrainConfig's checks across settings (include/fp8lm/train_config.h); each setting's own range
// is its row of the settings table (train/settings.cpp).
#include <fmt/format.h>

#include <omp.h>

#include <climits>

#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "fp8lm/train_config.h"
#include "train/settings.h"
#include "train/token_shards.h"

namespace fp8lm {

void TrainConfig::validate() const {
  model.validate();
  check_each_setting(*this);  // each setting's own range (train/settings.cpp)
  if (batch_size > INT64_MAX / grad_accum)
    throw Error(
        fmt::format("--batch-size {} x --grad-accum {} is too large", batch_size, grad_accum));
  if (data.empty() && prompt_len + 1 > model.seq_len) {
    throw Error(fmt::format("--seq-len {} leaves no room to generate after a {}-token prompt",
                            model.seq_len, prompt_len));
  }
  if (fp8_weights && precision != Precision::Fp8) {
    throw Error("--fp8-weights needs --precision fp8");
  }
  if (fp8_weights && recipe.block_scaled() && zero != 0) {
    throw Error(
        fmt::format("--fp8-weights with --recipe {} and --zero 1: block-scaled FP8 weights are not "
                    "all-gathered yet; use --zero 0",
                    scaling_kind_name(recipe.kind)));
  }
  if (recipe.kind == ScalingKind::Block && !recipe.block.power_2_scale) {
    throw Error(
        "--no-power-2-scale: Float8BlockScaling's FP32 scales are emulated only as powers of "
        "two (a decoded value times any other scale_inv is not exact in BF16)");
  }
  // NVFP4's Hadamard transform mixes groups of 16 tokens; every batch has seq_len-token rows.
  if (recipe.kind == ScalingKind::Nvfp4 && !recipe.nvfp4.disable_rht && model.seq_len % 16 != 0) {
    throw Error(fmt::format(
        "--recipe nvfp4: the Hadamard transform needs --seq-len a multiple of 16 (not {}); or "
        "--disable-rht",
        model.seq_len));
  }
  // The run's sample after the last step: a prompt of half the sequence, then what follows.
  if (!data.empty() && evaluate && model.seq_len < 2)
    throw Error(fmt::format(
        "--seq-len {} leaves the sample of a text run no prompt: give 2 or more (or --no-evaluate)",
        model.seq_len));
  if (!data.empty() && is_token_dataset(data)) {
    const int64_t needed = read_manifest(data).vocab_size;
    if (model.vocab < needed)
      throw Error(fmt::format("--vocab {} is below the token dataset's vocabulary {} ({})",
                              model.vocab, needed, data));
  } else if (!data.empty() && model.vocab < 256) {
    throw Error(
        fmt::format("--vocab {} is too small for byte-level text (needs 256)", model.vocab));
  }
}

void default_vocab_for_data(TrainConfig& c) {
  if (!c.data.empty())
    c.model.vocab = is_token_dataset(c.data) ? read_manifest(c.data).vocab_size : 256;
}

void check_new_run(const TrainConfig& c) {
  check_fp8_only_settings(c);
  c.validate();
  const int cpus = omp_get_num_procs();
  if (c.threads > cpus)
    throw Error(
        fmt::format("--threads {} is more than the {} CPUs this process may use; give {} "
                    "or fewer (0: all of them)",
                    c.threads, cpus, cpus));
}

}  // namespace fp8lm
