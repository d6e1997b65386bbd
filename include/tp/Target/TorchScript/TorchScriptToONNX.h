//===- TorchScriptToONNX.h - TorchScript module to an ONNX graph -*- C++
//-*-===//
//
// The TorchScript frontend's first half, built only where libtorch is found
// and linked only into tp-import-torchscript (libtorch loads ~290 shared
// libraries; the other tools run it as a subprocess). It loads a module
// with libtorch, freezes and inlines it, types every value by running the
// graph once on inputs of the given shapes, and translates each aten op
// into ONNX nodes, as torch.onnx's symbolic functions do. The ONNX
// importer then makes the same `func.func @main` of it as of an exported
// model. Parameters and buffers become initializers whose external data
// points into the TorchScript archive itself (its records are stored
// uncompressed), so that the artifact writer streams them from there.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_TORCHSCRIPT_TORCHSCRIPTTOONNX_H
#define TP_TARGET_TORCHSCRIPT_TORCHSCRIPTTOONNX_H

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tp::torchscript {

/// A `forward()` argument as the user pins it: its shape and ONNX element
/// type (0: the type the trace recorded, else one its uses make certain,
/// else assumed, with a warning; see InputTypes.cpp).
struct InputSpec {
  std::vector<int64_t> shape;
  int32_t elementType = 0;
};

struct ConvertOptions {
  std::map<std::string, InputSpec> inputs;
  /// Only the graph inputs (untyped) and the initializers: what the
  /// artifact writer needs. No shapes are required and nothing is run.
  bool weightsOnly = false;
};

/// Converts the TorchScript file at `path`. On failure returns false with
/// `error` set to a message that names the file and, where there is one,
/// the op and its source range. On success, `warnings` (if given) gets one
/// line for each thing the user should know, such as an input type that
/// was assumed; each names the file.
bool convertTorchScript(const std::string &path, const ConvertOptions &options,
                        onnx::ModelProto &model, std::string &error,
                        std::vector<std::string> *warnings = nullptr);

/// The aten ops the frontend converts ("aten::linear", ...), sorted.
std::vector<std::string> supportedAtenOps();

} // namespace tp::torchscript

#endif // TP_TARGET_TORCHSCRIPT_TORCHSCRIPTTOONNX_H
