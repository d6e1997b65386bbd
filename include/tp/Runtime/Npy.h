//===- Npy.h - reading and writing NumPy .npy files -------------*- C++ -*-===//
//
// The format tp-run uses for model inputs and outputs. Only what the runtime
// needs: little-endian arrays in C order of the types in DType.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_NPY_H
#define TP_RUNTIME_NPY_H

#include "tp/Runtime/RankContext.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tp::rt {

/// One array: NumPy's type string, its shape and its bytes in C order.
struct NpyArray {
  /// NumPy's type string, e.g. "<f4", "<i8", "|b1".
  std::string descr;
  /// Empty for a scalar.
  std::vector<int64_t> shape;
  std::vector<char> data;

  /// Product of the shape (1 for a scalar).
  int64_t elementCount() const {
    int64_t count = 1;
    for (int64_t dim : shape)
      count *= dim;
    return count;
  }
};

/// Reads a .npy file of format version 1.0, 2.0 or 3.0. Throws Error naming
/// `path` when the file cannot be read, is not a .npy file, is in Fortran
/// order, has a type outside DType, or has more or fewer bytes than its
/// shape needs.
NpyArray readNpy(const std::string &path);

/// Parses the bytes of a whole .npy file, as readNpy does; errors name
/// `name`.
NpyArray parseNpy(std::string_view bytes, const std::string &name);

/// Writes `array` as NumPy does: format 1.0 (2.0 if the header would not
/// fit), header padded so that the data starts at a multiple of 64 bytes.
/// Throws Error naming `path` when `array`'s type is outside DType, its data
/// does not match its shape, or the file cannot be written.
void writeNpy(const std::string &path, const NpyArray &array);

/// The DType of a .npy type string: <f4 F32, <f8 F64, <i8 I64, <i4 I32,
/// <i2 I16, |i1 I8, |u1 U8, |b1 Bool (one-byte types also with '<').
/// Sets `ok` to false, and returns F32, for any other string.
DType dtypeFromDescr(const std::string &descr, bool &ok);

/// The .npy type string NumPy writes for `type`.
std::string descrFromDType(DType type);

} // namespace tp::rt

#endif // TP_RUNTIME_NPY_H
