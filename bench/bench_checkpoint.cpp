// Issue 12 (9): what saving and loading a checkpoint costs at scale, against the machine.
// Trains a few steps of one configuration (by default the seed's D_MODEL=2048 / N_LAYERS=12,
// fp8, seq 128, batch 2), then saves a checkpoint and loads it into a fresh trainer. For each
// it reports how much the operation added to peak RSS (VmHWM, reset just before it through
// /proc/self/clear_refs) as a share of the model's state, and its speed as a share of `dd`'s
// sequential write (conv=fsync) and read speed measured beside it: dd copies the checkpoint's
// own files in the same directory, and every read starts with the files out of the page cache.
// Prints a human line per phase, then one JSON line.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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

// Drops a file's pages from the page cache, so the next read comes from the disk.
void drop_cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double run_seconds(const std::string& command) {
  const auto t0 = std::chrono::steady_clock::now();
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  return seconds_since(t0);
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
    const double rss_trained = status_bytes("VmRSS");
    reset_peak();
    auto t0 = std::chrono::steady_clock::now();
    fp8lm::save_trainer(*trainer, ckpt);
    const double save_s = seconds_since(t0);
    const double save_added = status_bytes("VmHWM") - rss_trained;
    const double bytes = dir_bytes(ckpt);
    // dd beside it, on the same bytes (zeros would flatter a disk that stores them sparsely) and
    // with the same memory in use (the trainer still held): the checkpoint's files copied to
    // dd-* and flushed (conv=fsync); read back cold further down, beside the load.
    double dd_write_s = 0, dd_read_s = 0;
    const char* const files[] = {"model.safetensors", "train_state.safetensors"};
    for (const char* f : files) {
      dd_write_s += run_seconds(
          fmt::format("dd if={}/{} of={}/dd-{} bs=1M conv=fsync status=none", ckpt, f, dir, f));
    }
    trainer.reset();

    for (const char* f : {"/model.safetensors", "/train_state.safetensors"}) drop_cached(ckpt + f);
    fp8lm::Trainer loaded(fp8lm::checkpoint_config(ckpt));
    for (const char* f : files) {
      const std::string copy = fmt::format("{}/dd-{}", dir, f);
      drop_cached(copy);
      dd_read_s += run_seconds(fmt::format("dd if={} of=/dev/null bs=1M status=none", copy));
      fs::remove(copy);
    }
    const double rss_built = status_bytes("VmRSS");
    reset_peak();
    t0 = std::chrono::steady_clock::now();
    for (const char* f : {"/model.safetensors", "/train_state.safetensors"})
      (void)fp8lm::Safetensors::read(ckpt + f);  // map and verify only: the disk's part
    const double verify_s = seconds_since(t0);
    for (const char* f : {"/model.safetensors", "/train_state.safetensors"}) drop_cached(ckpt + f);
    t0 = std::chrono::steady_clock::now();
    loaded.restore_progress(fp8lm::load_checkpoint(ckpt, loaded.model(), loaded.optimizer()));
    const double load_s = seconds_since(t0);
    const double load_added = status_bytes("VmHWM") - rss_built;
    fs::remove_all(dir);

    const double gb = 1e9, dd_write = bytes / dd_write_s, dd_read = bytes / dd_read_s;
    fmt::print(
        "model: {:.0f}M parameters, {}; state (weights + 2 moments) {:.2f} GB; checkpoint "
        "{:.2f} GB\n",
        static_cast<double>(c.model.parameter_count()) / 1e6, precision, state / gb, bytes / gb);
    fmt::print(
        "save: {:.1f} s, {:.0f} MB/s = {:.0f}% of dd's {:.0f} MB/s; peak RSS {:.2f} GB -> "
        "+{:.3f} GB ({:.1f}% of the state)\n",
        save_s, bytes / save_s / 1e6, 100 * bytes / save_s / dd_write, dd_write / 1e6,
        rss_trained / gb, save_added / gb, 100 * save_added / state);
    fmt::print(
        "load: {:.1f} s (mapping and verifying alone: {:.1f} s), {:.0f} MB/s = {:.0f}% of dd's "
        "{:.0f} MB/s; peak RSS {:.2f} GB -> +{:.3f} GB ({:.1f}% of the state)\n",
        load_s, verify_s, bytes / load_s / 1e6, 100 * bytes / load_s / dd_read, dd_read / 1e6,
        rss_built / gb, load_added / gb, 100 * load_added / state);
    fmt::print(
        R"({{"parameters": {}, "precision": "{}", "state_bytes": {:.0f}, "checkpoint_bytes": {:.0f}, )"
        R"("save_s": {:.3f}, "save_rss_before": {:.0f}, "save_rss_added": {:.0f}, "dd_write_Bps": {:.0f}, )"
        R"("load_s": {:.3f}, "load_rss_before": {:.0f}, "load_rss_added": {:.0f}, "dd_read_Bps": {:.0f}}})"
        "\n",
        c.model.parameter_count(), precision, state, bytes, save_s, rss_trained, save_added,
        dd_write, load_s, rss_built, load_added, dd_read);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
