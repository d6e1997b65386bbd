//===- Reduce.cpp - elementwise reductions of raw buffers -----------------===//
//
// One loop per (element type, reduction), chosen once per call so that the
// inner loop has no switch in it. Buffers come from other ranks and need not
// be aligned for their type, hence the memcpy loads and stores.
//
//===----------------------------------------------------------------------===//

#include "Reduce.h"

#include "tp/Runtime/HalfFloat.h"

#include <cstring>
#include <type_traits>

using namespace tp::rt;

namespace {

/// Unsigned type in which T's sum and product wrap around without undefined
/// behaviour; at least unsigned int, so that promotion keeps it unsigned.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                    std::make_unsigned_t<T>>;

template <typename T> T add(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<WrapType<T>>(a) +
                          static_cast<WrapType<T>>(b));
  else
    return a + b;
}

template <typename T> T multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<WrapType<T>>(a) *
                          static_cast<WrapType<T>>(b));
  else
    return a * b;
}

template <typename T, typename Combine>
void combineAll(char *accumulator, const char *operand, int64_t count,
                Combine combine) {
  for (int64_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, accumulator + i * sizeof(T), sizeof(T));
    std::memcpy(&b, operand + i * sizeof(T), sizeof(T));
    T result = combine(a, b);
    std::memcpy(accumulator + i * sizeof(T), &result, sizeof(T));
  }
}

template <typename T>
void reduceTyped(Reduction op, char *accumulator, const char *operand,
                 int64_t count) {
  switch (op) {
  case Reduction::Sum:
    return combineAll<T>(accumulator, operand, count, add<T>);
  case Reduction::Product:
    return combineAll<T>(accumulator, operand, count, multiply<T>);
  case Reduction::Max:
    return combineAll<T>(accumulator, operand, count,
                         [](T a, T b) { return a < b ? b : a; });
  case Reduction::Min:
    return combineAll<T>(accumulator, operand, count,
                         [](T a, T b) { return b < a ? b : a; });
  }
}

/// f16 and bf16: each pair is combined in f32 and rounded back, as NCCL
/// reduces them.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float),
          typename Combine>
void combineHalf(char *accumulator, const char *operand, int64_t count,
                 Combine combine) {
  for (int64_t i = 0; i < count; ++i) {
    uint16_t a, b;
    std::memcpy(&a, accumulator + 2 * i, 2);
    std::memcpy(&b, operand + 2 * i, 2);
    uint16_t result = FromFloat(combine(ToFloat(a), ToFloat(b)));
    std::memcpy(accumulator + 2 * i, &result, 2);
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduceHalf(Reduction op, char *accumulator, const char *operand,
                int64_t count) {
  auto run = [&](auto combine) {
    combineHalf<ToFloat, FromFloat>(accumulator, operand, count, combine);
  };
  switch (op) {
  case Reduction::Sum:
    return run([](float a, float b) { return a + b; });
  case Reduction::Product:
    return run([](float a, float b) { return a * b; });
  case Reduction::Max:
    return run([](float a, float b) { return a < b ? b : a; });
  case Reduction::Min:
    return run([](float a, float b) { return b < a ? b : a; });
  }
}

} // namespace

bool tp::rt::detail::canReduce(DType type) { return type != DType::Bool; }

void tp::rt::detail::reduceInto(DType type, Reduction op, void *accumulator,
                                const void *operand, int64_t count) {
  auto *a = static_cast<char *>(accumulator);
  auto *b = static_cast<const char *>(operand);
  switch (type) {
  case DType::F32:
    return reduceTyped<float>(op, a, b, count);
  case DType::F64:
    return reduceTyped<double>(op, a, b, count);
  case DType::I64:
    return reduceTyped<int64_t>(op, a, b, count);
  case DType::I32:
    return reduceTyped<int32_t>(op, a, b, count);
  case DType::I16:
    return reduceTyped<int16_t>(op, a, b, count);
  case DType::I8:
    return reduceTyped<int8_t>(op, a, b, count);
  case DType::U8:
    return reduceTyped<uint8_t>(op, a, b, count);
  case DType::F16:
    return reduceHalf<f16ToFloat, floatToF16>(op, a, b, count);
  case DType::BF16:
    return reduceHalf<bf16ToFloat, floatToBF16>(op, a, b, count);
  case DType::Bool:
    break;
  }
  throw Error("cannot reduce bool values");
}
