#include "io/tensorboard_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/tensorboard_event.pb.h"
#include "io/tfrecord.h"

namespace fp8lm {
namespace {

double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An Event stamped now, at step.
tensorboard::Event event_at(int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(seconds_since_epoch());
  e.set_step(step);
  return e;
}

void add_numbers(tensorboard::Summary& summary, const std::string& prefix,
                 const nlohmann::json& j) {
  for (const auto& [key, value] : j.items()) {
    const std::string tag = prefix.empty() ? key : prefix + "/" + key;
    if (value.is_object()) {
      add_numbers(summary, tag, value);
    } else if (value.is_number() && !(prefix.empty() && key == "step")) {
      tensorboard::Summary::Value* v = summary.add_value();
      v->set_tag(tag);
      v->set_simple_value(value.get<float>());
    }
  }
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // The last part tells apart the files one process opens within a second (a resumed run).
  static std::atomic<int> opened{0};
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}.{}", dir,
                      static_cast<int64_t>(seconds_since_epoch()), host, ::getpid(), opened++);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot create: {}", path_, std::strerror(errno)));
  tensorboard::Event first = event_at(0);
  first.set_file_version("brain.Event:2");
  append_whole(fd_, path_, tfrecord(first.SerializeAsString()));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::histogram(int64_t step, const std::string& tag,
                                  std::span<const float> values) {
  std::vector<double> finite;
  for (const float v : values)
    if (std::isfinite(v)) finite.push_back(v);
  if (finite.empty()) return;
  tensorboard::Event e = event_at(step);
  tensorboard::Summary::Value* value = e.mutable_summary()->add_value();
  value->set_tag(tag);
  tensorboard::HistogramProto& h = *value->mutable_histo();
  const auto [lo, hi] = std::minmax_element(finite.begin(), finite.end());
  const double min = *lo, max = *hi;
  const int buckets = max > min ? 30 : 1;
  std::vector<double> count(static_cast<size_t>(buckets), 0.0);
  double sum = 0, sum_squares = 0;
  for (const double v : finite) {
    // The bucket whose half-open interval (limit[i - 1], limit[i]] holds v.
    const double i = buckets == 1 ? 0.0 : std::ceil((v - min) / (max - min) * buckets) - 1.0;
    count[static_cast<size_t>(std::clamp(i, 0.0, buckets - 1.0))] += 1;
    sum += v;
    sum_squares += v * v;
  }
  h.set_min(min);
  h.set_max(max);
  h.set_num(static_cast<double>(finite.size()));
  h.set_sum(sum);
  h.set_sum_squares(sum_squares);
  for (int i = 0; i < buckets; ++i) {
    h.add_bucket_limit(i + 1 == buckets ? max : min + (max - min) * (i + 1) / buckets);
    h.add_bucket(count[static_cast<size_t>(i)]);
  }
  append_whole(fd_, path_, tfrecord(e.SerializeAsString()));
}

void TensorBoardWriter::scalars(int64_t step, const nlohmann::json& record) {
  tensorboard::Event e = event_at(step);
  add_numbers(*e.mutable_summary(), "", record);
  append_whole(fd_, path_, tfrecord(e.SerializeAsString()));
}

}  // namespace fp8lm
