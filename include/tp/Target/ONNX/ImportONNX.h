//===- ImportONNX.h - ONNX model to MLIR ------------------------*- C++ -*-===//
//
// Imports an ONNX model (binary protobuf or the ONNX text format) as
// `func.func @main` on static tensors in upstream dialects. Weights become
// arguments tagged `tp.weight`; their bytes are never read.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_ONNX_IMPORTONNX_H
#define TP_TARGET_ONNX_IMPORTONNX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace mlir::tp {

struct ONNXImportOptions {
  /// Static shapes for graph inputs, by input name; they replace dynamic
  /// (and static) dims declared in the model.
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Element types given with them (`name=1x128:i64`): what a TorchScript
  /// input is, which the file does not say; for an ONNX model they must
  /// match the declared types.
  llvm::StringMap<std::string> inputTypes;
  /// Constants the import computes (shape arithmetic, masks built from
  /// ranges) are folded up to this many elements; bigger ones stay IR. A
  /// prefill chunk's causal mask, [batch, 1, chunk, context], is raised
  /// past it so that tp-kv-cache sees it as a table.
  int64_t maxFoldedElements = 1 << 16;
  /// A rank-2 float initializer holding the values of an earlier one, or of
  /// its transpose (an exporter's second copy of a tied parameter), is
  /// imported as that one's value instead of a weight of its own, and
  /// listed in `tp.tied_weights` on the module (tp-compile --train, so
  /// that a tied parameter trains as one). Initializers whose values are
  /// all equal (a zero-initialized matrix) are never tied.
  bool tieWeights = false;
};

/// The ONNX element type named by an `--input-shape` type suffix (f32, f16,
/// bf16, f64, i64, i32, bool); 0 for any other name.
int32_t getElementTypeByName(llvm::StringRef name);

/// Parses `--input-shape` values of the form `name=1x128` (a scalar input is
/// `name=`), optionally with an element type, `name=1x128:i64` (f32, f16,
/// bf16, f64, i64, i32, bool). Returns false and sets `error` on malformed
/// text.
bool parseInputShape(llvm::StringRef text, ONNXImportOptions &options,
                     std::string &error);

/// Imports the ONNX model stored at `path` (binary `.onnx`, or text
/// `.onnxtxt`). Diagnostics go to the context's handler; returns null on
/// failure.
OwningOpRef<ModuleOp> importONNXFile(llvm::StringRef path, MLIRContext *context,
                                     const ONNXImportOptions &options);

/// Imports a model whose bytes are already in memory; `path` names the file
/// (for diagnostics and to locate external data).
OwningOpRef<ModuleOp> importONNXBuffer(llvm::StringRef bytes,
                                       llvm::StringRef path,
                                       MLIRContext *context,
                                       const ONNXImportOptions &options);

/// True when `bytes` begin like a zip archive, TorchScript's container:
/// such files go through tp-import-torchscript (the TorchScript frontend)
/// and then this importer, wherever a model path is accepted.
bool isTorchScriptFile(llvm::StringRef bytes);

/// Registers the dialects an imported module uses.
void registerONNXImportDialects(DialectRegistry &registry);

/// Registers `--import-onnx` (with `--input-shape`) for tp-translate.
void registerImportONNXTranslation();

/// A graph input as the model declares it (initializers listed as inputs
/// left out): each dim its size, or -1 where it is symbolic or missing.
struct ONNXGraphInput {
  std::string name;
  llvm::SmallVector<int64_t> dims;
  /// The dim's symbolic name (dim_param), empty where the dim is static.
  llvm::SmallVector<std::string> dimParams;
};

/// Reads the declared inputs of the model at `path` without importing it.
/// Diagnostics go to the context's handler.
FailureOr<llvm::SmallVector<ONNXGraphInput>>
readONNXGraphInputs(llvm::StringRef path, MLIRContext *context);

/// The ONNX op types that the importer converts.
llvm::SmallVector<llvm::StringRef> getSupportedONNXOps();

} // namespace mlir::tp

#endif // TP_TARGET_ONNX_IMPORTONNX_H
