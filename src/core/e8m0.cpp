#include "core/e8m0.h"

#include <cmath>

namespace fp8lm {

uint8_t e8m0_encode_round_up_reference(double x) {
  if (std::isnan(x) || x < 0.0) return kE8M0Nan;
  if (x == 0.0) return 0x00;
  // The smallest k with 2^k >= x, clamped to the codes' range [-127, 127].
  int k = std::ilogb(x);
  if (std::ldexp(1.0, k) < x) ++k;
  if (k < -127) k = -127;
  if (k > 127) k = 127;
  return static_cast<uint8_t>(k + 127);
}

}  // namespace fp8lm
