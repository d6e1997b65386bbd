//===- HalfFloat.h - f16 and bf16 bits to and from float --------*- C++ -*-===//
//
// Conversions between float and the bit patterns of the 16-bit float types,
// rounding to nearest even: the compiler uses them to narrow weights as it
// writes them (tp-compile --dtype), the runtime to reduce f16 and bf16
// buffers in f32, as NCCL does.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_HALFFLOAT_H
#define TP_RUNTIME_HALFFLOAT_H

#include <cstdint>
#include <cstring>

namespace tp::rt {

inline float bf16ToFloat(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

inline uint16_t floatToBF16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if (value != value) // a quiet NaN of the same sign
    return static_cast<uint16_t>((word >> 16) | 0x40);
  return static_cast<uint16_t>((word + 0x7FFF + ((word >> 16) & 1)) >> 16);
}

inline float f16ToFloat(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, sizeof(half));
  return static_cast<float>(half);
}

inline uint16_t floatToF16(float value) {
  _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, sizeof(bits));
  return bits;
}

} // namespace tp::rt

#endif // TP_RUNTIME_HALFFLOAT_H
