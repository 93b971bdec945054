// fp8lm train: parses the run's configuration (built-in stride demo < --config FILE.json <
// flags), trains with a progress bar, prints the result and writes DIR/summary.json.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "cli/parse.h"
#include "dist/communicator.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "io/run_lock.h"
#include "train/token_shards.h"
#include "train/trainer.h"

namespace fp8lm::cli {
namespace {

// Every flag as text, so that --config values apply first and explicit flags override them.
struct TrainFlags {
  std::string config, out, resume, init;
  int64_t checkpoint_every = 0, stop_after = 0;
  int keep_checkpoints = 3;
  std::map<std::string, std::string> values;  // flag name (without --) -> value
  bool fp8_weights = false;
  bool no_fusion = false;
  std::string device = "auto";
  double collective_timeout = kDefaultCollectiveTimeout;
};

int64_t as_int(const std::string& flag, const std::string& v) {
  const std::optional<int64_t> x = parse_int(v);
  if (!x) throw Error(fmt::format("--{} '{}' is not an integer", flag, v));
  return *x;
}

// An int setting: out of int's range is an error, not a wrapped value.
int as_int32(const std::string& flag, const std::string& v) {
  const int64_t x = as_int(flag, v);
  if (x < INT32_MIN || x > INT32_MAX) throw Error(fmt::format("--{} {} is out of range", flag, v));
  return static_cast<int>(x);
}

float as_float(const std::string& flag, const std::string& v) {
  float x = 0;
  try {
    x = parse_float(v);
  } catch (const Error&) {
    throw Error(fmt::format("--{} '{}' is not a finite number", flag, v));
  }
  if (!std::isfinite(x)) throw Error(fmt::format("--{} '{}' is not a finite number", flag, v));
  return x;
}

// A switch: given alone (an empty value) it is true.
bool as_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v.empty()) return true;
  if (v == "false") return false;
  throw Error(fmt::format("--{} '{}' is not true or false", flag, v));
}

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

// Every setting once: its flag (and config key), its help, and how it applies.
struct Setting {
  const char* name;
  const char* help;
  void (*apply)(TrainConfig& c, const std::string& flag, const std::string& v);
};

using Flag = const std::string&;
const Setting kSettings[] = {
    {"vocab", "vocabulary size",
     [](TrainConfig& c, Flag f, Flag v) { c.model.vocab = as_int(f, v); }},
    {"seq-len", "the longest sequence (the position table, the KV cache)",
     [](TrainConfig& c, Flag f, Flag v) { c.model.seq_len = as_int(f, v); }},
    {"d-model", "model width",
     [](TrainConfig& c, Flag f, Flag v) { c.model.d_model = as_int(f, v); }},
    {"n-layers", "transformer layers",
     [](TrainConfig& c, Flag f, Flag v) { c.model.n_layers = as_int(f, v); }},
    {"n-heads", "attention heads",
     [](TrainConfig& c, Flag f, Flag v) { c.model.n_heads = as_int(f, v); }},
    {"ffn", "MLP hidden width", [](TrainConfig& c, Flag f, Flag v) { c.model.ffn = as_int(f, v); }},
    {"activation", "gelu|relu|swiglu",
     [](TrainConfig& c, Flag, Flag v) { c.model.activation = parse_activation(v); }},
    {"normalization", "layernorm|rmsnorm",
     [](TrainConfig& c, Flag, Flag v) { c.model.normalization = parse_normalization(v); }},
    {"n-kv-heads", "key/value heads of grouped-query attention (divides --n-heads; 0: as many)",
     [](TrainConfig& c, Flag f, Flag v) { c.model.n_kv_heads = as_int(f, v); }},
    {"rope-theta", "rotary position embeddings with this base (Llama: 10000); 0: learned positions",
     [](TrainConfig& c, Flag f, Flag v) { c.model.rope_theta = as_float(f, v); }},
    {"bias", "true|false: biases in every linear layer (Llama: false)",
     [](TrainConfig& c, Flag f, Flag v) { c.model.bias = as_bool(f, v); }},
    {"tie-embeddings", "true|false: the LM head is the token embedding (Llama: false)",
     [](TrainConfig& c, Flag f, Flag v) { c.model.tied_head = as_bool(f, v); }},
    {"precision", "auto|fp8|bf16|fp32",
     [](TrainConfig& c, Flag, Flag v) { c.precision = parse_precision(v); }},
    {"fp8-format", "e4m3|hybrid",
     [](TrainConfig& c, Flag, Flag v) { c.recipe.delayed.format = parse_format(v); }},
    {"amax-history-len", "delayed scaling: amax history length",
     [](TrainConfig& c, Flag f, Flag v) { c.recipe.delayed.amax_history_len = as_int32(f, v); }},
    {"amax-compute-algo", "delayed scaling: max|most_recent",
     [](TrainConfig& c, Flag, Flag v) {
       c.recipe.delayed.amax_compute_algo = parse_amax_compute_algo(v);
     }},
    {"margin", "scale = fp8_max / amax / 2^margin",
     [](TrainConfig& c, Flag f, Flag v) { c.recipe.delayed.margin = as_int32(f, v); }},
    {"recipe", "delayed|current|block|mxfp8|nvfp4 (TE's recipes)",
     [](TrainConfig& c, Flag, Flag v) {
       try {
         c.recipe.kind = parse_scaling_kind(v);
       } catch (const Error& e) {
         throw Error(fmt::format("--recipe: {}", e.what()));
       }
     }},
    {"power-2-scale", "block recipe: true|false, scales powers of two (default true)",
     [](TrainConfig& c, Flag f, Flag v) { c.recipe.block.power_2_scale = as_bool(f, v); }},
    {"amax-epsilon", "block recipe: the smallest amax a block's scale is taken from (default 0)",
     [](TrainConfig& c, Flag f, Flag v) { c.recipe.block.amax_epsilon = as_float(f, v); }},
    {"disable-rht", "nvfp4: true|false, no Hadamard transform on the weight gradient's inputs",
     [](TrainConfig& c, Flag f, Flag v) { c.recipe.nvfp4.disable_rht = as_bool(f, v); }},
    {"disable-stochastic-rounding", "nvfp4: true|false, gradients rounded to nearest",
     [](TrainConfig& c, Flag f, Flag v) {
       c.recipe.nvfp4.disable_stochastic_rounding = as_bool(f, v);
     }},
    {"disable-2d-quantization", "nvfp4: true|false, weights in 1x16 blocks, not 16x16",
     [](TrainConfig& c, Flag f, Flag v) {
       c.recipe.nvfp4.disable_2d_quantization = as_bool(f, v);
     }},
    {"precision-map",
     "GEMMs kept in BF16 under FP8: glob patterns over GEMM names, comma-separated "
     "(layers.0.*,*.fc2), or first-last-layers",
     [](TrainConfig& c, Flag, Flag v) { c.precision_map = v; }},
    {"steps", "training steps", [](TrainConfig& c, Flag f, Flag v) { c.steps = as_int(f, v); }},
    {"batch-size", "sequences per forward and backward, across all ranks",
     [](TrainConfig& c, Flag f, Flag v) { c.batch_size = as_int(f, v); }},
    {"grad-accum", "micro-batches of --batch-size whose gradients one optimizer step sums",
     [](TrainConfig& c, Flag f, Flag v) { c.grad_accum = as_int(f, v); }},
    {"zero", "0|1: 1 shards the optimizer state across data-parallel ranks (ZeRO-1)",
     [](TrainConfig& c, Flag f, Flag v) { c.zero = as_int(f, v); }},
    {"grad-reduce", "fp32|bf16: the type gradients are all-reduced in across ranks (default fp32)",
     [](TrainConfig& c, Flag, Flag v) {
       if (v != "fp32" && v != "bf16")
         throw Error(fmt::format("--grad-reduce: '{}' is not fp32 or bf16", v));
       c.bf16_grad_reduce = v == "bf16";
     }},
    {"grad-bucket-mb",
     "MiB of gradients per all-reduce bucket, started as backward finishes it (0: one, after)",
     [](TrainConfig& c, Flag f, Flag v) { c.grad_bucket_mb = as_float(f, v); }},
    {"lr", "peak learning rate", [](TrainConfig& c, Flag f, Flag v) { c.lr = as_float(f, v); }},
    {"warmup", "warmup steps", [](TrainConfig& c, Flag f, Flag v) { c.warmup = as_int(f, v); }},
    {"weight-decay", "AdamW weight decay (matrices only)",
     [](TrainConfig& c, Flag f, Flag v) { c.weight_decay = as_float(f, v); }},
    {"grad-clip", "clip the global gradient norm to this (0: off)",
     [](TrainConfig& c, Flag f, Flag v) { c.grad_clip = as_float(f, v); }},
    {"seed", "random seed",
     [](TrainConfig& c, Flag f, Flag v) { c.seed = static_cast<uint64_t>(as_int(f, v)); }},
    {"threads", "threads (0: all cores)",
     [](TrainConfig& c, Flag f, Flag v) { c.threads = as_int32(f, v); }},
    {"data", "byte-level text file (default: the stride task)",
     [](TrainConfig& c, Flag, Flag v) {
       // Stored absolute: a run resumed from another directory still finds its data.
       c.data = v.empty() ? v : std::filesystem::absolute(v).lexically_normal().string();
     }},
    {"max-stride", "stride task: largest stride K",
     [](TrainConfig& c, Flag f, Flag v) { c.max_stride = as_int(f, v); }},
    {"fp8-fallback",
     "auto|off: a GEMM whose FP8 output goes non-finite or keeps saturating moves to BF16 "
     "(default auto)",
     [](TrainConfig& c, Flag, Flag v) {
       if (v != "auto" && v != "off")
         throw Error(fmt::format("--fp8-fallback: '{}' is not auto or off", v));
       c.fp8_fallback = v == "auto";
     }},
    {"max-skipped-steps", "non-finite steps skipped in a row before the run stops (default 10)",
     [](TrainConfig& c, Flag f, Flag v) { c.max_skipped_steps = as_int(f, v); }},
};

void apply(TrainConfig& c, const std::string& flag, const std::string& v) {
  for (const Setting& s : kSettings) {
    if (flag == s.name) return s.apply(c, flag, v);
  }
  throw Error(fmt::format("unknown setting '{}'", flag));
}

// A JSON object whose keys are flag names (with - or _): {"d_model": 512, "precision": "fp8"}.
// Returns the flags it set.
std::set<std::string> apply_config_file(TrainConfig& c, const std::string& path,
                                        bool& fp8_weights) {
  std::set<std::string> set;
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(fmt::format("{}: not a regular file (a config is a JSON file)", path));
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot open the config file", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: not valid JSON (byte {})", path, e.byte));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object of settings", path));
  for (const auto& [key, value] : j.items()) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (flag == "fp8-weights") {
      if (!value.is_boolean())
        throw Error(fmt::format("{}: fp8_weights must be true or false", path));
      fp8_weights = value.get<bool>();
      continue;
    }
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    try {
      apply(c, flag, text);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", path, e.what()));
    }
    set.insert(flag);
  }
  return set;
}

// One line redrawn in place on a terminal; a line every 10% otherwise (logs, CI).
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

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void request_stop(int sig) {
  g_signal = sig;
  g_stop = true;
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

// --out DIR: a new directory, or an empty one. A run is continued with --resume, and anything
// else a user keeps there is not touched.
void check_new_run_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) return;
  if (!fs::is_directory(dir)) throw Error(fmt::format("--out {}: a file, not a directory", dir));
  if (fs::exists(dir + "/config.json")) {
    throw Error(fmt::format(
        "{} already holds a run; resume it with --resume {} or choose another --out", dir, dir));
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == ".lock") continue;  // left by a run that failed to start
    throw Error(fmt::format(
        "--out {}: the directory is not empty and not an fp8lm run; choose another", dir));
  }
}

bool has_checkpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir + "/checkpoints")) return false;
  for (const auto& entry : fs::directory_iterator(dir + "/checkpoints"))
    if (entry.path().filename().string().starts_with("step-")) return true;
  return false;
}

// The run in DIR from its latest checkpoint; from step 0 when it was stopped before its first.
std::unique_ptr<Trainer> resume_run(const std::string& dir, const DeviceSpec& device, bool lead) {
  std::unique_ptr<Trainer> trainer;
  if (!has_checkpoints(dir)) {
    std::ifstream in(dir + "/config.json");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    TrainConfig c = train_config_from_json(text, dir + "/config.json");
    c.device = device;
    c.validate();
    trainer = std::make_unique<Trainer>(c);
    if (lead) fmt::print("{} has no checkpoint yet: starting the run again from step 0\n", dir);
    return trainer;
  }
  ResumedRun resumed = resume_newest_checkpoint(dir);
  trainer = std::move(resumed.trainer);
  trainer->use_device(device);  // a run resumes on any device
  if (!lead) return trainer;
  if (!resumed.fallback.empty()) {
    fmt::print("{}\nusing {} instead, the newest checkpoint that loads\n", resumed.fallback,
               resumed.checkpoint);
  }
  fmt::print("resuming {} at step {} of {}\n", resumed.checkpoint, trainer->steps_done(),
             trainer->config().steps);
  return trainer;
}

// The run-directory flags, before anything is read or written.
void check_run_flags(const TrainFlags& f, CLI::App* app) {
  for (const char* flag : {"--out", "--resume"}) {
    if (app->get_option(flag)->count() > 0 && app->get_option(flag)->as<std::string>().empty())
      throw Error(fmt::format("{} needs a directory", flag));
  }
  if (!f.out.empty() && !f.resume.empty())
    throw Error("--out and --resume name the run twice; --resume DIR continues DIR");
  if (!f.init.empty() && !f.resume.empty())
    throw Error("--init starts a new run from a model's weights; --resume continues a run");
  if (f.keep_checkpoints < 1)
    throw Error(fmt::format("--keep-checkpoints {} must be at least 1", f.keep_checkpoints));
  if (f.checkpoint_every < 0)
    throw Error(fmt::format("--checkpoint-every {} must be 0 (at the end only) or more",
                            f.checkpoint_every));
  if (f.stop_after < 0) throw Error(fmt::format("--stop-after {} is negative", f.stop_after));
  if (!(f.collective_timeout >= 0) || !std::isfinite(f.collective_timeout))
    throw Error(fmt::format("--collective-timeout {} must be 0 (wait forever) or more seconds",
                            f.collective_timeout));
}

// What a rank other than 0 records: nothing (rank 0 writes the run directory).
class Follower final : public RunRecorder {
 public:
  void step(Trainer&, const StepRecord&) override {}
  void checkpoint(Trainer&) override {}
  void stopped(Trainer&) override {}
  void finished(Trainer&, const TrainResult&) override {}
};

// How a run in DIR checkpoints: as it began when resumed, unless a flag changes it now. Every
// rank keeps the same schedule (a checkpoint is a collective under ZeRO-1).
RunSettings run_settings(const TrainFlags& f, CLI::App* app, const std::string& dir) {
  RunSettings settings = f.resume.empty() ? RunSettings{} : read_run_settings(dir);
  if (f.resume.empty() || app->get_option("--checkpoint-every")->count() > 0)
    settings.checkpoint_every = f.checkpoint_every;
  if (f.resume.empty() || app->get_option("--keep-checkpoints")->count() > 0)
    settings.keep_checkpoints = f.keep_checkpoints;
  return settings;
}

// A rank other than 0: the same steps, stops, checkpoints and evaluation as rank 0, silently.
int follow(Trainer& trainer, const std::string& dir, const TrainFlags& f, CLI::App* app) {
  if (dir.empty()) {
    while (!trainer.done()) trainer.train_step();
    trainer.finish();
    return 0;
  }
  Follower follower;
  const RunSchedule schedule{run_settings(f, app, dir).checkpoint_every, f.stop_after};
  // Stopped or finished, a follower ends with 0: rank 0 reports the stop and exits 128 + the
  // signal. A follower's own non-zero exit would make mpirun kill rank 0, perhaps before its
  // checkpoint is written.
  run_training(trainer, schedule, follower, {}, &g_stop, nullptr);
  return 0;
}

int run_train(const TrainFlags& f, CLI::App* app) {
  check_run_flags(f, app);
  const std::string dir = f.resume.empty() ? f.out : f.resume;
  if (!dir.empty()) {
    // Before the trainer loads (which can take seconds): a stop asked for meanwhile is
    // honoured after the first step, with a checkpoint, rather than killing the process.
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
  }
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<RunLock> lock;  // held until the process is done with the directory
  // Under mpirun, rank 0 leads: it alone prints and writes the run directory (every rank
  // trains and holds the same model).
  const bool lead = world().rank() == 0;
  world().set_timeout(f.collective_timeout);
  if (!f.resume.empty()) {
    for (const auto& [flag, value] : f.values) {
      if (app->get_option("--" + flag)->count() > 0) {
        throw Error(fmt::format("--resume continues the run's own config; drop --{}", flag));
      }
    }
    if (!f.config.empty() || f.fp8_weights)
      throw Error("--resume continues the run's own config; drop --config and --fp8-weights");
    if (parse_only()) return 0;
    if (!std::filesystem::exists(f.resume + "/config.json"))
      throw Error(fmt::format("--resume {}: not an fp8lm run (no config.json)", f.resume));
    if (lead) lock = std::make_unique<RunLock>(f.resume);
    trainer = resume_run(f.resume, parse_device(f.device), lead);
  } else {
    TrainConfig c;
    bool fp8_weights = false;
    std::set<std::string> set;
    if (!f.config.empty()) set = apply_config_file(c, f.config, fp8_weights);
    for (const auto& [flag, value] : f.values) {
      if (app->get_option("--" + flag)->count() == 0) continue;
      apply(c, flag, value);
      set.insert(flag);
    }
    // Byte-level text has 256 token ids, a token dataset its tokenizer's: the vocabulary
    // unless one was asked for.
    if (!c.data.empty() && !set.contains("vocab"))
      c.model.vocab = is_token_dataset(c.data) ? read_manifest(c.data).vocab_size : 256;
    if (f.fp8_weights) fp8_weights = true;
    c.fp8_weights = fp8_weights;
    c.device = parse_device(f.device);
    // Fine-tuning: the model's shape is the init file's, whatever the model flags say.
    const std::string init = f.init.empty() ? "" : model_file_path(f.init);
    if (!init.empty()) {
      const auto meta = Safetensors::read_metadata(init);
      if (!meta.count("config"))
        throw Error(
            fmt::format("--init {}: not an fp8lm model file (fp8lm import makes one)", init));
      c.model = train_config_from_json(meta.at("config"), init).model;
    }
    c.validate();
    if (parse_only()) return 0;
    if (!f.out.empty() && lead) check_new_run_dir(f.out);
    // Before the run directory is made: a config the trainer refuses (data that is not a file,
    // a model too large for the memory) leaves nothing behind.
    trainer = std::make_unique<Trainer>(c);
    if (!init.empty()) apply_model_tensors(Safetensors::read(init), trainer->model());
    if (!f.out.empty() && lead) {
      std::filesystem::create_directories(f.out);
      lock = std::make_unique<RunLock>(f.out);
    }
  }
  trainer->set_fusion(!f.no_fusion);  // how kernels run, not what the run is: not saved
  const TrainConfig& c = trainer->config();
  if (!lead) return follow(*trainer, dir, f, app);
  const PrecisionChoice& choice = trainer->precision();
  fmt::print("precision {} -> {} on {} ({})\n", precision_name(c.precision), choice.label(),
             trainer->device().name, choice.reason);
  if (!trainer->device().reason.empty())
    fmt::print("device {}: {}\n", trainer->device().label(), trainer->device().reason);
  fmt::print(
      "model: {} parameters · vocab {} · seq {} · d_model {} · {} layers · {} heads · ffn {}{}\n",
      c.model.parameter_count(), c.model.vocab, c.model.seq_len, c.model.d_model, c.model.n_layers,
      c.model.n_heads, c.model.ffn, block_features(c.model));
  if (choice.precision == Precision::Fp8) {
    fmt::print("recipe: {}\n", trainer->recipe_line());
    if (!trainer->kept_in_bf16().empty()) {
      fmt::print("precision map {}: {} of {} GEMMs in BF16 ({})\n", c.precision_map,
                 trainer->kept_in_bf16().size(), trainer->model().linears().size(),
                 fmt::join(trainer->kept_in_bf16(), ", "));
    }
  }
  if (trainer->ranks().size() > 1) {
    fmt::print("data parallel: {} ranks ({}) · global batch {}, {} to {} sequences per rank\n",
               trainer->ranks().size(), trainer->collectives(), c.batch_size,
               c.batch_size / trainer->ranks().size(),
               (c.batch_size + trainer->ranks().size() - 1) / trainer->ranks().size());
  }
  if (c.grad_accum > 1) {
    fmt::print("gradient accumulation: {} micro-batches of {} sequences per step ({} sequences)\n",
               c.grad_accum, c.batch_size, c.sequences_per_step());
  }
  std::fflush(stdout);  // the header before the progress bar (stderr)

  if (dir.empty()) {
    if (f.checkpoint_every > 0 || f.stop_after > 0)
      throw Error("--checkpoint-every and --stop-after need --out DIR");
    while (!trainer->done()) print_progress(trainer->train_step());
    print_result(c, trainer->finish());
    return 0;
  }
  const RunSettings settings = run_settings(f, app, dir);
  const RunSchedule schedule{settings.checkpoint_every, f.stop_after};
  RunDirectory run(dir, *trainer, settings);
  TrainResult r;
  if (run_training(*trainer, schedule, run, print_progress, &g_stop, &r) == RunEnd::Stopped) {
    fmt::print(stderr,
               "\nstopped at step {}; checkpoint written; continue with: fp8lm train --resume {}\n",
               trainer->steps_done(), dir);
    return g_signal ? 128 + g_signal.load() : 0;
  }
  print_result(c, r);
  fmt::print("wrote {0}/summary.json, {0}/model.safetensors, {0}/report.html\n", dir);
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* train =
      app.add_subcommand("train", "Train a GPT (default: the stride demo) and evaluate it");
  auto flags = std::make_shared<TrainFlags>();
  train->add_option("--config", flags->config, "JSON file of settings (flags override it)");
  train->add_option("--out", flags->out,
                    "run directory: config, metrics, checkpoints, model, summary");
  train->add_option("--init", flags->init,
                    "start from this model's weights (a model.safetensors or run directory, e.g. "
                    "from fp8lm import): fine-tuning; the model's shape is its");
  train->add_option("--resume", flags->resume,
                    "continue the run in this directory from its latest checkpoint");
  train->add_option("--checkpoint-every", flags->checkpoint_every,
                    "write a checkpoint every N steps");
  train->add_option("--keep-checkpoints", flags->keep_checkpoints, "checkpoints kept (default 3)");
  train->add_option("--stop-after", flags->stop_after,
                    "stop with a checkpoint after step N (resume later)");
  train->add_flag("--fp8-weights", flags->fp8_weights,
                  "keep module weights only as FP8 (TE's fp8_model_init)");
  train->add_option("--device", flags->device,
                    "auto|cpu|cuda|cuda:N (auto: a GPU when one is present; default auto)");
  train->add_option("--collective-timeout", flags->collective_timeout,
                    "seconds a rank waits in a collective for the others before the run stops "
                    "(default 300; 0: forever)");
  train->add_flag("--no-fusion", flags->no_fusion,
                  "run the unfused kernel twins (to measure what fusion saves)");
  for (const Setting& s : kSettings) {
    CLI::Option* o = train->add_option(std::string("--") + s.name, flags->values[s.name], s.help);
    if (std::string_view(s.name).starts_with("disable-")) o->expected(0, 1);
  }
  train->callback([flags, train] {
    const int code = run_train(*flags, train);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace fp8lm::cli
