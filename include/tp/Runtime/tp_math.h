//===- tp_math.h - element types and math of generated C++ ------*- C++ -*-===//
//
// What model.cpp computes with beyond <cmath>: the f16 and bf16 storage
// types (arithmetic in float, results rounded to nearest even), and exp,
// erf and tanh for f32 without a libm call, so that the loops over them
// vectorise; plus the scalar semantics both targets share
// (tp_scalar_ops.h). The CUDA target has its own types and CUDA's fast
// functions instead.
//
// This header travels inside every CPU artifact (tp-compile writes it
// beside model.cpp) and is compiled on its own by the unit tests
// (unittests/Runtime/MathTest.cpp), which measure the functions against
// double precision.
//
//===----------------------------------------------------------------------===//

#ifndef TP_MATH_H
#define TP_MATH_H

#include "tp_scalar_ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tp::math {

using Float16 = _Float16;

// bfloat16 storage: arithmetic happens in float, results round to nearest
// even on the way back, as arith's bf16 ops do. Assignment copies the bits
// as a scalar: GCC sees a struct's implicit copy as a memory-to-memory copy,
// and a loop that stores one does not vectorise (a bf16 GELU ran scalar).
struct BFloat16 {
  std::uint16_t bits;
  BFloat16() = default;
  BFloat16(const BFloat16 &) = default;
  BFloat16 &operator=(const BFloat16 &other) {
    bits = other.bits;
    return *this;
  }
  BFloat16(float value) {
    std::uint32_t word;
    std::memcpy(&word, &value, sizeof(word));
    std::uint32_t rounded = (word + 0x7FFF + ((word >> 16) & 1)) >> 16;
    bits = static_cast<std::uint16_t>(value != value ? 0x7FC0u : rounded);
  }
  operator float() const {
    std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &word, sizeof(value));
    return value;
  }
};

// tanh for f32 without a libm call, so that loops over it vectorise (GELU's
// tanh dominated the non-GEMM time). e^x by Cody-Waite reduction and a
// degree-6 polynomial; measured against double-precision tanh over
// [-20, 20] in steps of 1e-5: max abs error 1.6e-7, max rel error 9.3e-7.
inline float expPositive(float x) {
  float n = std::nearbyint(x * 1.44269504088896341f);
  float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
  float p =
      1.0f +
      r * (1.0f + r * (0.5f + r * (0.166666671633720398f +
                                   r * (0.0416666455566883087f +
                                        r * (0.00833333376795053482f +
                                             r * 0.00138888892252445221f)))));
  std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
// e^x for f32 without a libm call, for the same reason (softmax's
// exponentials; glibc's expf also takes a slow path, and sets errno, for
// every masked score that underflows). expPositive's reduction, with 2^n
// applied in two steps so that results down to the smallest subnormal come
// out right; e^x rounds to 0 below -104 and overflows above 88.7228.
// Measured against double-precision exp (test/Numerics/math-accuracy.test).
inline float expF(float x) {
  float c = x < -104.0f ? -104.0f : (x > 88.75f ? 88.75f : x);
  // NaN compares false both ways: reduce 0 instead (a NaN converted to an
  // integer below is undefined), and return the NaN at the end.
  c = x != x ? 0.0f : c;
  float n = std::nearbyint(c * 1.44269504088896341f);
  float r = c - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
  // 1 + (r + r^2 q), the small terms summed first; q is Cephes' degree-5
  // minimax fit of (e^r - 1 - r) / r^2 on |r| <= ln 2 / 2.
  float q = 5.0000001201e-1f +
            r * (1.6666665459e-1f +
                 r * (4.1665795894e-2f +
                      r * (8.3334519073e-3f +
                           r * (1.3981999507e-3f + r * 1.9875691500e-4f))));
  float p = 1.0f + (r + r * r * q);
  std::int32_t k = static_cast<std::int32_t>(n);
  std::int32_t half = k / 2;
  std::int32_t bits1 = (half + 127) << 23, bits2 = (k - half + 127) << 23;
  float scale1, scale2;
  std::memcpy(&scale1, &bits1, sizeof(scale1));
  std::memcpy(&scale2, &bits2, sizeof(scale2));
  float y = p * scale1 * scale2;
  y = x < -104.0f ? 0.0f : y;
  y = x > 88.7228394f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}
// erf for f32 without a libm call (BERT's exact GELU): the rational
// approximation of Eigen and XLA, x P(x^2) / Q(x^2) on x clamped to
// [-4, 4] (erf(4) rounds to 1 in f32). Within 4.5e-7 relative
// (test/Numerics/math-accuracy.test).
inline float erfF(float x) {
  float c = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  float c2 = c * c;
  float p = -2.72614225801306e-10f;
  p = p * c2 + 2.77068142495902e-08f;
  p = p * c2 - 2.10102402082508e-06f;
  p = p * c2 - 5.69250639462346e-05f;
  p = p * c2 - 7.34990630326855e-04f;
  p = p * c2 - 2.95459980854025e-03f;
  p = p * c2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * c2 - 2.13374055278905e-04f;
  q = q * c2 - 1.68282697438203e-03f;
  q = q * c2 - 7.37332916720468e-03f;
  q = q * c2 - 1.42647390514189e-02f;
  return c * p / q;
}
inline float tanhF(float x) {
  float a = std::fabs(x);
  float a2 = a * a;
  // Near 0 the Taylor series avoids 1 - 2/(e+1)'s cancellation.
  float small =
      a * (1.0f + a2 * (-0.333333333f +
                        a2 * (0.133333333f +
                              a2 * (-0.0539682540f + a2 * 0.0218694885f))));
  // Beyond 9, tanh is within 6e-8 of 1 in f32.
  float large =
      1.0f - 2.0f / (expPositive(2.0f * (a < 9.0f ? a : 9.0f)) + 1.0f);
  float t = a < 0.125f ? small : large;
  return x != x ? x : std::copysign(t, x);
}

} // namespace tp::math

#endif // TP_MATH_H
