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
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/model_text.h"
#include "cli/parse.h"
#include "cli/setting_options.h"
#include "cli/train_output.h"
#include "core/input_file.h"
#include "core/json.h"
#include "dist/communicator.h"
#include "dist/rank_agreement.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "io/run_lock.h"
#include "train/settings.h"
#include "train/trainer.h"

namespace fp8lm::cli {
namespace {

// Every flag as text, so that --config values apply first and explicit flags override them.
struct TrainFlags {
  std::string config, out, resume, init;
  int64_t checkpoint_every = 0, stop_after = 0;
  int keep_checkpoints = 3;
  std::shared_ptr<SettingOptions> settings = std::make_shared<SettingOptions>();
  bool no_save = false;
  bool no_fusion = false;
  bool no_cuda_graphs = false;
  bool no_tensorboard = false;
  bool allow_data_change = false;  // --resume on data that changed since the run recorded it
  std::string device = "auto";
  double collective_timeout = kDefaultCollectiveTimeout;
};

// A JSON object of settings, as a run's config.json holds them ({"d_model": 512,
// "precision": "fp8", "run": {...}}). Returns the settings it set; a run's checkpointing
// ("run") goes into `run`.
std::set<std::string> apply_config_file(TrainConfig& c, const std::string& path,
                                        nlohmann::json& run) {
  const nlohmann::json j =
      parse_json(read_input_file(path, "--config", kJsonFileBytes), "--config " + path);
  if (j.is_object() && j.contains("run")) run = j["run"];
  return apply_settings_json(c, j, path, {"run"});
}

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void request_stop(int sig) {
  g_signal = sig;
  g_stop = true;
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
    const std::string text = read_input_file(dir + "/config.json", "", kJsonFileBytes);
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
void check_run_flags(const TrainFlags& f) {
  if (!f.out.empty() && !f.resume.empty())
    throw Error("--out and --resume name the run twice; --resume DIR continues DIR");
  if (f.no_save && (!f.out.empty() || !f.resume.empty()))
    throw Error(
        fmt::format("--no-save keeps nothing; drop {}", f.out.empty() ? "--resume" : "--out"));
  if (f.no_save && (f.checkpoint_every > 0 || f.stop_after > 0))
    throw Error("--checkpoint-every and --stop-after write checkpoints; drop --no-save");
  if (f.allow_data_change && f.resume.empty())
    throw Error("--allow-data-change goes with --resume DIR (a run whose data changed)");
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

// The run's result, and its exit status: 1 when it did not end well (its summary says why too).
int ended(const TrainConfig& c, const TrainResult& r, const std::string& dir) {
  print_result(c, r);
  if (!dir.empty())
    fmt::print("wrote {0}/summary.json, {0}/model.safetensors, {0}/report.html\n", dir);
  if (r.failure.empty()) return 0;
  std::fflush(stdout);
  fmt::print(stderr, "error: the run did not end well: {}\n", r.failure);
  return 1;
}

// What a rank other than 0 records: nothing (rank 0 writes the run directory).
class Follower final : public RunRecorder {
 public:
  void step(Trainer&, const StepRecord&) override {}
  void checkpoint(Trainer&) override {}
  void stopped(Trainer&) override {}
  void trained(Trainer&, const TrainResult&) override {}
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
  if (f.resume.empty() || f.no_tensorboard) settings.tensorboard = !f.no_tensorboard;
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

// What every rank of a run must agree on, before anything is built or written: the run's own
// flags and, for a new run, each setting's value. The device is left out: ranks may name their
// own GPU (cuda:N).
std::vector<NamedValue> agreed_settings(const TrainFlags& f, const TrainConfig* c) {
  std::vector<NamedValue> v = {{"--out", f.out},
                               {"--resume", f.resume},
                               {"--allow-data-change", f.allow_data_change ? "true" : "false"},
                               {"--init", f.init},
                               {"--no-save", f.no_save ? "true" : "false"},
                               {"--checkpoint-every", std::to_string(f.checkpoint_every)},
                               {"--keep-checkpoints", std::to_string(f.keep_checkpoints)},
                               {"--stop-after", std::to_string(f.stop_after)},
                               {"--collective-timeout", fmt::format("{}", f.collective_timeout)},
                               {"--no-fusion", f.no_fusion ? "true" : "false"},
                               {"--no-cuda-graphs", f.no_cuda_graphs ? "true" : "false"},
                               {"--no-tensorboard", f.no_tensorboard ? "true" : "false"}};
  if (c) {
    for (const Setting& s : train_settings()) v.emplace_back(s.flag(), s.get(*c));
  }
  return v;
}

// A --config file's "run" object (a run's config.json has one): its checkpointing applies
// unless the flags say otherwise.
void apply_config_run(TrainFlags& f, CLI::App* app, const nlohmann::json& run) {
  if (!run.is_object()) return;
  if (app->get_option("--checkpoint-every")->count() == 0 && run.contains("checkpoint_every") &&
      run["checkpoint_every"].is_number_integer())
    f.checkpoint_every = run["checkpoint_every"].get<int64_t>();
  if (app->get_option("--keep-checkpoints")->count() == 0 && run.contains("keep_checkpoints") &&
      run["keep_checkpoints"].is_number_integer())
    f.keep_checkpoints =
        static_cast<int>(std::clamp<int64_t>(run["keep_checkpoints"].get<int64_t>(), 1, INT32_MAX));
  if (run.contains("tensorboard") && run["tensorboard"] == false) f.no_tensorboard = true;
}

int run_train(TrainFlags f, CLI::App* app) {
  check_run_flags(f);
  // Nothing thrown away: a run without --out is saved under runs/ (--no-save: nothing kept).
  const bool named_here = f.out.empty() && f.resume.empty() && !f.no_save;
  if (named_here) f.out = timestamped_run_dir();
  const std::string dir = f.resume.empty() ? f.out : f.resume;
  if (!dir.empty()) {
    // Before the trainer loads (which can take seconds): a stop asked for meanwhile is
    // honoured after the first step, with a checkpoint, rather than killing the process.
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
  }
  std::unique_ptr<Trainer> trainer;
  // Held until the process is done with the directory: one writer per run.
  std::unique_ptr<RunLock> lock;
  std::unique_ptr<NewRunDir> claim;
  // Under mpirun, rank 0 leads: it alone prints and writes the run directory (every rank
  // trains and holds the same model).
  const bool lead = world().rank() == 0;
  world().set_timeout(f.collective_timeout);
  const auto given = given_settings(*f.settings, app);
  if (!f.resume.empty()) {
    if (!given.empty()) {
      throw Error(fmt::format("--resume continues the run's own config; drop {}",
                              given.front().first->flag()));
    }
    if (!f.config.empty()) throw Error("--resume continues the run's own config; drop --config");
    if (parse_only()) return 0;
    require_ranks_agree(world(), agreed_settings(f, nullptr));
    // A directory that is no run gets no lock file; one that is, is locked before it is read.
    if (!std::filesystem::exists(f.resume + "/config.json"))
      throw Error(fmt::format("--resume {}: not an fp8lm run (no config.json)", f.resume));
    if (lead) lock = std::make_unique<RunLock>(f.resume);
    // Before any checkpoint is tried: data that is gone or changed is the reason to give.
    check_run_data(f.resume, read_run_record(f.resume), f.allow_data_change);
    trainer = resume_run(f.resume, parse_device(f.device), lead);
    if (f.stop_after > 0 && f.stop_after <= trainer->steps_done())
      throw Error(fmt::format("--stop-after {}: the run is already at step {}; give a later step",
                              f.stop_after, trainer->steps_done()));
  } else {
    TrainConfig c;
    std::set<std::string> set;
    if (!f.config.empty()) {
      nlohmann::json config_run;
      set = apply_config_file(c, f.config, config_run);
      apply_config_run(f, app, config_run);
      check_run_flags(f);
    }
    for (const auto& [setting, text] : given) {
      apply_setting(c, *setting, text);
      set.insert(std::string(setting->name));
    }
    if (!set.contains("vocab")) default_vocab_for_data(c);
    c.device = parse_device(f.device);
    // Fine-tuning: the model's shape is the init file's; a shape flag beside it would be
    // ignored, so it is refused.
    const std::string init = f.init.empty() ? "" : model_file_path(f.init);
    if (!init.empty()) {
      for (const auto& [setting, text] : given) {
        if (setting->group == "model")
          throw Error(fmt::format("--init {}: the model's shape is the file's; drop {}", f.init,
                                  setting->flag()));
      }
      const auto meta = Safetensors::read_metadata(init);
      if (!meta.count("config"))
        throw Error(
            fmt::format("--init {}: not an fp8lm model file (fp8lm import makes one)", init));
      const TrainConfig trained = train_config_from_json(meta.at("config"), init);
      c.model = trained.model;
      // Fine-tuning data the model would misread (another tokenizer's ids, bytes for a model
      // of tokens) is refused rather than trained on.
      if (!c.data.empty()) check_model_reads(trained, meta, init, c.data, "--init " + f.init);
    }
    check_new_run(c);
    if (parse_only()) return 0;
    require_ranks_agree(world(), agreed_settings(f, &c));
    // --out DIR: a new directory, or an empty one, claimed before anything else. A config
    // the trainer refuses (data that is not a file, a model too large for the memory) undoes
    // the claim and leaves nothing behind.
    if (!f.out.empty() && lead) claim = std::make_unique<NewRunDir>(f.out);
    trainer = std::make_unique<Trainer>(c);
    if (!init.empty()) apply_model_tensors(Safetensors::read(init), trainer->model());
    if (claim) claim->keep();
  }
  trainer->set_fusion(!f.no_fusion);  // how kernels run, not what the run is: not saved
  trainer->set_cuda_graphs(!f.no_cuda_graphs);
  const TrainConfig& c = trainer->config();
  if (!lead) return follow(*trainer, dir, f, app);
  print_run_start(*trainer);
  if (named_here)
    fmt::print("saving the run to {} (--out DIR names it; --no-save keeps nothing)\n", dir);
  std::fflush(stdout);  // the header before the progress bar (stderr)

  if (dir.empty()) {
    const auto between_reads = static_cast<size_t>(RunSchedule{}.steps_between_reads);
    while (!trainer->done()) {
      trainer->launch_step();
      if (trainer->read_due(between_reads))
        for (const StepStats& s : trainer->read_steps()) print_progress(s);
    }
    return ended(c, trainer->finish(), "");
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
  return ended(c, r, dir);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* train =
      app.add_subcommand("train", "Train a GPT (default: the stride demo) and evaluate it");
  auto flags = std::make_shared<TrainFlags>();
  const auto text = [](CLI::Option* o, const char* type, const std::string& fallback) {
    o->type_name(type);
    if (!fallback.empty()) o->default_str(fallback);
    return o;
  };
  train->option_defaults()->group("Run");
  train
      ->add_option("--config", flags->config,
                   "JSON file of settings, e.g. a run's config.json (flags override it)")
      ->type_name("FILE");
  train
      ->add_option("--out", flags->out,
                   "run directory: config, metrics, checkpoints, model, summary (default: "
                   "runs/<date>-<time>)")
      ->type_name("DIR");
  train->add_flag("--no-save", flags->no_save, "keep nothing on disk (for scripts)");
  train
      ->add_option("--init", flags->init,
                   "start from this model's weights (a model.safetensors or run directory, e.g. "
                   "from fp8lm import): fine-tuning; the model's shape is its")
      ->type_name("MODEL");
  train
      ->add_option("--resume", flags->resume,
                   "continue the run in this directory from its latest checkpoint")
      ->type_name("DIR");
  train->add_flag("--allow-data-change", flags->allow_data_change,
                  "with --resume: continue though the training data changed since the run "
                  "recorded it");
  text(train->add_option("--checkpoint-every", flags->checkpoint_every,
                         "write a checkpoint every N steps (0: at the end only)"),
       "INT", "0");
  text(train->add_option("--keep-checkpoints", flags->keep_checkpoints, "checkpoints kept"), "INT",
       "3");
  text(train->add_option("--stop-after", flags->stop_after,
                         "stop with a checkpoint after step N (resume later)"),
       "INT", "");
  text(train->add_option("--device", flags->device,
                         "auto: a GPU when one is present; cuda:N picks one"),
       "{auto,cpu,cuda,cuda:N}", "auto");
  text(train->add_option("--collective-timeout", flags->collective_timeout,
                         "seconds a rank waits in a collective for the others before the run "
                         "stops (0: forever)"),
       "FLOAT", fmt::format("{}", kDefaultCollectiveTimeout));
  train->add_flag("--no-fusion", flags->no_fusion,
                  "run the unfused kernel twins (to measure what fusion saves)");
  train->add_flag("--no-cuda-graphs", flags->no_cuda_graphs,
                  "launch each op of a GPU step as it is reached, not the step as one CUDA graph");
  train->add_flag("--no-tensorboard", flags->no_tensorboard,
                  "no TensorBoard event files (OUT/tb/) beside metrics.jsonl");
  const std::map<std::string_view, std::string> groups = {
      {"model", "Model"},
      {"precision", "Precision and FP8 recipes"},
      {"training", "Optimization"},
      {"data", "Data and evaluation"},
      {"parallel", "Many processes (mpirun)"}};
  add_setting_options(
      train, flags->settings, [](const Setting&) { return true; },
      [&groups](const Setting& s) { return groups.at(s.group); });
  train->callback([flags, train] {
    const int code = run_train(*flags, train);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace fp8lm::cli
