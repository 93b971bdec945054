// fp8lm compare: the tutorial's question in one command. Every arm (precision x recipe x
// format) is trained once per seed as an ordinary run under DIR/runs/ (each resumable, each with
// its own TensorBoard directory), then DIR/compare.json and DIR/compare.html hold the arms'
// statistics over seeds and their gaps to the baseline, and a table is printed. Each run is a
// process of its own: --jobs N trains N at once, and under mpirun the runs are spread over the
// ranks.
#include <fmt/format.h>

#include <omp.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "cli/child_process.h"
#include "cli/commands.h"
#include "cli/setting_options.h"
#include "core/input_file.h"
#include "core/json.h"
#include "dist/communicator.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/compare_results.h"
#include "io/run_lock.h"
#include "train/compare_plan.h"
#include "train/roofline.h"
#include "train/settings.h"

namespace fp8lm::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The settings compare itself varies: every other train setting passes through to each run.
const std::set<std::string> kVaried = {"precision", "recipe", "fp8-format", "seed"};

struct CompareFlags {
  std::string precisions = "fp32,bf16,fp8", recipes, formats, baseline, out, resume, config;
  std::string device = "auto";
  int64_t seeds = 3, first_seed = 1, checkpoint_every = 0, jobs = 1;
  bool no_tensorboard = false;
  std::shared_ptr<SettingOptions> settings = std::make_shared<SettingOptions>();
};

// What a comparison is, saved as DIR/compare-plan.json so that --resume finishes it.
struct Plan {
  std::vector<CompareArm> arms;
  std::vector<uint64_t> seeds;
  std::string baseline;
  std::vector<std::string> train_args;  // the flags every run shares
};

Json plan_json(const Plan& p) {
  Json arms = Json::array();
  for (const CompareArm& a : p.arms)
    arms.push_back({{"label", a.label},
                    {"precision", a.precision},
                    {"recipe", a.recipe},
                    {"fp8_format", a.format}});
  return {
      {"arms", arms}, {"seeds", p.seeds}, {"baseline", p.baseline}, {"train_args", p.train_args}};
}

Plan read_plan(const std::string& dir) {
  const std::string path = dir + "/compare-plan.json";
  if (!fs::exists(path))
    throw Error(fmt::format("--resume {}: not a comparison (no compare-plan.json)", dir));
  const Json j = read_json_file(path, kJsonFileBytes);
  Plan p;
  try {
    for (const Json& a : j.at("arms"))
      p.arms.push_back({a.at("label").get<std::string>(), a.at("precision").get<std::string>(),
                        a.at("recipe").get<std::string>(), a.at("fp8_format").get<std::string>()});
    p.seeds = j.at("seeds").get<std::vector<uint64_t>>();
    p.baseline = j.at("baseline").get<std::string>();
    p.train_args = j.at("train_args").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    throw Error(
        fmt::format("{}: damaged (fp8lm compare writes it; start the comparison again)", path));
  }
  if (p.arms.empty() || p.seeds.empty())
    throw Error(fmt::format("{}: names no arm or no seed", path));
  // A label names a directory under runs/: letters, digits and '-' only (never "..").
  for (const CompareArm& a : p.arms) {
    if (a.label.empty() ||
        a.label.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
      throw Error(fmt::format("{}: arm '{}' is not an arm's name", path, a.label));
  }
  compare_baseline(p.arms, p.baseline);
  return p;
}

std::string run_dir(const CompareArm& arm, uint64_t seed) {
  return fmt::format("runs/{}/seed-{}", arm.label, seed);
}

// The train flags of one run, for a new run in DIR.
std::vector<std::string> new_run_args(const Plan& p, const CompareArm& arm, uint64_t seed,
                                      const std::string& out) {
  std::vector<std::string> args = {"train", "--out", out, "--seed", std::to_string(seed)};
  const std::vector<std::string> own = arm.train_flags();
  args.insert(args.end(), own.begin(), own.end());
  args.insert(args.end(), p.train_args.begin(), p.train_args.end());
  return args;
}

// Every arm's flags as train would take them, checked before anything runs: a setting train
// refuses for an arm (a flag of another recipe, a shape it cannot run) is named now.
void check_arms(const Plan& p, const std::string& dir) {
  set_parse_only(true);
  try {
    for (const CompareArm& arm : p.arms) {
      CLI::App app;
      add_train_command(app);
      std::vector<std::string> args =
          new_run_args(p, arm, p.seeds.front(), dir + "/" + run_dir(arm, p.seeds.front()));
      std::reverse(args.begin(), args.end());  // CLI11 takes them last first
      try {
        app.parse(args);
      } catch (const Error& e) {
        throw Error(fmt::format("arm {}: {}", arm.label, e.what()));
      } catch (const CLI::ParseError& e) {
        throw Error(fmt::format("arm {}: {}", arm.label, e.what()));
      }
    }
  } catch (...) {
    set_parse_only(false);
    throw;
  }
  set_parse_only(false);
  // train's own stop handlers, installed as it checked a run directory, are not compare's
  // (StopForwarding's are, while runs train).
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

// The flags every run shares, from what was given on the command line.
std::vector<std::string> shared_train_args(const CompareFlags& f, CLI::App* app) {
  std::vector<std::string> args;
  if (!f.config.empty()) args.insert(args.end(), {"--config", fs::absolute(f.config).string()});
  if (app->get_option("--device")->count() > 0) args.insert(args.end(), {"--device", f.device});
  if (f.checkpoint_every > 0)
    args.insert(args.end(), {"--checkpoint-every", std::to_string(f.checkpoint_every)});
  if (f.no_tensorboard) args.push_back("--no-tensorboard");
  for (const auto& [s, text] : given_settings(*f.settings, app)) {
    if (s->type == SettingType::Bool) {
      args.push_back(text == "true" ? s->flag() : "--no-" + std::string(s->name));
    } else {
      // A data path stays valid from wherever the runs start.
      args.insert(args.end(), {s->flag(), s->name == "data" ? fs::absolute(text).string() : text});
    }
  }
  return args;
}

enum class RunState { Done, Resume, New };

// Characters on screen of UTF-8 text ("±" is one).
size_t utf8_width(const std::string& s) {
  size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

RunState state_of(const std::string& dir) {
  if (fs::exists(dir + "/summary.json")) return RunState::Done;
  if (fs::exists(dir + "/config.json")) return RunState::Resume;
  return RunState::New;
}

void print_table(const Json& j) {
  const std::vector<std::vector<std::string>> table = comparison_table(j);
  std::vector<size_t> width(table.front().size(), 0);
  for (const auto& row : table)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], utf8_width(row[c]));
  fmt::print("\n");
  for (const auto& row : table) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - utf8_width(row[c]), ' ');
      line += c == 0 ? row[c] + pad : "  " + pad + row[c];  // the arm left, numbers right
    }
    fmt::print("{}\n", line);
  }
  if (const std::string note = shared_machine_note(j); !note.empty()) fmt::print("{}\n", note);
  fmt::print("\n");
  for (const Json& arm : j["arms"]) fmt::print("{}\n", arm["verdict"].get<std::string>());
  if (!j["roofline"].is_object() || j["roofline"].empty()) return;
  fmt::print(
      "\nwill FP8 pay off on a GPU? the step's FP8/BF16 speedup for this model, roofline "
      "estimate (fp8lm advise: GEMM by GEMM, with its assumptions):\n");
  for (const Json& arm : j["arms"]) {  // in the arms' order (a JSON object sorts its keys)
    const std::string label = arm["label"].get<std::string>();
    if (!j["roofline"].contains(label)) continue;
    const Json& gpus = j["roofline"][label];
    std::string line;
    for (const auto& [gpu, speedup] : gpus.items())
      line += fmt::format("{}{} {:.2f}x", line.empty() ? "" : " · ", gpu, speedup.get<double>());
    fmt::print("{}: {}\n", label, line);
  }
}

// Will the FP8 arms pay off on a GPU? Each FP8 arm's whole-step FP8/BF16 speedup for the runs'
// model on the datasheet GPUs (fp8lm advise shows it GEMM by GEMM).
Json roofline_of_arms(const Plan& p, const std::string& dir) {
  const std::string config = dir + "/" + run_dir(p.arms.front(), p.seeds.front()) + "/config.json";
  if (!fs::exists(config)) return nullptr;
  const TrainConfig c = train_config_from_json(read_input_file(config, "", kJsonFileBytes), config);
  Json out = Json::object();
  for (const CompareArm& arm : p.arms) {
    if (arm.recipe.empty()) continue;
    for (const GpuPeaks& gpu : datasheet_gpus())
      out[arm.label][gpu.name] = estimate_step(c, gpu, parse_scaling_kind(arm.recipe)).speedup();
  }
  return out;
}

// Whether the runs' flags name their threads: --threads, or a --config file that sets them.
bool names_threads(const Plan& p) {
  const auto& args = p.train_args;
  if (std::find(args.begin(), args.end(), "--threads") != args.end()) return true;
  const auto config = std::find(args.begin(), args.end(), "--config");
  if (config == args.end() || config + 1 == args.end()) return false;
  TrainConfig c;
  return apply_settings_json(c, read_json_file(*(config + 1), kJsonFileBytes), *(config + 1))
      .contains("threads");
}

// The --threads a new run gets beside the plan's flags: with --jobs N, a share of the CPUs for
// each of the N runs at once, unless the comparison names its runs' threads itself.
std::vector<std::string> threads_of_each_run(const CompareFlags& f, const Plan& p) {
  if (f.jobs == 1 || names_threads(p)) return {};
  return {"--threads", std::to_string(std::max<int64_t>(1, omp_get_num_procs() / f.jobs))};
}

int run_compare(const CompareFlags& f, CLI::App* app) {
  if (f.jobs < 1 || f.jobs > kMaxChildRuns)
    throw Error(
        fmt::format("--jobs {} must be 1 to {} (runs trained at once)", f.jobs, kMaxChildRuns));
  if (!f.out.empty() && !f.resume.empty())
    throw Error("--out and --resume name the comparison twice; --resume DIR finishes DIR");
  Plan plan;
  std::string dir = f.resume;
  if (!f.resume.empty()) {
    // How a comparison runs may change when it resumes; what it is may not.
    const std::set<std::string> kept = {"--resume", "--device", "--jobs"};
    for (const CLI::Option* o : app->get_options()) {
      if (o->count() > 0 && !kept.contains(o->get_name()))
        throw Error(fmt::format("--resume finishes the comparison as it was planned; drop {}",
                                o->get_name()));
    }
    plan = read_plan(dir);
  } else {
    plan.arms = compare_arms(
        {split_list(f.precisions, "--precision"),
         f.recipes.empty() ? std::vector<std::string>{} : split_list(f.recipes, "--recipe"),
         f.formats.empty() ? std::vector<std::string>{} : split_list(f.formats, "--fp8-format")});
    if (f.first_seed < 0) throw Error(fmt::format("--seed {} must be 0 or more", f.first_seed));
    plan.seeds = compare_seeds(static_cast<uint64_t>(f.first_seed), f.seeds);
    plan.baseline = compare_baseline(plan.arms, f.baseline);
    plan.train_args = shared_train_args(f, app);
    dir = f.out.empty() ? timestamped_run_dir() : f.out;
    check_arms(plan, dir);
    if (parse_only()) return 0;
  }
  Communicator& comm = world();
  comm.set_timeout(0);  // ranks finish their runs at different times
  const bool lead = comm.rank() == 0;
  // One process writes a comparison: its directory is claimed (new) or locked (resumed).
  std::unique_ptr<NewRunDir> claim;
  std::unique_ptr<RunLock> lock;
  if (lead && f.resume.empty()) {
    claim = std::make_unique<NewRunDir>(dir);
    write_text_atomic(dir + "/compare-plan.json", plan_json(plan).dump(2) + "\n");
    claim->keep();
  } else if (lead) {
    lock = std::make_unique<RunLock>(dir);
  }
  if (lead) {
    fs::create_directories(dir + "/logs");
    fmt::print(
        "comparing {} arms x {} seeds in {} (baseline {}){}; each run's output in {}/logs/\n",
        plan.arms.size(), plan.seeds.size(), dir, plan.baseline,
        f.jobs > 1 ? fmt::format(", {} runs at once", f.jobs) : "", dir);
  }
  // The plan written and logs/ made before any rank starts a run.
  double ready = 0.0;
  comm.all_reduce_sum(std::span<double>(&ready, 1), "compare: plan written");

  // Seed by seed, so that an early stop leaves whole seeds of every arm (with --jobs, the runs
  // in flight stop with checkpoints and resume).
  const std::vector<std::string> threads = threads_of_each_run(f, plan);
  double failed = 0.0;
  int index = 0;
  StopForwarding stops;
  struct Running {
    pid_t pid;
    std::string label, log;
    uint64_t seed;
  };
  std::vector<Running> running;
  const auto wait_for_one = [&] {
    std::vector<pid_t> pids;
    for (const Running& r : running) pids.push_back(r.pid);
    const EndedRun end = wait_for_run(pids);
    const Running r = running[end.index];
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(end.index));
    if (stops.signal() != 0) return;  // the run stopped with a checkpoint
    if (end.status != 0) {
      failed += 1.0;
      fmt::print(stderr, "{} seed {} failed (exit {}): see {}\n", r.label, r.seed, end.status,
                 r.log);
    }
  };
  const int total = static_cast<int>(plan.arms.size() * plan.seeds.size());
  for (const uint64_t seed : plan.seeds) {
    for (const CompareArm& arm : plan.arms) {
      const int i = index++;
      if (i % comm.size() != comm.rank()) continue;
      const std::string rel = run_dir(arm, seed), path = dir + "/" + rel;
      const std::string log = fmt::format("{}/logs/{}-seed-{}.log", dir, arm.label, seed);
      const RunState state = state_of(path);
      if (state == RunState::Done) continue;
      while (static_cast<int64_t>(running.size()) >= f.jobs) wait_for_one();
      if (stops.signal() != 0) continue;
      std::vector<std::string> args;
      if (state == RunState::Resume) {
        args = {"train", "--resume", path};
        if (app->get_option("--device")->count() > 0)
          args.insert(args.end(), {"--device", f.device});
      } else {
        fs::remove_all(path);  // a run stopped before it wrote its config: nothing in it yet
        fs::create_directories(fs::path(path).parent_path());
        args = new_run_args(plan, arm, seed, path);
        args.insert(args.end(), threads.begin(), threads.end());
      }
      fmt::print("[{}/{}] {} seed {}{}{}\n", i + 1, total, arm.label, seed,
                 state == RunState::Resume ? " (resuming)" : "",
                 comm.size() > 1 ? fmt::format(" on rank {}", comm.rank()) : "");
      std::fflush(stdout);
      running.push_back({start_fp8lm(args, log), arm.label, log, seed});
    }
  }
  while (!running.empty()) wait_for_one();
  if (const int stop = stops.signal(); stop != 0) {
    fmt::print(stderr,
               "stopped; the runs in progress checkpointed. Continue with: fp8lm compare "
               "--resume {}\n",
               dir);
    return 128 + stop;
  }
  comm.all_reduce_sum(std::span<double>(&failed, 1), "compare: runs done");
  if (!lead) return failed > 0 ? 1 : 0;

  Comparison c{plan.arms, plan.seeds, plan.baseline, {}, {}, f.jobs};
  for (const CompareArm& arm : plan.arms) {
    c.dirs.emplace_back();
    c.runs.emplace_back();
    for (const uint64_t seed : plan.seeds) {
      c.dirs.back().push_back(run_dir(arm, seed));
      c.runs.back().push_back(read_run_outcome(dir + "/" + run_dir(arm, seed)));
    }
  }
  Json summary = comparison_json(c);
  summary["roofline"] = roofline_of_arms(plan, dir);
  write_text_atomic(dir + "/compare.json", summary.dump(2) + "\n");
  write_text_atomic(dir + "/compare.html", comparison_page(c, summary));
  print_table(summary);
  fmt::print(
      "\nwrote {0}/compare.json and {0}/compare.html; TensorBoard overlays the runs: "
      "tensorboard --logdir {0}/runs\n",
      dir);
  if (failed > 0) {
    fmt::print(stderr, "error: {} of {} runs failed (their logs are in {}/logs/)\n",
               static_cast<int>(failed), total, dir);
    return 1;
  }
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "compare", "Train every precision/recipe arm on several seeds and compare them");
  auto f = std::make_shared<CompareFlags>();
  cmd->option_defaults()->group("Comparison");
  cmd->add_option("--precision", f->precisions, "precisions to compare, comma-separated")
      ->type_name("LIST");
  cmd->add_option("--recipe", f->recipes,
                  "FP8 recipes, comma-separated: delayed, current, block, mxfp8, nvfp4 "
                  "(default: delayed)")
      ->type_name("LIST");
  cmd->add_option("--fp8-format", f->formats,
                  "formats of the per-tensor recipes, comma-separated: e4m3, hybrid (default: "
                  "hybrid)")
      ->type_name("LIST");
  cmd->add_option("--seeds", f->seeds, "runs per arm, on seeds --seed, --seed + 1, ...")
      ->type_name("INT");
  cmd->add_option("--seed", f->first_seed, "the first seed")->type_name("INT");
  cmd->add_option("--baseline", f->baseline, "the arm gaps are measured against (default: bf16)")
      ->type_name("ARM");
  cmd->add_option("--out", f->out, "the comparison's directory (default: runs/<date>-<time>)")
      ->type_name("DIR");
  cmd->add_option("--resume", f->resume, "finish the comparison in this directory")
      ->type_name("DIR");
  cmd->add_option("--config", f->config, "JSON file of train settings every run starts from")
      ->type_name("FILE");
  cmd->add_option("--device", f->device, "auto: a GPU when one is present; cuda:N picks one")
      ->type_name("{auto,cpu,cuda,cuda:N}");
  cmd->add_option("--checkpoint-every", f->checkpoint_every,
                  "each run checkpoints every N steps (a killed comparison resumes from there)")
      ->type_name("INT");
  cmd->add_flag("--no-tensorboard", f->no_tensorboard, "no TensorBoard event files in the runs");
  cmd->add_option("--jobs", f->jobs,
                  "runs trained at once, each on the CPUs / N threads unless --threads or "
                  "--config sets them (their tokens/s then share the machine)")
      ->type_name("INT");
  // Every other train setting, passed to each run.
  add_setting_options(
      cmd, f->settings, [](const Setting& s) { return !kVaried.contains(std::string(s.name)); },
      [](const Setting&) { return "Train settings (every run)"; });
  cmd->callback([f, cmd] {
    const int code = run_compare(*f, cmd);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace fp8lm::cli
