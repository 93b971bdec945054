// libFuzzer target: any byte string given to the checkpoint reader either parses into tensors
// whose every view is in bounds, or is refused with fp8lm::Error — never a crash, leak or
// undefined behaviour (built with ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fp8lm/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fp8lm::Safetensors st = fp8lm::Safetensors::parse(std::span(data, size), "fuzz");
    for (const std::string& name : st.names()) {
      const fp8lm::TensorData& t = st.at(name);
      if (t.dtype != fp8lm::DType::I64 && t.dtype != fp8lm::DType::U8 && t.numel() < (1 << 20))
        (void)t.to_f32();
    }
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
