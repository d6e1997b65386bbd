//===- TorchScriptLoader.h - TorchScript files through the ONNX path -*- C++
//-*-===//
//
// A TorchScript file (a zip archive) is converted by tp-import-torchscript,
// a separate program because libtorch is heavy to load (see
// include/tp/Target/TorchScript/TorchScriptToONNX.h), into a ModelProto
// whose weights point into the archive; the ONNX importer does the rest.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ONNX_TORCHSCRIPTLOADER_H
#define TP_LIB_TARGET_ONNX_TORCHSCRIPTLOADER_H

#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/IR/Location.h"

#include "onnx/onnx_pb.h"

namespace mlir::tp::onnx_import {

/// Converts the TorchScript file at `path`: the whole graph for the input
/// shapes in `options`, or with `options` null only its inputs and weights
/// (what the artifact writer reads). Diagnostics go to `loc`.
LogicalResult loadTorchScript(StringRef path, const ONNXImportOptions *options,
                              Location loc, onnx::ModelProto &model);

} // namespace mlir::tp::onnx_import

#endif // TP_LIB_TARGET_ONNX_TORCHSCRIPTLOADER_H
