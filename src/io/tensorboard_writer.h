#pragma once
// A run's metrics as TensorBoard event files (`tensorboard --logdir RUN/tb`): a file per writer
// (events.out.tfevents.<seconds>.<host>.<pid>.<n>), each record an Event
// (io/tensorboard_event.proto) framed as TFRecord (io/tfrecord.h) and appended whole, so a
// killed run leaves every record it wrote readable.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace fp8lm {

class TensorBoardWriter {
 public:
  // Creates dir (and its parents) and a new event file in it; Error naming it when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Every number of a metrics record as a scalar at `step`, in one Event: its key as the tag,
  // a nested object's keys joined by '/' ("fp8/blocks.0.attn.qkv/input/scale"); "step",
  // booleans, strings, arrays and nulls (a skipped step's loss) left out.
  void scalars(int64_t step, const nlohmann::json& record);
  // The finite ones of values as a histogram at `step`: 30 equal-width buckets over
  // [min, max] (one where they are all equal), bucket i counting (limit[i - 1], limit[i]].
  void histogram(int64_t step, const std::string& tag, std::span<const float> values);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace fp8lm
