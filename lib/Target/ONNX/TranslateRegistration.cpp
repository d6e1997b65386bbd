//===- TranslateRegistration.cpp - tp-translate --import-onnx -------------===//
//
// Registers the ONNX importer with mlir-translate's driver, with the
// `--input-shape name=1x128` option that pins dynamic input dims.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

bool mlir::tp::parseInputShape(StringRef text, ONNXImportOptions &options,
                               std::string &error) {
  auto [name, dims] = text.rsplit('=');
  if (name.empty() || !text.contains('=')) {
    error =
        "expected name=DIMS (e.g. input_ids=1x128), got '" + text.str() + "'";
    return false;
  }
  SmallVector<int64_t> shape;
  if (!dims.empty()) {
    SmallVector<StringRef> parts;
    dims.split(parts, 'x');
    for (StringRef part : parts) {
      int64_t d;
      if (part.trim().getAsInteger(10, d) || d < 0) {
        error = "bad dim '" + part.str() + "' in --input-shape '" + text.str() +
                "'; dims are non-negative integers joined by 'x'";
        return false;
      }
      shape.push_back(d);
    }
  }
  options.inputShapes[name] = std::move(shape);
  return true;
}

void mlir::tp::registerONNXImportDialects(DialectRegistry &registry) {
  registry.insert<TPDialect, func::FuncDialect, arith::ArithDialect,
                  math::MathDialect, linalg::LinalgDialect,
                  tensor::TensorDialect>();
}

OwningOpRef<ModuleOp>
mlir::tp::importONNXFile(StringRef path, MLIRContext *context,
                         const ONNXImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(UnknownLoc::get(context))
        << "cannot open '" << path << "': " << buffer.getError().message();
    return nullptr;
  }
  return importONNXBuffer((*buffer)->getBuffer(), path, context, options);
}

void mlir::tp::registerImportONNXTranslation() {
  static llvm::cl::list<std::string> inputShapes(
      "input-shape",
      llvm::cl::desc("Static shape of a model input, e.g. input_ids=1x128 "
                     "(repeatable; used with --import-onnx)"),
      llvm::cl::value_desc("name=DIMS"));
  TranslateToMLIRRegistration registration(
      "import-onnx", "import an ONNX model (binary or .onnxtxt text format)",
      [](llvm::SourceMgr &sourceMgr,
         MLIRContext *context) -> OwningOpRef<Operation *> {
        ONNXImportOptions options;
        for (const std::string &text : inputShapes) {
          std::string error;
          if (!parseInputShape(text, options, error)) {
            emitError(UnknownLoc::get(context)) << error;
            return nullptr;
          }
        }
        const llvm::MemoryBuffer *buffer =
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        auto module =
            importONNXBuffer(buffer->getBuffer(), buffer->getBufferIdentifier(),
                             context, options);
        return OwningOpRef<Operation *>(module.release());
      },
      [](DialectRegistry &registry) { registerONNXImportDialects(registry); });
}
