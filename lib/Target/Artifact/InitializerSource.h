//===- InitializerSource.h - bytes of one ONNX initializer ------*- C++ -*-===//
//
// Reads any byte range of an initializer in row-major little-endian order,
// whether it is stored as raw_data, typed fields or external data, so that
// the artifact writer can stream a tensor without ever holding all of it.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ARTIFACT_INITIALIZERSOURCE_H
#define TP_LIB_TARGET_ARTIFACT_INITIALIZERSOURCE_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <string>

namespace mlir::tp::artifact {

/// The safetensors name and byte width of an ONNX element type; width 0 for
/// types that safetensors cannot hold (strings, complex).
struct ElementKind {
  StringRef safetensorsName;
  unsigned bytes = 0;
};
ElementKind getElementKind(int32_t onnxDataType);

class InitializerSource {
public:
  /// Prepares to read `tensor`; external data is checked (inside
  /// `modelDir`, long enough) and opened. Diagnostics go to `loc`. With
  /// `stored` F16 or BF16 for an f32 tensor, reads give its values in that
  /// type, rounded to nearest even (tp-compile --dtype).
  static FailureOr<std::unique_ptr<InitializerSource>>
  open(const onnx::TensorProto &tensor, StringRef modelDir, Location loc,
       ElementKind stored = {});
  ~InitializerSource();

  uint64_t size() const { return numBytes; }
  unsigned elementBytes() const {
    return narrowTo.bytes ? narrowTo.bytes : kind.bytes;
  }

  /// Copies bytes [offset, offset + length) of the tensor into `dst`. Both
  /// are multiples of the element size. Returns false (with `error` set) on
  /// an I/O failure.
  bool read(uint64_t offset, uint64_t length, char *dst, std::string &error);

private:
  InitializerSource(const onnx::TensorProto &tensor) : tensor(tensor) {}
  /// read() in the initializer's own type.
  bool readSource(uint64_t offset, uint64_t length, char *dst,
                  std::string &error);
  void readTypedFields(uint64_t firstElement, uint64_t count, char *dst);

  const onnx::TensorProto &tensor;
  ElementKind kind;      // as stored in the initializer
  ElementKind narrowTo;  // what read() gives, when it converts
  uint64_t numBytes = 0; // of what read() gives
  std::string externalPath;
  uint64_t externalOffset = 0;
  int fd = -1;
};

} // namespace mlir::tp::artifact

#endif // TP_LIB_TARGET_ARTIFACT_INITIALIZERSOURCE_H
