// Issue 12 (9): what saving and loading a checkpoint costs at scale, against the machine.
// Trains a few steps of one configuration (by default the seed's D_MODEL=2048 / N_LAYERS=12,
// fp8, seq 128, batch 2), then saves a checkpoint and loads it into a fresh trainer, --rounds
// times each. For each it reports how much the operation added to peak RSS (VmHWM, reset just
// before it through /proc/self/clear_refs) as a share of the model's state, and its speed as a
// share of `dd`'s sequential write (conv=fsync) and read speed measured beside it, in the same
// round: dd copies the checkpoint's own files in the same directory, and every read starts
// with the files out of the page cache. Prints a human line per phase, then one JSON line.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ranges>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "train/trainer.h"

namespace {

namespace fs = std::filesystem;

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM").
double status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) * 1024;
  return 0;
}

// Makes VmHWM the current RSS, so the next peak is the operation's own.
void reset_peak() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Drops a file's pages from the page cache, so the next read comes from the disk; as root,
// the whole clean page cache as well, so that neither side of a comparison finds any of its
// bytes (or the disk's metadata) in memory.
void drop_cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  std::ofstream("/proc/sys/vm/drop_caches") << "1";
}

double run_seconds(const std::string& command) {
  const auto t0 = std::chrono::steady_clock::now();
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  return seconds_since(t0);
}

const char* const kFiles[] = {"model.safetensors", "train_state.safetensors"};

// One operation's rounds, each timed beside dd on the same bytes.
struct Phase {
  std::vector<double> seconds, dd_seconds;
  double rss_before = 0, rss_added = 0;
  // One round: the operation (its time and what it added to peak RSS, VmHWM reset just before
  // it; prepare() runs untimed before it) and dd_file(f) on each of the checkpoint's files
  // (returns dd's seconds), back to back: the operation first in even rounds, dd first in odd.
  template <class Prepare, class Op, class DdFile>
  void round(int r, Prepare prepare, Op op, DdFile dd_file) {
    const auto time_op = [&] {
      prepare();
      const double rss = status_bytes("VmRSS");
      reset_peak();
      const auto t0 = std::chrono::steady_clock::now();
      op();
      seconds.push_back(seconds_since(t0));
      rss_before = rss;
      rss_added = std::max(rss_added, status_bytes("VmHWM") - rss);
    };
    const auto time_dd = [&] {
      double s = 0;
      for (const char* f : kFiles) s += dd_file(f);
      dd_seconds.push_back(s);
    };
    if (r % 2 == 0) {
      time_op();
      time_dd();
    } else {
      time_dd();
      time_op();
    }
  }
  std::vector<double> shares() const {  // the operation's speed as a share of dd's
    std::vector<double> out;
    for (size_t i = 0; i < seconds.size(); ++i) out.push_back(dd_seconds[i] / seconds[i]);
    return out;
  }
};

double median(std::vector<double> v) {
  std::ranges::sort(v);
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double dir_bytes(const std::string& dir) {
  double total = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) total += static_cast<double>(e.file_size());
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  fp8lm::TrainConfig c;
  c.model = {
      .vocab = 128, .seq_len = 128, .d_model = 2048, .n_layers = 12, .n_heads = 16, .ffn = 8192};
  c.batch_size = 2;
  c.steps = 3;
  c.threads = 2;
  c.evaluate = false;
  std::string precision = "fp8", dir = "build/bench_checkpoint";
  int rounds = 3;
  CLI::App app{"bench_checkpoint: peak RSS and speed of saving and loading a checkpoint"};
  app.add_option("--d-model", c.model.d_model);
  app.add_option("--n-layers", c.model.n_layers);
  app.add_option("--n-heads", c.model.n_heads);
  app.add_option("--ffn", c.model.ffn);
  app.add_option("--seq-len", c.model.seq_len);
  app.add_option("--batch-size", c.batch_size);
  app.add_option("--steps", c.steps, "training steps before the save");
  app.add_option("--precision", precision, "fp32|bf16|fp8");
  app.add_option("--threads", c.threads);
  app.add_option("--dir", dir, "where the checkpoint goes (removed at the end)");
  app.add_option("--rounds", rounds, "saves and loads, each timed beside dd")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    c.precision = fp8lm::parse_precision(precision);
    c.validate();
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string ckpt = dir + "/step";

    auto trainer = std::make_unique<fp8lm::Trainer>(c);
    for (int64_t i = 0; i < c.steps; ++i) trainer->train_step();
    const double state = static_cast<double>(c.model.parameter_count()) * 4 * 3;  // w, m, v
    const auto dd_copy = [&](const char* f) { return fmt::format("{}/dd-{}", dir, f); };
    // This VM's disk swings by 5x from one minute to the next, so each round times the
    // operation and dd back to back (in alternating order) and the ratio is taken per round.
    Phase save, load;
    for (int r = 0; r < rounds; ++r) {
      // dd copies the checkpoint's own files (zeros would flatter a disk that stores them
      // sparsely), from the page cache (read in first, untimed) to the disk, flushed. The
      // first round saves first, making the files dd copies.
      save.round(
          r, [] {}, [&] { fp8lm::save_trainer(*trainer, ckpt); },
          [&](const char* f) {
            run_seconds(fmt::format("cat {}/{} > /dev/null", ckpt, f));
            return run_seconds(
                fmt::format("dd if={}/{} of={} bs=1M conv=fsync status=none", ckpt, f, dd_copy(f)));
          });
    }
    const double bytes = dir_bytes(ckpt);
    trainer.reset();

    fp8lm::Trainer loaded(fp8lm::checkpoint_config(ckpt));
    for (int r = 0; r < rounds; ++r) {
      load.round(
          r,
          [&] {  // a cold read
            for (const char* f : kFiles) drop_cached(fmt::format("{}/{}", ckpt, f));
          },
          [&] {
            loaded.restore_progress(
                fp8lm::load_checkpoint(ckpt, loaded.model(), loaded.optimizer()));
          },
          [&](const char* f) {
            drop_cached(dd_copy(f));
            return run_seconds(fmt::format("dd if={} of=/dev/null bs=1M status=none", dd_copy(f)));
          });
    }
    fs::remove_all(dir);

    const double gb = 1e9;
    fmt::print(
        "model: {:.0f}M parameters, {}; state (weights + 2 moments) {:.2f} GB; checkpoint "
        "{:.2f} GB; {} rounds\n",
        static_cast<double>(c.model.parameter_count()) / 1e6, precision, state / gb, bytes / gb,
        rounds);
    for (const auto& [name, ph] : {std::pair{"save", &save}, std::pair{"load", &load}}) {
      fmt::print(
          "{}: {:.1f} s, {:.0f} MB/s; dd {:.1f} s, {:.0f} MB/s (medians); share of dd per round "
          "{:.0f}%, median {:.0f}%; peak RSS {:.2f} GB -> +{:.3f} GB ({:.1f}% of the state)\n",
          name, median(ph->seconds), bytes / median(ph->seconds) / 1e6, median(ph->dd_seconds),
          bytes / median(ph->dd_seconds) / 1e6,
          fmt::join(ph->shares() | std::views::transform([](double x) { return 100 * x; }), "%, "),
          100 * median(ph->shares()), ph->rss_before / gb, ph->rss_added / gb,
          100 * ph->rss_added / state);
    }
    fmt::print(
        R"({{"parameters": {}, "precision": "{}", "state_bytes": {:.0f}, "checkpoint_bytes": {:.0f}, )"
        R"("save_s": [{}], "save_dd_s": [{}], "save_rss_before": {:.0f}, "save_rss_added": {:.0f}, )"
        R"("load_s": [{}], "load_dd_s": [{}], "load_rss_before": {:.0f}, "load_rss_added": {:.0f}}})"
        "\n",
        c.model.parameter_count(), precision, state, bytes, fmt::join(save.seconds, ", "),
        fmt::join(save.dd_seconds, ", "), save.rss_before, save.rss_added,
        fmt::join(load.seconds, ", "), fmt::join(load.dd_seconds, ", "), load.rss_before,
        load.rss_added);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
