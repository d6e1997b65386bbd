//===- tp_scalar_ops.h - scalar semantics of generated code -----*- C++ -*-===//
//
// The arith and math ops that C++ spells differently, as the C++ and CUDA
// model code both call them: maximumf/minimumf propagate NaN and order
// -0 < +0; floor division and integer powers as arith defines them; float
// to integer saturating (NaN gives 0). Selects, not branches, so that the
// loops around them vectorise (a bf16 result's saturation is two of them
// per element). TP_HD is __host__ __device__ in CUDA code, nothing else.
//
// This header travels inside every artifact (tp-compile writes it beside
// model.cpp / model.cu) and is compiled on its own by the unit tests
// (unittests/Runtime/MathTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TP_SCALAR_OPS_H
#define TP_SCALAR_OPS_H

#include <cmath>
#include <limits>

#ifndef TP_HD
#define TP_HD
#endif

namespace tp::math {

template <typename T> TP_HD T maximumF(T a, T b) {
  T r = a > b ? a : b;
  r = a == b ? (std::signbit(static_cast<float>(a)) ? b : a) : r;
  r = b != b ? b : r;
  return a != a ? a : r;
}
template <typename T> TP_HD T minimumF(T a, T b) {
  T r = a < b ? a : b;
  r = a == b ? (std::signbit(static_cast<float>(a)) ? a : b) : r;
  r = b != b ? b : r;
  return a != a ? a : r;
}
template <typename T> TP_HD T floorDiv(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> TP_HD T integerPow(T base, T exponent) {
  if (exponent < 0)
    return base == 1 ? 1 : (base == -1 ? (exponent % 2 ? -1 : 1) : 0);
  T result = 1;
  for (; exponent; exponent >>= 1, base *= base)
    if (exponent & 1)
      result *= base;
  return result;
}
template <typename To, typename From> TP_HD To fpToInt(From value) {
  if (value != value)
    return 0;
  if (value >= static_cast<From>(std::numeric_limits<To>::max()))
    return std::numeric_limits<To>::max();
  if (value <= static_cast<From>(std::numeric_limits<To>::lowest()))
    return std::numeric_limits<To>::lowest();
  return static_cast<To>(value);
}

} // namespace tp::math

#endif // TP_SCALAR_OPS_H
