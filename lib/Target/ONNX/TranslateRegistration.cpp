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
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include "onnx/onnx_pb.h"

using namespace mlir;

int32_t mlir::tp::getElementTypeByName(StringRef name) {
  return llvm::StringSwitch<int32_t>(name)
      .Case("f32", onnx::TensorProto::FLOAT)
      .Case("f16", onnx::TensorProto::FLOAT16)
      .Case("bf16", onnx::TensorProto::BFLOAT16)
      .Case("f64", onnx::TensorProto::DOUBLE)
      .Case("i64", onnx::TensorProto::INT64)
      .Case("i32", onnx::TensorProto::INT32)
      .Case("bool", onnx::TensorProto::BOOL)
      .Default(0);
}

bool mlir::tp::parseInputShape(StringRef text, ONNXImportOptions &options,
                               std::string &error) {
  auto [name, spec] = text.rsplit('=');
  if (name.empty() || !text.contains('=')) {
    error =
        "expected name=DIMS (e.g. input_ids=1x128), got '" + text.str() + "'";
    return false;
  }
  auto [dims, type] = spec.split(':');
  if (spec.contains(':')) {
    if (!getElementTypeByName(type)) {
      error = "unknown element type '" + type.str() + "' in --input-shape '" +
              text.str() + "'; use f32, f16, bf16, f64, i64, i32 or bool";
      return false;
    }
    options.inputTypes[name] = type.str();
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
      llvm::cl::desc("Static shape of a model input, e.g. input_ids=1x128, "
                     "and its type where the model does not say it "
                     "(TorchScript), e.g. input_ids=1x128:i64 (repeatable; "
                     "used with --import-onnx and --import-torchscript)"),
      llvm::cl::value_desc("name=DIMS[:TYPE]"));
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
  TranslateToMLIRRegistration torchscript(
      "import-torchscript",
      "import a TorchScript module (torch.jit.trace/script, saved with "
      "torch.jit.save)",
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
        StringRef path = buffer->getBufferIdentifier();
        if (!isTorchScriptFile(buffer->getBuffer())) {
          emitError(FileLineColLoc::get(context, path, 0, 0))
              << "'" << path
              << "' is not a TorchScript file (not a zip archive; save the "
                 "model with torch.jit.save)";
          return nullptr;
        }
        auto module =
            importONNXBuffer(buffer->getBuffer(), path, context, options);
        return OwningOpRef<Operation *>(module.release());
      },
      [](DialectRegistry &registry) { registerONNXImportDialects(registry); });
}
