//===- MathTest.cpp - the generated code's element types and math --------===//
//
// tp_math.h and tp_scalar_ops.h compiled on their own: exp, tanh and erf
// against double precision over their whole ranges, bf16 rounding, and the
// scalar semantics (NaN and signed zeros, floor division, powers, float to
// integer), with the tolerances each function's comment states.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/tp_math.h"

#include "gtest/gtest.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

using namespace tp::math;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint32_t bitsOf(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

TEST(MathTest, ExpWithinTwoUlpsOverItsRange) {
  double worstNormal = 0, worstSubnormal = 0;
  for (double x = -110; x <= 90; x += 7.3e-4) {
    float got = expF(static_cast<float>(x));
    double want = std::exp(static_cast<double>(static_cast<float>(x)));
    if (want > FLT_MAX) {
      EXPECT_EQ(got, kInf) << x;
    } else if (want >= FLT_MIN) {
      worstNormal = std::max(worstNormal, std::fabs(got - want) / want);
    } else {
      worstSubnormal = std::max(worstSubnormal, std::fabs(got - want));
    }
  }
  // 2 ulps of a normal float (2^-22 relative); within 2 of the smallest
  // subnormal below.
  EXPECT_LE(worstNormal, std::ldexp(1.0, -22));
  EXPECT_LE(worstSubnormal, 2 * std::ldexp(1.0, -149));
  EXPECT_EQ(expF(-200.0f), 0.0f);
  EXPECT_EQ(expF(0.0f), 1.0f);
  EXPECT_EQ(expF(kInf), kInf);
  EXPECT_EQ(expF(-kInf), 0.0f);
  EXPECT_TRUE(std::isnan(expF(kNaN)));
}

TEST(MathTest, TanhWithinStatedErrors) {
  double worstAbs = 0, worstRel = 0;
  for (double x = -20; x <= 20; x += 1.7e-4) {
    float xf = static_cast<float>(x);
    double want = std::tanh(static_cast<double>(xf));
    double err = std::fabs(tanhF(xf) - want);
    worstAbs = std::max(worstAbs, err);
    if (want != 0)
      worstRel = std::max(worstRel, err / std::fabs(want));
  }
  EXPECT_LE(worstAbs, 2e-7);
  EXPECT_LE(worstRel, 1e-6);
  // Beyond 9 it is tanh(9), 6e-8 below 1 in f32.
  EXPECT_NEAR(tanhF(kInf), 1.0f, 1e-7);
  EXPECT_NEAR(tanhF(-kInf), -1.0f, 1e-7);
  EXPECT_TRUE(std::signbit(tanhF(-0.0f)));
  EXPECT_TRUE(std::isnan(tanhF(kNaN)));
}

TEST(MathTest, ErfWithinStatedErrors) {
  double worstRel = 0;
  for (double x = -6; x <= 6; x += 1.3e-4) {
    float xf = static_cast<float>(x);
    double want = std::erf(static_cast<double>(xf));
    if (want != 0)
      worstRel =
          std::max(worstRel, std::fabs(erfF(xf) - want) / std::fabs(want));
  }
  EXPECT_LE(worstRel, 5e-7);
  EXPECT_EQ(erfF(10.0f), 1.0f);
  EXPECT_EQ(erfF(-10.0f), -1.0f);
}

TEST(MathTest, BFloat16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 and the next bf16 (1 + 2^-7): even.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even, up.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  // Just past halfway rounds up.
  EXPECT_EQ(static_cast<float>(
                BFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(BFloat16(kNaN).bits, 0x7FC0);
  EXPECT_EQ(static_cast<float>(BFloat16(kInf)), kInf);
  EXPECT_EQ(static_cast<float>(BFloat16(-2.5f)), -2.5f);
  // Past bf16's largest finite value, rounding gives infinity.
  EXPECT_EQ(static_cast<float>(BFloat16(FLT_MAX)), kInf);
  BFloat16 a(3.0f), b(0.0f);
  b = a;
  EXPECT_EQ(bitsOf(static_cast<float>(b)), bitsOf(3.0f));
}

TEST(MathTest, MaximumAndMinimumPropagateNaNAndOrderZeros) {
  EXPECT_TRUE(std::isnan(maximumF(kNaN, 1.0f)));
  EXPECT_TRUE(std::isnan(maximumF(1.0f, kNaN)));
  EXPECT_TRUE(std::isnan(minimumF(kNaN, 1.0f)));
  EXPECT_TRUE(std::isnan(minimumF(1.0f, kNaN)));
  EXPECT_FALSE(std::signbit(maximumF(-0.0f, 0.0f)));
  EXPECT_FALSE(std::signbit(maximumF(0.0f, -0.0f)));
  EXPECT_TRUE(std::signbit(minimumF(0.0f, -0.0f)));
  EXPECT_TRUE(std::signbit(minimumF(-0.0f, 0.0f)));
  EXPECT_EQ(maximumF(2.0f, -3.0f), 2.0f);
  EXPECT_EQ(minimumF(2.0f, -3.0f), -3.0f);
}

TEST(MathTest, FloorDivisionAndIntegerPowers) {
  EXPECT_EQ(floorDiv<int64_t>(-7, 2), -4);
  EXPECT_EQ(floorDiv<int64_t>(7, -2), -4);
  EXPECT_EQ(floorDiv<int64_t>(-8, 2), -4);
  EXPECT_EQ(floorDiv<int64_t>(7, 2), 3);
  EXPECT_EQ(integerPow<int64_t>(2, 10), 1024);
  EXPECT_EQ(integerPow<int64_t>(-3, 3), -27);
  EXPECT_EQ(integerPow<int64_t>(2, -1), 0);
  EXPECT_EQ(integerPow<int64_t>(1, -5), 1);
  EXPECT_EQ(integerPow<int64_t>(-1, -3), -1);
  EXPECT_EQ(integerPow<int64_t>(-1, -4), 1);
}

TEST(MathTest, FloatToIntegerSaturates) {
  EXPECT_EQ((fpToInt<int32_t, float>(kNaN)), 0);
  EXPECT_EQ((fpToInt<int32_t, float>(1e20f)),
            std::numeric_limits<int32_t>::max());
  EXPECT_EQ((fpToInt<int32_t, float>(-1e20f)),
            std::numeric_limits<int32_t>::lowest());
  EXPECT_EQ((fpToInt<int32_t, float>(3.7f)), 3);
  EXPECT_EQ((fpToInt<int32_t, float>(-3.7f)), -3);
  EXPECT_EQ((fpToInt<uint8_t, float>(-1.0f)), 0);
}

} // namespace
