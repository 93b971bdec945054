#include "dist/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "dist/mpi_world.h"
#include "fp8lm/error.h"

namespace fp8lm {

namespace {

// A world of one: every collective leaves the buffer as it is.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(std::span<float>, std::string_view) override {}
  void all_reduce_sum(std::span<double>, std::string_view) override {}
  void all_reduce_max(std::span<float>, std::string_view) override {}
  void start_all_reduce_sum(std::span<float>, std::string_view) override {}
  void start_all_reduce_sum(std::span<bf16_t>, std::string_view) override {}
  void progress() override {}
  void wait_all() override {}
  void reduce_scatter_sum(std::span<const float> all, std::span<float> mine, std::span<const int>,
                          std::string_view) override {
    std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()), mine.begin());
  }
  void reduce_scatter_sum(std::span<const bf16_t> all, std::span<bf16_t> mine, std::span<const int>,
                          std::string_view) override {
    std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()), mine.begin());
  }
  void all_gather(std::span<float>, std::span<const int>, std::string_view) override {}
  void all_gather(std::span<uint8_t>, std::span<const int>, std::string_view) override {}
  void gather_to_first(std::span<const float> mine, std::span<float> all, std::span<const int>,
                       std::string_view) override {
    std::copy(mine.begin(), mine.end(), all.begin());
  }
  void set_timeout(double) override {}
  double timeout() const override { return 0; }
  Traffic traffic() const override { return {}; }
  void abort(int) override {}
  std::string describe() const override { return "single process"; }
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  int out = fallback;
  const std::string_view text(v);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() ? out : fallback;
}

}  // namespace

Launch detect_launch() {
  const struct {
    const char* size;
    const char* rank;
    const char* local_rank;
    const char* launcher;
  } launchers[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
      {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPICH (Hydra)"}};
  for (const auto& l : launchers) {
    const int size = env_int(l.size, 0);
    if (size >= 1) return {env_int(l.rank, 0), size, env_int(l.local_rank, 0), l.launcher};
  }
  return {};
}

namespace {
Communicator* g_world = nullptr;  // once world() made it
}  // namespace

Communicator& world() {
  static const std::unique_ptr<Communicator> w = []() -> std::unique_ptr<Communicator> {
    const Launch launch = detect_launch();
    if (launch.launcher.empty()) return nullptr;
    if (!mpi_built()) {
      if (launch.size == 1) return nullptr;
      throw Error(fmt::format(
          "launched as rank {} of {} by {}'s mpirun, but this fp8lm was built without MPI: "
          "install libopenmpi-dev (scripts/deps) and build again, or run one process",
          launch.rank, launch.size, launch.launcher));
    }
    return make_mpi_world();
  }();
  g_world = w ? w.get() : &single_process();
  return *g_world;
}

Communicator& single_process() {
  static SingleProcess one;
  return one;
}

void abort_world_on_error(int code) {
  if (g_world && g_world->size() > 1) g_world->abort(code);
}

}  // namespace fp8lm
