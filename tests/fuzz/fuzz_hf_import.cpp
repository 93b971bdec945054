// libFuzzer target: a Hugging Face model directory as `fp8lm import` reads it — config.json
// (read_hf_config) and model.safetensors.index.json with the shard it names (HfWeights) — is
// either read into a valid model config and readable weights, or refused with fp8lm::Error;
// never a crash, hang, leak or undefined behaviour (ASan + UBSan). The input is config.json,
// "\n#index\n", then the index; beside them model-00001-of-00001.safetensors holding "a" (F32
// [2, 2]) and "b" (BF16 [3]).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fp8lm/error.h"
#include "fuzz_files.h"
#include "io/hf_config.h"
#include "io/hf_weights.h"

namespace {

std::string shard_bytes() {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);  // little-endian, as the machines fp8lm runs on
  out += header;
  const float a[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  out.append(reinterpret_cast<const char*>(a), sizeof a);
  out += std::string("\x80\x3f\x00\x40\x80\xbf", 6);  // 1, 2, -1 in BF16
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string shard = shard_bytes();
  const std::string& dir = fp8lm::fuzz::scratch_dir("hf_import");
  const auto parts = fp8lm::fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "\n#index\n", 2);
  fp8lm::fuzz::write_file(dir + "/config.json", parts[0]);
  if (parts.size() > 1) fp8lm::fuzz::write_file(dir + "/model.safetensors.index.json", parts[1]);
  fp8lm::fuzz::write_file(dir + "/model-00001-of-00001.safetensors", shard);
  try {
    (void)fp8lm::read_hf_config(dir);
  } catch (const fp8lm::Error&) {
  }
  try {
    const fp8lm::HfWeights w = fp8lm::HfWeights::open(dir);
    for (const char* name : {"a", "b", "model.embed_tokens.weight"}) {
      if (!w.contains(name)) continue;
      (void)w.shape(name);
      (void)w.file(name);
      (void)w.read_f32(name);
    }
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
