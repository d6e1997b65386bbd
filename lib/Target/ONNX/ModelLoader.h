//===- ModelLoader.h - reading ONNX model files -----------------*- C++ -*-===//
//
// Parses a model (binary or text format) and checks its external-data
// references without reading them.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ONNX_MODELLOADER_H
#define TP_LIB_TARGET_ONNX_MODELLOADER_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <vector>

namespace mlir::tp::onnx_import {

/// Parses `bytes` as a binary ModelProto, or as the ONNX text format when
/// `path` ends in `.onnxtxt` or the bytes are text.
LogicalResult parseModel(StringRef bytes, StringRef path, Location loc,
                         onnx::ModelProto &model);

/// Where an external initializer's bytes live.
struct ExternalLocation {
  std::string file; // relative to the model's folder
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// Reads the external_data entries of `tensor`; fails (with a diagnostic
/// naming the tensor) on locations outside `modelDir`, missing files, or
/// files too short for the tensor. Never reads the data itself.
FailureOr<ExternalLocation> checkExternalData(const onnx::TensorProto &tensor,
                                              StringRef modelDir,
                                              uint64_t expectedBytes,
                                              Location loc);

} // namespace mlir::tp::onnx_import

#endif // TP_LIB_TARGET_ONNX_MODELLOADER_H
