#include "io/data_fingerprint.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <xxhash.h>

#include "core/input_file.h"
#include "fp8lm/error.h"
#include "train/token_shards.h"

namespace fp8lm {
namespace {

constexpr uint64_t kEnd = uint64_t{1} << 20;  // the first and the last MiB of a text file

struct FileEnds {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string xxh3;  // of the first kEnd bytes then the last kEnd (the whole of a small file)
};

FileEnds file_ends(const std::string& path, uint64_t end_bytes) {
  const InputFile file(path, "");  // a regular file only: a FIFO given as data never blocks
  const int fd = file.fd();
  struct stat sb {};
  if (::fstat(fd, &sb) != 0)
    throw Error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  FileEnds f;
  f.size = file.size();
  f.mtime_ns = int64_t{sb.st_mtim.tv_sec} * 1000000000 + sb.st_mtim.tv_nsec;
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                       &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state.get());
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(end_bytes, f.size)));
  const auto hash_range = [&](uint64_t offset, uint64_t n) {
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        throw Error(fmt::format("{}: cannot read: {}", path,
                                r < 0 ? std::strerror(errno) : "the file shrank while read"));
      }
      got += static_cast<size_t>(r);
    }
    XXH3_64bits_update(state.get(), buf.data(), n);
  };
  hash_range(0, buf.size());
  if (f.size > end_bytes) {  // the last MiB, or what follows the first
    const uint64_t from = std::max(end_bytes, f.size - end_bytes);
    hash_range(from, f.size - from);
  }
  f.xxh3 = fmt::format("{:016x}", XXH3_64bits_digest(state.get()));
  return f;
}

std::string field_text(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? j[key].dump() : "none";
}

}  // namespace

nlohmann::json data_fingerprint(const std::string& path) {
  if (path.empty()) return nullptr;
  if (is_token_dataset(path)) {
    // Both are small and decide every token id: read whole.
    constexpr uint64_t kWhole = uint64_t{1} << 40;
    const std::string tokenizer = path + "/" + read_manifest(path).tokenizer;
    return {{"path", path},
            {"manifest_xxh3", file_ends(path + "/manifest.json", kWhole).xxh3},
            {"tokenizer_xxh3", file_ends(tokenizer, kWhole).xxh3}};
  }
  const FileEnds f = file_ends(path, kEnd);
  return {{"path", path}, {"size", f.size}, {"mtime_ns", f.mtime_ns}, {"xxh3_ends", f.xxh3}};
}

std::string data_changes(const nlohmann::json& recorded, const nlohmann::json& now) {
  const bool was_dataset = recorded.contains("manifest_xxh3");
  if (was_dataset != now.contains("manifest_xxh3"))
    return was_dataset ? "a token dataset then, not now" : "a text file then, a token dataset now";
  std::vector<std::string> changes;
  const auto differs = [&](const char* key) {
    return field_text(recorded, key) != field_text(now, key);
  };
  if (was_dataset) {
    if (differs("manifest_xxh3")) changes.push_back("its manifest.json");
    if (differs("tokenizer_xxh3")) changes.push_back("its tokenizer");
  } else {
    if (differs("size"))
      changes.push_back(fmt::format("size {} -> {} bytes", field_text(recorded, "size"),
                                    field_text(now, "size")));
    if (differs("mtime_ns")) changes.push_back("modification time");
    if (differs("xxh3_ends")) changes.push_back("the content of its first or last MiB");
  }
  return fmt::format("{}", fmt::join(changes, ", "));
}

}  // namespace fp8lm
