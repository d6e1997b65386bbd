//===- EmitCpp.h - partitioned module to C++ source -------------*- C++ -*-===//
//
// Turns the SPMD module that tp-parallelize produces into readable C++ for
// one rank: one C++ function per func.func, BLAS calls for contractions,
// loop nests for every other linalg.generic, and calls into
// tp::rt::RankContext (include/tp/Runtime/RankContext.h) for collectives.
// The library exports one symbol, tp_model_query (the C ABI of
// tp_model_abi.h), which reaches every public function as a stage.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_EMIT_EMITCPP_H
#define TP_TARGET_EMIT_EMITCPP_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace mlir::tp {

/// Rewrites named linalg ops (except linalg.fill) into linalg.generic, the
/// one form the emitters lower, then fuses elementwise chains into loop
/// nests of bounded size (FuseElementwise.cpp), and records each op's
/// kernel for `target` (selectKernels). Both targets emit the result.
/// Idempotent.
LogicalResult prepareForEmission(ModuleOp module, StringRef target = "cpu");

/// Writes #tp.kernel on every linalg.generic of `module` (and the reshapes
/// a fused attention folds in): how the `target` emitter (cpu or cuda)
/// runs it (tp-select-kernels, SelectKernels.cpp).
LogicalResult selectKernels(ModuleOp module, StringRef target);

/// Emits `module` (already prepared) as C++ to `os`. Ops the emitter cannot
/// lower are reported as errors at their location.
LogicalResult emitCpp(ModuleOp module, llvm::raw_ostream &os);

struct BuildOptions {
  /// The C++ compiler; empty: $CXX, else c++ on PATH.
  std::string compiler;
  /// Flags for the generated code (appended after the defaults).
  std::string extraFlags;
  /// Where built libraries are kept for identical builds to reuse (empty:
  /// nowhere; tp-compile --build-cache).
  std::string cacheDir;
  /// Polled while the compiler runs: true kills it and fails the build.
  std::function<bool()> interrupted;
};

/// Writes `<outDir>/model.cpp` (the emitted program for a copy of
/// `module`), `<outDir>/tp_runtime.h`, and compiles them into
/// `<outDir>/libmodel.so` linked with OpenBLAS. Returns the file names.
LogicalResult buildCpuLibrary(ModuleOp module, StringRef outDir,
                              const BuildOptions &options, std::string &source,
                              std::string &library);

/// Registers `tp-translate --emit-cpp`.
void registerEmitCppTranslation();

} // namespace mlir::tp

#endif // TP_TARGET_EMIT_EMITCPP_H
