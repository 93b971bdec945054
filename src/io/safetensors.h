#pragma once
// safetensors files (a little-endian u64 header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw data), as any safetensors tool reads them. The
// reader validates everything before handing out a view, so a truncated, corrupted or foreign
// file is a one-line Error, never a crash; writes are atomic (temp file, fsync, rename).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp8lm {

struct TensorData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  std::vector<float> to_f32() const;  // F32, BF16, F8_* decoded (exact); Error otherwise
};

class Safetensors {
 public:
  // Parses and validates a whole file held in memory; `origin` names it in errors.
  static Safetensors parse(std::span<const uint8_t> file, const std::string& origin);
  static Safetensors read(const std::string& path);

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    add(name, DType::F32, std::move(shape), v.data());
  }
  // Writes to path.tmp, fsyncs it, renames it over path, and fsyncs the directory.
  void write(const std::string& path) const;

  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Error naming the file and tensor when it is missing.
  const TensorData& at(const std::string& name) const;
  const std::map<std::string, TensorData>& tensors() const { return tensors_; }
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::map<std::string, TensorData> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes bytes to path atomically: temp file beside it, fsync, rename, fsync of the directory.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace fp8lm
