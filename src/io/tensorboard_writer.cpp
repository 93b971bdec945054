#include "io/tensorboard_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/tensorboard_event.pb.h"
#include "io/tfrecord.h"

namespace fp8lm {
namespace {

double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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
  tensorboard::Event first;
  first.set_wall_time(seconds_since_epoch());
  first.set_file_version("brain.Event:2");
  append_whole(fd_, path_, tfrecord(first.SerializeAsString()));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::scalars(int64_t step, const nlohmann::json& record) {
  tensorboard::Event e;
  e.set_wall_time(seconds_since_epoch());
  e.set_step(step);
  add_numbers(*e.mutable_summary(), "", record);
  append_whole(fd_, path_, tfrecord(e.SerializeAsString()));
}

}  // namespace fp8lm
