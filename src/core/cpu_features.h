#pragma once
// What this CPU (and the OS, which must save the wider registers) lets kernels use.
#include <string>

namespace fp8lm {

struct CpuFeatures {
  std::string model;    // brand string, e.g. "Intel(R) Xeon(R) Platinum 8480+"
  bool avx2 = false;    // with FMA and F16C, and the OS saving YMM state
  bool avx512 = false;  // F + BW + VL + DQ, and the OS saving ZMM state
  bool avx512_bf16 = false;
  bool amx_bf16 = false;  // AMX-TILE + AMX-BF16, and the OS offering tile state
  std::string capped;     // FP8LM_MAX_ISA's value where it removed something, else empty
};

// Read once (cpuid + xgetbv) and cached. FP8LM_MAX_ISA=avx2|scalar caps what kernels may use
// (avx512: no cap): the AVX-512 (and BF16, AMX) flags read as absent, so every dispatch takes
// the path a CPU without them takes; for testing and measuring those paths on a wider CPU
// (oneDNN's own dispatch is capped by its DNNL_MAX_CPU_ISA). `capped` names the cap in force.
// Throws Error for another value.
const CpuFeatures& cpu_features();

// BF16 GEMMs run natively (AVX512-BF16 dot products or AMX tiles) rather than emulated.
inline bool has_native_bf16(const CpuFeatures& f) {
  return f.avx512_bf16 || f.amx_bf16;
}

}  // namespace fp8lm
