#pragma once
// safetensors files (a little-endian u64 header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw data), as any safetensors tool reads them.
//
// Writes stream: each tensor's bytes come from its source when its turn comes, straight to the
// file, so a save holds at most one tensor beyond the model (a 605M-parameter model's state is
// ~7 GB; a byte image of it would not fit beside it). Atomic: temp file, fsync, rename.
// Reads map the file and view each tensor in place (small tensors, inspection); a load reads
// each large tensor once into its home through a TensorReader.
//
// Integrity (io/safetensors_integrity.h): the metadata key "xxh3_64" holds every tensor's XXH3-64
// (16 hex digits, a JSON object by name) and, under "__header__", the XXH3-64 of the header itself
// (the tensor table and every other metadata entry), so that neither the data nor what the metadata
// says of it (a model's config, a checkpoint's step) changes unseen. Files of format version 2
// ("fp8lm_format_version", what every file written now says) must carry both; older files and
// other tools' load without them (integrity() says what was verified). The reader validates
// the header, and every tensor's checksum before handing out its view, so a truncated,
// corrupted or foreign file is a one-line Error, never a crash, and a flipped bit is an Error
// naming the tensor.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "io/safetensors_integrity.h"

namespace fp8lm {

struct TensorData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // into the file's mapping (or its parsed copy)

  int64_t numel() const;
  std::vector<float> to_f32() const;  // F32, BF16, F8_* decoded (exact); Error otherwise
};

// When a mapped file's tensors are checked against their checksums.
enum class Verify {
  // All of them before read() returns: a damaged file is refused whole, before any use.
  AtOpen,
  // Each when first used (at(), or a TensorReader as it reads), so a load reads the disk once.
  // For loads into fresh objects that are dropped when a later tensor turns out damaged.
  OnFirstUse,
};

class Safetensors;

// One tensor of a file read once, front to back, into its final home: each piece comes from
// the file (pread, as `dd` reads, not page faults of the mapping), is hashed and optionally
// checked for non-finite F32 values while still in cache, and the checksum is compared at
// finish(). For large tensors: nothing beyond the caller's piece is held.
class TensorReader {
 public:
  enum class Check { Checksum, ChecksumAndFinite };
  TensorReader(const Safetensors& file, const std::string& name, Check check);
  TensorReader(const TensorReader&) = delete;
  TensorReader& operator=(const TensorReader&) = delete;
  ~TensorReader();

  DType dtype() const;
  const std::vector<int64_t>& shape() const;
  uint64_t bytes() const;
  // Fills piece with the tensor's next bytes (Error past its end, or on a read error).
  void read(std::span<uint8_t> piece);
  // Error unless every byte was read and they match the checksum (the pieces handed out are
  // then to be thrown away); whether they are all finite F32 values, when asked.
  [[nodiscard]] bool finish();

 private:
  const Safetensors& file_;
  std::string name_;
  const TensorData& t_;
  off_t offset_;  // of the tensor's first byte in the file
  Check check_;
  uint64_t done_ = 0;
  bool finite_ = true;
  void* hash_ = nullptr;  // XXH3_state_t, when the tensor is still to be verified
};

class Safetensors {
 public:
  // Parses and validates a whole file held in memory (copied); `origin` names it in errors.
  static Safetensors parse(std::span<const uint8_t> file, const std::string& origin);
  // Maps the file; Error if it is not a regular file or fails validation.
  static Safetensors read(const std::string& path, Verify verify = Verify::AtOpen);
  // Only the header's metadata (no tensor is read or verified; the header's own checksum is).
  static std::map<std::string, std::string> read_metadata(const std::string& path);

  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Error naming the file and tensor when it is missing or (checked on first use) damaged.
  // Not thread-safe under Verify::OnFirstUse.
  const TensorData& at(const std::string& name) const;
  // A tensor's values, then its pages dropped from memory: for reading large tensors once
  // without the mapped file adding to the resident set.
  std::vector<float> take_f32(const std::string& name) const;
  // Drops a mapped tensor's pages once it has been copied out; the view stays valid (read
  // again from the file if used).
  void release(const TensorData& t) const;
  std::vector<std::string> names() const;  // in the file's order
  // Where a tensor's bytes begin in the file (Error when missing): loads go in this order, so
  // that the disk reads front to back.
  uint64_t position(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& origin() const { return origin_; }
  Integrity integrity() const { return metadata_integrity(metadata_); }

 private:
  friend class TensorReader;
  static Safetensors parse_views(std::span<const uint8_t> file, const std::string& origin,
                                 std::shared_ptr<const void> storage, int fd);
  const TensorData& entry(const std::string& name) const;  // unverified; Error when missing
  void read_checksums(const nlohmann::json& header);
  void verify(const std::string& name, const TensorData& t) const;
  // Error unless the digest is the tensor's checksum; then it counts as verified.
  void check_digest(const std::string& name, uint64_t digest) const;
  void advise(const TensorData& t, int advice) const;  // madvise over its pages, when mapped

  std::string origin_;
  std::shared_ptr<const void> storage_;  // keeps the mapping or the copy alive
  int fd_ = -1;                          // of a mapped file (owned by storage_); -1 for a copy
  const uint8_t* data_ = nullptr;        // the file's first byte, in the mapping or copy
  std::map<std::string, TensorData> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::string> checksums_;  // by tensor; empty for a file without them
  mutable std::set<std::string> verified_;
};

// A safetensors file to be written, tensor by tensor from their sources.
class SafetensorsWriter {
 public:
  using Sink = std::function<void(std::span<const uint8_t>)>;
  // Called once, during write, with a sink for the tensor's bytes in order (any number of
  // calls). It may throw Error: the write stops and leaves no file.
  using Source = std::function<void(const Sink&)>;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Source source);
  // A small tensor, held until the write.
  void add_f32(const std::string& name, std::vector<int64_t> shape, std::vector<float> v);
  std::map<std::string, std::string>& metadata() { return metadata_; }
  // Streams to path.tmp, fsyncs it, renames it over path, and fsyncs the directory.
  void write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    Source source;
    uint64_t bytes() const;
  };
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace fp8lm
