#include "train/settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/closest_name.h"
#include "core/precision.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "kernels/types.h"
#include "train/setting_values.h"

namespace fp8lm {
namespace {

using Text = std::string_view;

// A choice's parser throws its own message ("unknown recipe 'x' (expected ...)"); the flag
// goes in front so that the line names where the value came from.
template <class F>
auto parse_choice(Text flag, F parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", flag, e.what()));
  }
}

// The label of a value in a message: "--steps" while parsing flags. Messages of `check` name
// the flag; a file's key is put in front of them by apply_settings_json.
thread_local Text g_label;

#define INT(field) [](TrainConfig& c, Text v) { c.field = setting_int(g_label, v); }
#define INT32(field) [](TrainConfig& c, Text v) { c.field = setting_int32(g_label, v); }
#define REAL(field)                                                      \
  [](TrainConfig& c, Text v) {                                           \
    c.field = setting_real<std::decay_t<decltype(c.field)>>(g_label, v); \
  }
#define BOOL(field) [](TrainConfig& c, Text v) { c.field = setting_bool(g_label, v); }
#define SHOW_INT(field) [](const TrainConfig& c) { return std::to_string(c.field); }
#define SHOW_REAL(field) [](const TrainConfig& c) { return real_text(c.field); }
#define SHOW_BOOL(field) [](const TrainConfig& c) { return bool_text(c.field); }
// A choice: its name by the enum's own name function, parsed by its parser.
#define CHOICE(field, name_of, parse)                                 \
  [](const TrainConfig& c) { return std::string(name_of(c.field)); }, \
      [](TrainConfig& c, Text v) { c.field = parse_choice(g_label, [&] { return parse(v); }); }
// A check that the value satisfies `ok` (e.g. "> 0"); `message` formats the value.
#define REQUIRE(field, ok, message)                                \
  [](const TrainConfig& c) {                                       \
    if (!(c.field ok)) throw Error(fmt::format(message, c.field)); \
  }

// One row a setting: name, group, type, help, choices, get, set[, check[, fp8_only]]. Kept out
// of clang-format so that a row reads as one.
// clang-format off
const std::vector<Setting>& table() {
  static const std::vector<Setting> settings = {
    // The model's shape.
    {"vocab", "model", SettingType::Int,
     "vocabulary size (default with --data: 256 for bytes, a token dataset's own)", {},
     SHOW_INT(model.vocab), INT(model.vocab)},
    {"seq-len", "model", SettingType::Int,
     "the longest sequence (the position table, the KV cache)", {}, SHOW_INT(model.seq_len),
     INT(model.seq_len)},
    {"d-model", "model", SettingType::Int, "model width", {}, SHOW_INT(model.d_model),
     INT(model.d_model)},
    {"n-layers", "model", SettingType::Int, "transformer layers", {}, SHOW_INT(model.n_layers),
     INT(model.n_layers)},
    {"n-heads", "model", SettingType::Int, "attention heads", {}, SHOW_INT(model.n_heads),
     INT(model.n_heads)},
    {"n-kv-heads", "model", SettingType::Int,
     "key/value heads of grouped-query attention (divides --n-heads; 0: as many)", {},
     SHOW_INT(model.n_kv_heads), INT(model.n_kv_heads)},
    {"ffn", "model", SettingType::Int, "MLP hidden width", {}, SHOW_INT(model.ffn), INT(model.ffn)},
    {"activation", "model", SettingType::Choice, "the MLP's activation (Llama: swiglu)",
     activation_names(), CHOICE(model.activation, activation_name, parse_activation)},
    {"normalization", "model", SettingType::Choice, "the blocks' norm (Llama: rmsnorm)",
     normalization_names(),
     CHOICE(model.normalization, normalization_name, parse_normalization)},
    {"rope-theta", "model", SettingType::Float,
     "rotary position embeddings with this base (Llama: 10000); 0: learned positions", {},
     SHOW_REAL(model.rope_theta), REAL(model.rope_theta)},
    {"bias", "model", SettingType::Bool, "biases in every linear layer (Llama: --no-bias)", {},
     SHOW_BOOL(model.bias), BOOL(model.bias)},
    {"tie-embeddings", "model", SettingType::Bool,
     "the LM head is the token embedding (Llama: --no-tie-embeddings)", {},
     SHOW_BOOL(model.tied_head), BOOL(model.tied_head)},

    // Precision and TE's recipes.
    {"precision", "precision", SettingType::Choice,
     "auto: FP8 where the GPU has it, else BF16 (fp8lm doctor says which)",
     precision_names(), CHOICE(precision, precision_name, parse_precision)},
    {"recipe", "precision", SettingType::Choice,
     "TE's FP8 recipes: DelayedScaling, Float8CurrentScaling, Float8BlockScaling, "
     "MXFP8BlockScaling, NVFP4BlockScaling",
     scaling_kind_names(), CHOICE(recipe.kind, scaling_kind_name, parse_scaling_kind), nullptr,
     true},
    {"fp8-format", "precision", SettingType::Choice,
     "per-tensor recipes: E4M3 everywhere, or hybrid (E5M2 gradients)", {"e4m3", "hybrid"},
     CHOICE(recipe.delayed.format, format_name, parse_format), nullptr, true},
    {"margin", "precision", SettingType::Int, "scale = fp8_max / amax / 2^margin", {},
     SHOW_INT(recipe.delayed.margin), INT32(recipe.delayed.margin),
     REQUIRE(recipe.delayed.margin, >= 0, "--margin {} is negative"), true},
    {"amax-history-len", "precision", SettingType::Int, "delayed scaling: amax history length", {},
     SHOW_INT(recipe.delayed.amax_history_len), INT32(recipe.delayed.amax_history_len),
     [](const TrainConfig& c) {
       const int n = c.recipe.delayed.amax_history_len;
       if (n < 1 || n > kMaxAmaxHistoryLen)
         throw Error(fmt::format("--amax-history-len {} is out of range (1 to {})", n,
                                 kMaxAmaxHistoryLen));
     },
     true},
    {"amax-compute-algo", "precision", SettingType::Choice,
     "delayed scaling: the history's max, or its newest entry", {"max", "most_recent"},
     CHOICE(recipe.delayed.amax_compute_algo, amax_compute_algo_name, parse_amax_compute_algo),
     nullptr, true},
    {"power-2-scale", "precision", SettingType::Bool, "block recipe: scales powers of two", {},
     SHOW_BOOL(recipe.block.power_2_scale), BOOL(recipe.block.power_2_scale), nullptr, true},
    {"amax-epsilon", "precision", SettingType::Float,
     "block recipe: the smallest amax a block's scale is taken from", {},
     SHOW_REAL(recipe.block.amax_epsilon), REAL(recipe.block.amax_epsilon),
     REQUIRE(recipe.block.amax_epsilon, >= 0.0f, "--amax-epsilon {} must be finite and 0 or more"),
     true},
    {"disable-rht", "precision", SettingType::Bool,
     "nvfp4: no Hadamard transform on the weight gradient's inputs", {},
     SHOW_BOOL(recipe.nvfp4.disable_rht), BOOL(recipe.nvfp4.disable_rht), nullptr, true},
    {"disable-stochastic-rounding", "precision", SettingType::Bool,
     "nvfp4: gradients rounded to nearest", {},
     SHOW_BOOL(recipe.nvfp4.disable_stochastic_rounding),
     BOOL(recipe.nvfp4.disable_stochastic_rounding), nullptr, true},
    {"disable-2d-quantization", "precision", SettingType::Bool,
     "nvfp4: weights in 1x16 blocks, not 16x16", {},
     SHOW_BOOL(recipe.nvfp4.disable_2d_quantization),
     BOOL(recipe.nvfp4.disable_2d_quantization), nullptr, true},
    {"fp8-weights", "precision", SettingType::Bool,
     "keep module weights only as FP8 (TE's fp8_model_init)", {}, SHOW_BOOL(fp8_weights),
     BOOL(fp8_weights), nullptr, true},
    {"precision-map", "precision", SettingType::Text,
     "GEMMs kept in BF16 under FP8: glob patterns over GEMM names, comma-separated "
     "(layers.0.*,*.fc2), or first-last-layers", {},
     [](const TrainConfig& c) { return c.precision_map; },
     [](TrainConfig& c, Text v) { c.precision_map = std::string(v); }, nullptr, true},
    {"fp8-fallback", "precision", SettingType::Choice,
     "auto: a GEMM whose FP8 output goes non-finite or keeps saturating moves to BF16",
     {"auto", "off"},
     [](const TrainConfig& c) { return std::string(c.fp8_fallback ? "auto" : "off"); },
     [](TrainConfig& c, Text v) {
       if (v != "auto" && v != "off")
         throw Error(fmt::format("{}: '{}' is not auto or off", g_label, v));
       c.fp8_fallback = v == "auto";
     }},

    // The optimization.
    {"steps", "training", SettingType::Int, "training steps", {}, SHOW_INT(steps), INT(steps),
     REQUIRE(steps, > 0, "--steps {} must be positive")},
    {"batch-size", "training", SettingType::Int,
     "sequences per forward and backward, across all ranks", {}, SHOW_INT(batch_size),
     INT(batch_size),
     REQUIRE(batch_size, > 0, "--batch-size {} must be positive")},
    {"grad-accum", "training", SettingType::Int,
     "micro-batches of --batch-size whose gradients one optimizer step sums", {},
     SHOW_INT(grad_accum), INT(grad_accum),
     REQUIRE(grad_accum, > 0, "--grad-accum {} must be positive")},
    {"lr", "training", SettingType::Float, "peak learning rate", {}, SHOW_REAL(lr), REAL(lr),
     REQUIRE(lr, > 0.0f, "--lr {} must be positive")},
    {"min-lr-ratio", "training", SettingType::Float, "the cosine schedule ends at lr times this",
     {}, SHOW_REAL(min_lr_ratio), REAL(min_lr_ratio),
     [](const TrainConfig& c) {
       if (!(c.min_lr_ratio >= 0.0f && c.min_lr_ratio <= 1.0f))
         throw Error(fmt::format("--min-lr-ratio {} must be 0 to 1", c.min_lr_ratio));
     }},
    {"warmup", "training", SettingType::Int, "warmup steps", {}, SHOW_INT(warmup), INT(warmup),
     REQUIRE(warmup, >= 0, "--warmup {} must be 0 or more")},
    {"weight-decay", "training", SettingType::Float, "AdamW weight decay (matrices only)", {},
     SHOW_REAL(weight_decay), REAL(weight_decay),
     REQUIRE(weight_decay, >= 0.0f, "--weight-decay {} must be 0 or more")},
    {"grad-clip", "training", SettingType::Float, "clip the global gradient norm to this (0: off)",
     {}, SHOW_REAL(grad_clip), REAL(grad_clip),
     REQUIRE(grad_clip, >= 0.0f, "--grad-clip {} must be 0 (off) or more")},
    {"seed", "training", SettingType::Int, "random seed (weights and data order)", {},
     SHOW_INT(seed),
     [](TrainConfig& c, Text v) {
       // A negative seed would wrap to a huge one: refused rather than quietly another seed.
       const int64_t seed = setting_int(g_label, v);
       if (seed < 0) throw Error(fmt::format("{} {} must be 0 or more", g_label, v));
       c.seed = static_cast<uint64_t>(seed);
     }},
    {"max-skipped-steps", "training", SettingType::Int,
     "non-finite steps skipped in a row before the run stops", {}, SHOW_INT(max_skipped_steps),
     INT(max_skipped_steps),
     REQUIRE(max_skipped_steps, >= 1, "--max-skipped-steps {} must be at least 1")},
    {"threads", "training", SettingType::Int, "threads (0: all cores)", {}, SHOW_INT(threads),
     INT32(threads),
     REQUIRE(threads, >= 0, "--threads {} must be 0 (all cores) or more")},

    // What it trains on, and how it is evaluated.
    {"data", "data", SettingType::Text,
     "a text file (bytes) or a token dataset directory (fp8lm data prepare); empty: the stride "
     "demo", {},
     [](const TrainConfig& c) { return c.data; },
     [](TrainConfig& c, Text v) {
       // Stored absolute: a run resumed from another directory still finds its data.
       c.data = v.empty() ? std::string()
                          : std::filesystem::absolute(v).lexically_normal().string();
     }},
    {"max-stride", "data", SettingType::Int, "stride demo: the largest stride K", {},
     SHOW_INT(max_stride), INT(max_stride),
     REQUIRE(max_stride, >= 1, "--max-stride {} must be at least 1")},
    {"prompt-len", "data", SettingType::Int, "stride demo: the held-out prompts' length", {},
     SHOW_INT(prompt_len), INT(prompt_len),
     REQUIRE(prompt_len, >= 2, "--prompt-len {} must be at least 2")},
    {"eval-prompts", "data", SettingType::Int,
     "stride demo: held-out prompts the accuracy is measured on", {}, SHOW_INT(eval_prompts),
     INT(eval_prompts),
     REQUIRE(eval_prompts, >= 1, "--eval-prompts {} must be at least 1")},
    {"evaluate", "data", SettingType::Bool,
     "generation or validation after training (--no-evaluate: skip it)", {}, SHOW_BOOL(evaluate),
     BOOL(evaluate)},

    // Many processes (mpirun).
    {"zero", "parallel", SettingType::Int,
     "1 shards the optimizer state across data-parallel ranks (ZeRO-1)", {}, SHOW_INT(zero),
     INT(zero),
     [](const TrainConfig& c) {
       if (c.zero != 0 && c.zero != 1)
         throw Error(
             fmt::format("--zero {}: the stages are 0 (off) and 1 (optimizer state)", c.zero));
     }},
    {"grad-reduce", "parallel", SettingType::Choice,
     "the type gradients are all-reduced in across ranks", {"fp32", "bf16"},
     [](const TrainConfig& c) { return std::string(c.bf16_grad_reduce ? "bf16" : "fp32"); },
     [](TrainConfig& c, Text v) {
       if (v != "fp32" && v != "bf16")
         throw Error(fmt::format("{}: '{}' is not fp32 or bf16", g_label, v));
       c.bf16_grad_reduce = v == "bf16";
     }},
    {"grad-bucket-mb", "parallel", SettingType::Float,
     "MiB of gradients per all-reduce bucket, started as backward finishes it (0: one, after)", {},
     SHOW_REAL(grad_bucket_mb), REAL(grad_bucket_mb),
     [](const TrainConfig& c) {
       if (!(c.grad_bucket_mb >= 0 && c.grad_bucket_mb <= 1 << 20))
         throw Error(fmt::format("--grad-bucket-mb {} must be 0 (one bucket) to 1048576",
                                 c.grad_bucket_mb));
     }},
  };
  return settings;
}
// clang-format on

#undef INT
#undef INT32
#undef REAL
#undef BOOL
#undef SHOW_INT
#undef SHOW_REAL
#undef SHOW_BOOL
#undef CHOICE
#undef REQUIRE

std::string dashes(std::string_view s) {
  std::string out(s);
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

}  // namespace

std::string Setting::key() const {
  std::string k(name);
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

std::string Setting::flag() const {
  return fmt::format("--{}", name);
}

std::string Setting::fallback() const {
  return get(TrainConfig{});
}

std::string Setting::type_name() const {
  switch (type) {
    case SettingType::Int:
      return "INT";
    case SettingType::Float:
      return "FLOAT";
    case SettingType::Bool:
      return "";
    case SettingType::Text:
      return name == "data" ? "PATH" : "TEXT";
    case SettingType::Choice:
      break;
  }
  return fmt::format("{{{}}}", fmt::join(choices, ","));
}

std::span<const Setting> train_settings() {
  return table();
}

const Setting* find_setting(std::string_view name_or_key) {
  const std::string name = dashes(name_or_key);
  for (const Setting& s : table())
    if (s.name == name) return &s;
  return nullptr;
}

std::string closest_setting(std::string_view name) {
  std::vector<std::string> names;
  for (const Setting& s : table()) names.emplace_back(s.name);
  return closest_name(dashes(name), names);
}

void apply_setting(TrainConfig& c, const Setting& s, std::string_view text,
                   std::string_view label) {
  const std::string flag = s.flag();
  const Text saved = g_label;
  g_label = label.empty() ? Text(flag) : label;
  try {
    s.set(c, text);
  } catch (...) {
    g_label = saved;
    throw;
  }
  g_label = saved;
}

void check_fp8_only_settings(const TrainConfig& c) {
  if (c.precision == Precision::Fp8) return;
  for (const Setting& s : table()) {
    if (!s.fp8_only || s.get(c) == s.fallback()) continue;
    const std::string v = s.get(c);
    const std::string shown = s.type != SettingType::Bool ? fmt::format("{} {}", s.flag(), v)
                              : v == "true"               ? s.flag()
                                                          : fmt::format("--no-{}", s.name);
    throw Error(fmt::format("{} is an FP8 setting, but the precision is {}: add --precision fp8",
                            shown, precision_name(c.precision)));
  }
}

void check_each_setting(const TrainConfig& c) {
  for (const Setting& s : table())
    if (s.check) s.check(c);
}

}  // namespace fp8lm
