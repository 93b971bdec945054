#pragma once
// The weights of a Hugging Face model directory as transformers saves them: one
// model.safetensors, or shards to which model.safetensors.index.json's weight_map maps each
// tensor; each tensor read whole and widened to FP32 exactly from F32, F16 or BF16. Files fp8lm
// wrote carry per-tensor checksums (io/safetensors.h), checked where present.
//
// A reader of its own, not io/safetensors.h's Safetensors: F16, the dtype most of the hub's
// checkpoints come in, is no DType of this engine (nothing here computes in it).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fp8lm {

class HfWeights {
 public:
  // model.safetensors where the directory has it, else the index and its shards. Error naming
  // the directory without either, a shard the index names that is missing, a tensor the index
  // maps to a file that lacks it, or a file that is not a well-formed safetensors file.
  static HfWeights open(const std::string& dir);

  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Error naming the tensor when missing.
  const std::vector<int64_t>& shape(const std::string& name) const;
  // The file that holds the tensor, for messages.
  const std::string& file(const std::string& name) const;
  // Its values widened to FP32 (exact: every F16 and BF16 value is a float). Error naming the
  // file, the tensor and its dtype for any other dtype, and a tensor that fails its checksum.
  std::vector<float> read_f32(const std::string& name) const;

  struct File;  // one safetensors file: its path, where its data begins, its checksums
  struct Tensor {
    std::shared_ptr<const File> file;
    std::string dtype;  // safetensors' name: "F32", "F16", "BF16", ...
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range in the file's data
  };

 private:
  std::map<std::string, Tensor> tensors_;
  const Tensor& at(const std::string& name) const;
};

}  // namespace fp8lm
