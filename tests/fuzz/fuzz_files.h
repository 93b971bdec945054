#pragma once
// What the file-reading fuzz targets share: a directory of their own per process (in /dev/shm
// where there is one, so that writing every input is cheap), emptied for each input and removed
// at exit, and inputs cut into the files a reader takes.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm::fuzz {

inline std::string& directory_to_remove() {
  static std::string dir;
  return dir;
}

// An empty directory of this process's own (the same path on every call).
inline const std::string& scratch_dir(const std::string& target) {
  static const std::string dir = [&] {
    const std::string root = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string d = root + "/fp8lm_fuzz_" + target + "_" + std::to_string(getpid());
    directory_to_remove() = d;
    std::atexit([] { std::filesystem::remove_all(directory_to_remove()); });
    return d;
  }();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The input cut at each occurrence of `separator` (at most `parts` pieces; the last takes the
// rest), so that a seed is readable: a manifest, then "\n#shard\n", then a shard's bytes.
inline std::vector<std::string_view> split(std::string_view in, std::string_view separator,
                                           size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t at = in.find(separator);
    if (at == std::string_view::npos) break;
    out.push_back(in.substr(0, at));
    in.remove_prefix(at + separator.size());
  }
  out.push_back(in);
  return out;
}

}  // namespace fp8lm::fuzz
