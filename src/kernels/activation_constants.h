#pragma once
// The constants of the activations' exp and GELU polynomial, shared by every backend's
// kernels (the CPU's scalar and AVX-512 twins, the CUDA kernels), so that they all run one
// algorithm on the same numbers and the CUDA results equal the CPU scalar twin's bits.
#include <numbers>

namespace fp8lm::act_const {

// GELU's gate is sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³), computed as 1 / (1 + exp(t))
// with t = -2u = x (kGateCubic x² + kGateLinear).
inline constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
inline constexpr double kGeluCubic = 0.044715;
inline constexpr float kGateLinear = static_cast<float>(-2 * kSqrt2OverPi);
inline constexpr float kGateCubic = static_cast<float>(-2 * kSqrt2OverPi * kGeluCubic);
// 2 du/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x²) = kSlopeCubic x² + kSlopeLinear.
inline constexpr float kSlopeLinear = static_cast<float>(2 * kSqrt2OverPi);
inline constexpr float kSlopeCubic = static_cast<float>(6 * kSqrt2OverPi * kGeluCubic);

// exp(t) = 2^n e^r with n = round(t / ln 2) and r = t - n ln 2, |r| <= ln(2) / 2.
// Below kExpMin, exp(t) is under half the smallest subnormal (it rounds to 0); above kExpMax
// it overflows to Inf. Clamping there keeps r in range and gives the gates their exact limits:
// 1 / (1 + Inf) = 0 and 1 / (1 + 0) = 1.
inline constexpr float kExpMin = -104.0f;
inline constexpr float kExpMax = 89.0f;
inline constexpr float kLog2e = 0x1.715476p+0f;
// Adding 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer (to nearest, ties to
// even), which also lands in the low mantissa bits.
inline constexpr float kRoundShift = 0x1.8p23f;
// ln 2 in two parts (Cody and Waite): kLn2Hi has 15 significant bits, so n * kLn2Hi is exact
// for |n| <= 151 and t - n * kLn2Hi is exact as well (Sterbenz), leaving all the rounding to
// the small kLn2Lo term.
inline constexpr float kLn2Hi = 0x1.62e4p-1f;
inline constexpr float kLn2Lo = 0x1.7f7d1cp-20f;
// e^r ~ 1 + r + r² (kExp2 + r (kExp3 + r (kExp4 + r (kExp5 + r kExp6)))): the bracket is a
// Chebyshev fit of (e^r - 1 - r) / r² on |r| <= ln(2) / 2, then rounded to float. Relative
// error of the polynomial (exact arithmetic, float coefficients) is below 2^-26.6, under a
// quarter of a float ulp, so float rounding in the evaluation dominates.
inline constexpr float kExp2 = 0.5f;
inline constexpr float kExp3 = 0x1.5554dep-3f;
inline constexpr float kExp4 = 0x1.55551ap-5f;
inline constexpr float kExp5 = 0x1.120b62p-7f;
inline constexpr float kExp6 = 0x1.6d10fcp-10f;

}  // namespace fp8lm::act_const
