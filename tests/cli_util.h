#pragma once
// The fp8lm binary as a user runs it, for the CLI tests: exit status, stdout and stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fp8lm {

struct CliResult {
  int status = -1;
  std::string out, err;
};

// Runs the fp8lm binary through the shell; stderr is captured in a temp file.
// `shell_prefix` runs first in the same shell (e.g. "ulimit -f 128;").
inline CliResult fp8lm(const std::string& args, const std::string& stdin_text = "",
                       const std::string& shell_prefix = "") {
  // One file per test process: ctest runs the CLI tests side by side.
  const std::string err_file =
      testing::TempDir() + "fp8lm_cli_stderr_" + std::to_string(getpid()) + ".txt";
  std::string cmd = std::string(FP8LM_BIN) + " " + args + " 2>" + err_file;
  cmd = "printf '%s' '" + stdin_text + "' | { " + shell_prefix + " " + cmd + "; }";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (FILE* e = fopen(err_file.c_str(), "r")) {
    while ((n = fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
    fclose(e);
  }
  return r;
}

// A shell prefix bounding the program's memory to 4 GB, so that a regression that reads without
// bound fails fast instead of filling the machine. Empty under AddressSanitizer, which reserves
// terabytes of address space for its shadow and cannot start under `ulimit -v`.
#if defined(__SANITIZE_ADDRESS__)
inline const std::string kMemoryLimit = "";
#else
inline const std::string kMemoryLimit = "ulimit -v 4000000;";
#endif

// The model most CLI runs train: small enough for a step in milliseconds.
inline const std::string kTinyModel =
    "--vocab 16 --seq-len 12 --d-model 32 --n-layers 1 --n-heads 2 --ffn 64 --batch-size 4 "
    "--threads 2 --device cpu";

// A file's bytes, whole (text or not).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh empty directory under the test temp dir.
inline std::string fresh(const std::string& name) {
  const std::string d = testing::TempDir() + "fp8lm_fresh_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Everything under dir, for "nothing on disk changed".
inline std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Every file under dir (path relative to it) and its bytes.
inline std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    m[std::filesystem::relative(e.path(), dir).string()] =
        std::string(std::istreambuf_iterator<char>(in), {});
  }
  return m;
}

// A run directory's files as files_of gives them, but for .lock: it holds the pid of the last
// process to train there, which changes with every attempt.
inline std::map<std::string, std::string> run_files(const std::string& dir) {
  std::map<std::string, std::string> m = files_of(dir);
  m.erase(".lock");
  return m;
}

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace fp8lm
