//===- FuzzImport.h - shared body of the ONNX importer fuzzers --*- C++ -*-===//
//
// Imports one input as an ONNX model named `path` (its extension picks the
// binary or the text reader). A diagnostic is the expected answer to a bad
// model; a crash, a sanitizer report, or a module that does not verify is a
// finding.
//
//===----------------------------------------------------------------------===//

#ifndef TP_FUZZ_FUZZIMPORT_H
#define TP_FUZZ_FUZZIMPORT_H

#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace tp::fuzz {

inline void importONNX(const uint8_t *data, size_t size, llvm::StringRef path) {
  static const mlir::DialectRegistry *registry = [] {
    auto *registry = new mlir::DialectRegistry();
    mlir::tp::registerONNXImportDialects(*registry);
    return registry;
  }();
  // A fresh context per input: nothing uniqued by one input changes how the
  // next one runs, so every finding reproduces alone.
  mlir::MLIRContext context(*registry, mlir::MLIRContext::Threading::DISABLED);
  // The importer verifies what it built and reports a failure as an
  // "internal error"; that is a bug, not an answer to bad input.
  mlir::ScopedDiagnosticHandler handler(&context, [](mlir::Diagnostic &diag) {
    if (llvm::StringRef(diag.str()).starts_with("internal error")) {
      llvm::errs() << "finding: " << diag.str() << "\n";
      std::abort();
    }
    return mlir::success();
  });
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::tp::importONNXBuffer(bytes, path, &context, {});
  if (module && failed(mlir::verify(*module))) {
    llvm::errs() << "finding: the imported module does not verify\n";
    std::abort();
  }
}

} // namespace tp::fuzz

#endif // TP_FUZZ_FUZZIMPORT_H
