// libFuzzer target: any bytes given as a config are either read into a valid TrainConfig or
// refused with fp8lm::Error, never a crash or undefined behaviour. Both readers: the config a
// checkpoint stores (train_config_from_json, with a round trip through train_config_to_json)
// and the user's `train --config FILE` (through the real command line in parse-only mode).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "cli/commands.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const fp8lm::TrainConfig c = fp8lm::train_config_from_json(text, "fuzz");
    c.validate();
    const fp8lm::TrainConfig again =
        fp8lm::train_config_from_json(fp8lm::train_config_to_json(c), "round trip");
    if (fp8lm::train_config_to_json(again) != fp8lm::train_config_to_json(c)) __builtin_trap();
  } catch (const fp8lm::Error&) {
  }
  static const std::string path = "/tmp/fp8lm_fuzz_config_" + std::to_string(getpid()) + ".json";
  std::ofstream(path, std::ios::binary) << text;
  std::string a0 = "fp8lm", a1 = "train", a2 = "--config", a3 = path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  fp8lm::cli::set_parse_only(true);
  (void)fp8lm::cli::run(4, argv);
  return 0;
}
