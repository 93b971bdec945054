// libFuzzer target: a checkpoint whose metadata was edited — the model file's config JSON, step,
// precision, block_scales and checksum list, the training state's step, adamw_steps, seconds,
// skipped steps and data position — is either loaded (load_model, then block_scales as inspect
// reads them, then resume_trainer as `train --resume` does) or refused with fp8lm::Error; never
// a crash, hang, leak or undefined behaviour (ASan + UBSan). The tensors are those of a real
// tiny checkpoint written at start-up; the input edits its metadata, one record per key:
//   @model:KEY (or @state:KEY) on a line of its own, the value on the lines that follow;
//   @!model:KEY (or @!state:KEY) removes the key.
// The writer computes the checksum list, so an xxh3_64 record replaces it after the write.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"
#include "fuzz_files.h"
#include "io/block_scales.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace {

using Edits = std::map<std::string, std::optional<std::string>>;  // nullopt: remove the key

struct Records {
  Edits model, state;
};

Records parse_records(std::string_view in) {
  Records r;
  Edits* file = nullptr;
  std::string key, value;
  bool erase = false;
  const auto flush = [&] {
    if (file) (*file)[key] = erase ? std::nullopt : std::optional<std::string>(value);
    file = nullptr, value.clear();
  };
  while (!in.empty()) {
    const size_t end = in.find('\n');
    const std::string_view line = in.substr(0, end);
    in.remove_prefix(end == std::string_view::npos ? in.size() : end + 1);
    if (line.starts_with('@')) {
      flush();
      std::string_view head = line.substr(1);
      erase = head.starts_with('!');
      if (erase) head.remove_prefix(1);
      if (head.starts_with("model:")) file = &r.model, key = head.substr(6);
      if (head.starts_with("state:")) file = &r.state, key = head.substr(6);
    } else if (file) {
      value += value.empty() && line.empty() ? "" : (value.empty() ? "" : "\n");
      value += line;
    }
  }
  flush();
  return r;
}

// The checksum list as the edits say, put into the written header in place of the writer's.
void edit_checksums(const std::string& path, const Edits& edits) {
  const auto it = edits.find("xxh3_64");
  if (it == edits.end()) return;
  std::string bytes = fp8lm::read_input_file(path, "", int64_t{1} << 26);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  if (it->second)
    header["__metadata__"]["xxh3_64"] = *it->second;
  else
    header["__metadata__"].erase("xxh3_64");
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t m = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &m, 8);
  fp8lm::fuzz::write_file(path, out + text + bytes.substr(8 + n));
}

void write_edited(const fp8lm::Safetensors& base, const Edits& edits, const std::string& path) {
  fp8lm::SafetensorsWriter w;
  for (const std::string& name : base.names()) {
    const fp8lm::TensorData& t = base.at(name);
    w.add(name, t.dtype, t.shape, [bytes = t.bytes](const fp8lm::SafetensorsWriter::Sink& sink) {
      sink(bytes);
    });
  }
  w.metadata() = base.metadata();
  for (const auto& [key, value] : edits) {
    if (value)
      w.metadata()[key] = *value;
    else
      w.metadata().erase(key);
  }
  w.write(path);
  edit_checksums(path, edits);
}

struct Base {
  fp8lm::Safetensors model, state;
};

// A tiny FP8 model's checkpoint, as `train --checkpoint-every` writes one.
Base write_base() {
  const std::string dir = fp8lm::fuzz::scratch_dir("checkpoint") + "/base";
  fp8lm::TrainConfig c;
  c.model.vocab = 8, c.model.seq_len = 12, c.model.d_model = 8, c.model.n_layers = 1;
  c.model.n_heads = 1, c.model.ffn = 8;
  c.precision = fp8lm::Precision::Fp8;
  c.batch_size = 1;
  c.threads = 1;
  fp8lm::Trainer trainer(c);
  fp8lm::save_trainer(trainer, dir);
  return {fp8lm::Safetensors::read(dir + "/model.safetensors"),
          fp8lm::Safetensors::read(dir + "/train_state.safetensors")};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Base base = write_base();
  const std::string dir = fp8lm::fuzz::scratch_dir("checkpoint") + "/step-000001";
  const Records r = parse_records(std::string_view(reinterpret_cast<const char*>(data), size));
  std::filesystem::create_directories(dir);
  try {
    write_edited(base.model, r.model, dir + "/model.safetensors");
    write_edited(base.state, r.state, dir + "/train_state.safetensors");
  } catch (const fp8lm::Error&) {
    return 0;  // metadata the writer refuses is not a file anyone can be given
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    const fp8lm::LoadedModel m = fp8lm::load_model(dir + "/model.safetensors");
    const auto& meta = m.file.metadata();
    if (meta.count("block_scales")) {
      const auto j = fp8lm::parse_json(meta.at("block_scales"), "block_scales");
      if (j.is_object()) (void)fp8lm::block_scales_from_json(j, "block_scales");
    }
  } catch (const fp8lm::Error&) {
  }
  try {
    (void)fp8lm::resume_trainer(dir);
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
