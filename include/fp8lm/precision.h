#pragma once
// Precision a run asks for (`--precision`) and what it got on its device
// (docs/reference/numerics.md).
#include <string>

namespace fp8lm {

enum class Precision { Auto, Fp8, Bf16, Fp32 };

struct PrecisionChoice {
  Precision precision = Precision::Fp32;
  bool emulated = false;      // computed faithfully without hardware support for the format
  std::string reason;         // one line: why this precision was chosen
  std::string label() const;  // e.g. "fp8 (emulated)"
};

}  // namespace fp8lm
