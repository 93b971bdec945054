#include "core/cpu_features.h"

#include <cpuid.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fp8lm/error.h"

namespace fp8lm {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return {};
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned reg, int n) {
  return (reg >> n) & 1u;
}

std::string brand_string() {
  if (cpuid(0x80000000u, 0).a < 0x80000004u) return "unknown x86-64 CPU";
  std::array<char, 49> brand{};
  for (unsigned i = 0; i < 3; ++i) {
    Regs r = cpuid(0x80000002u + i, 0);
    std::memcpy(brand.data() + 16 * i, &r, 16);
  }
  std::string s(brand.data());
  const auto first = s.find_first_not_of(' ');
  return first == std::string::npos ? "unknown x86-64 CPU" : s.substr(first);
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model = brand_string();
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;            // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;          // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  const Regs l7 = cpuid(7, 0);
  const Regs l7s1 = cpuid(7, 1);
  // AVX2 with FMA and F16C (every AVX2 CPU has both; the AVX2 kernels decode FP8 through FP16).
  f.avx2 = os_ymm && bit(l7.b, 5) && bit(l1.c, 12) && bit(l1.c, 29);
  f.avx512 = os_zmm && bit(l7.b, 16) && bit(l7.b, 17) && bit(l7.b, 30) && bit(l7.b, 31);
  f.avx512_bf16 = f.avx512 && bit(l7s1.a, 5);
  f.amx_bf16 = os_tiles && bit(l7.d, 24) && bit(l7.d, 22);
  return f;
}

// FP8LM_MAX_ISA applied to what the CPU has.
CpuFeatures capped(CpuFeatures f) {
  const char* env = std::getenv("FP8LM_MAX_ISA");
  if (!env || !*env) return f;
  const std::string cap = env;
  if (cap != "avx512" && cap != "avx2" && cap != "scalar")
    throw Error("FP8LM_MAX_ISA: '" + cap + "' is not avx512, avx2 or scalar");
  if (cap == "avx512") return f;
  const bool wider = f.avx512 || f.avx512_bf16 || f.amx_bf16 || (cap == "scalar" && f.avx2);
  f.avx512 = f.avx512_bf16 = f.amx_bf16 = false;
  if (cap == "scalar") f.avx2 = false;
  if (wider) f.capped = cap;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = capped(detect());
  return features;
}

}  // namespace fp8lm
