// What fp8lm train prints (cli/train_output.h).
#include "cli/train_output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/types.h"

namespace fp8lm::cli {
namespace {

// What sets the block apart from GPT-2's: " · 2 kv heads · rope 10000 · rmsnorm · ...".
std::string block_features(const GPTConfig& m) {
  std::string s;
  if (m.kv_heads() != m.n_heads) s += fmt::format(" · {} kv heads", m.kv_heads());
  if (!m.learned_positions()) s += fmt::format(" · rope {}", m.rope_theta);
  if (m.normalization != Normalization::LayerNorm)
    s.append(" · ").append(normalization_name(m.normalization));
  if (m.activation != Activation::Gelu) s.append(" · ").append(activation_name(m.activation));
  if (!m.bias) s += " · no biases";
  if (!m.tied_head) s += " · untied head";
  return s;
}

}  // namespace

void print_run_start(Trainer& trainer) {
  const TrainConfig& c = trainer.config();
  const PrecisionChoice& choice = trainer.precision();
  fmt::print("precision {} -> {} on {} ({})\n", precision_name(c.precision), choice.label(),
             trainer.device().name, choice.reason);
  if (!trainer.device().reason.empty())
    fmt::print("device {}: {}\n", trainer.device().label(), trainer.device().reason);
  fmt::print(
      "model: {} parameters · vocab {} · seq {} · d_model {} · {} layers · {} heads · ffn {}{}\n",
      c.model.parameter_count(), c.model.vocab, c.model.seq_len, c.model.d_model, c.model.n_layers,
      c.model.n_heads, c.model.ffn, block_features(c.model));
  if (choice.precision == Precision::Fp8) {
    fmt::print("recipe: {}\n", trainer.recipe_line());
    if (!trainer.kept_in_bf16().empty()) {
      fmt::print("precision map {}: {} of {} GEMMs in BF16 ({})\n", c.precision_map,
                 trainer.kept_in_bf16().size(), trainer.model().linears().size(),
                 fmt::join(trainer.kept_in_bf16(), ", "));
    }
  }
  if (trainer.ranks().size() > 1) {
    fmt::print("data parallel: {} ranks ({}) · global batch {}, {} to {} sequences per rank\n",
               trainer.ranks().size(), trainer.collectives(), c.batch_size,
               c.batch_size / trainer.ranks().size(),
               (c.batch_size + trainer.ranks().size() - 1) / trainer.ranks().size());
  }
  if (c.grad_accum > 1) {
    fmt::print("gradient accumulation: {} micro-batches of {} sequences per step ({} sequences)\n",
               c.grad_accum, c.batch_size, c.sequences_per_step());
  }
}

void print_progress(const StepStats& s) {
  static const bool tty = isatty(fileno(stderr));
  const double eta =
      s.seconds / static_cast<double>(s.step) * static_cast<double>(s.total - s.step);
  const int width = 24, filled = static_cast<int>(width * s.step / s.total);
  const std::string bar = std::string(static_cast<size_t>(filled), '=') +
                          std::string(static_cast<size_t>(width - filled), ' ');
  const std::string line = fmt::format(
      "step {:>5}/{} [{}] loss {:.4f} · {:.0f} tok/s · ETA {:.0f}s{}{}", s.step, s.total, bar,
      s.loss, s.tokens_per_s, eta,
      s.comm_bytes > 0 ? fmt::format(" · comm {:.0f}%", 100 * s.comm_seconds / s.step_seconds) : "",
      s.skipped_steps > 0 ? fmt::format(" · {} skipped", s.skipped_steps) : "");
  for (const Fp8Fallback& f : s.fp8_fallbacks) {
    fmt::print(stderr, "{}step {}: {} fell back to BF16 ({}: {})\n", tty ? "\n" : "", s.step,
               f.gemm, f.slot, f.reason);
  }
  if (tty) {
    fmt::print(stderr, "\r{}", line);
    if (s.step == s.total) fmt::print(stderr, "\n");
  } else if (s.step == s.total || s.step % std::max<int64_t>(1, s.total / 10) == 0) {
    fmt::print(stderr, "{}\n", line);
  }
}

void print_result(const TrainConfig& c, const TrainResult& r) {
  fmt::print("trained {} steps in {:.1f}s · {:.0f} tokens/s · final loss {:.4f}\n", r.steps,
             r.seconds, r.tokens_per_s, r.final_loss);
  if (r.skipped_steps > 0)
    fmt::print("{} steps skipped: their loss or gradients were not finite\n", r.skipped_steps);
  for (const Fp8Fallback& f : r.fp8_fallbacks)
    fmt::print("{} runs in BF16 since step {} ({}: {})\n", f.gemm, f.step, f.slot, f.reason);
  if (r.stride_task) {
    fmt::print("stride accuracy {:.4f} (greedy generation from {} held-out prompts)\n",
               r.stride_accuracy, c.eval_prompts);
  } else {
    fmt::print("validation loss {:.4f}\nsample: {}\n", r.val_loss, r.sample);
  }
}

}  // namespace fp8lm::cli
