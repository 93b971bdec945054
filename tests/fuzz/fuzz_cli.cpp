// libFuzzer target: any command line (the input split at NUL bytes into arguments) is parsed
// and checked by the real fp8lm command line in parse-only mode (train builds and validates its
// config; nothing is read, written or trained) and ends in an exit status: never a crash, an
// uncaught exception or undefined behaviour (built with ASan + UBSan, preset fuzz).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"fp8lm"};
  std::string arg;
  for (size_t i = 0; i < size && args.size() < 32; ++i) {
    if (data[i] == 0) {
      args.push_back(arg);
      arg.clear();
    } else {
      arg += static_cast<char>(data[i]);
    }
  }
  if (!arg.empty() && args.size() < 32) args.push_back(arg);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  fp8lm::cli::set_parse_only(true);
  (void)fp8lm::cli::run(static_cast<int>(args.size()), argv.data());
  return 0;
}
