//===- Compile.h - ONNX model to artifact, as a library ---------*- C++ -*-===//
//
// What tp-compile does, callable in process: import, plan and split, write
// the artifact (and build its library). tp-compile is a command line over
// it; the Python module's tp_mlir.compile is another. Both take their
// options from CompileOptions.def (CompileOptions.h).
//
//===----------------------------------------------------------------------===//

#ifndef TP_DRIVER_COMPILE_H
#define TP_DRIVER_COMPILE_H

#include "tp/Driver/CompileOptions.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::tp {

/// The prefill chunk sizes when neither --prefill-chunks nor --prefill-len
/// is given: those below --max-seq (or --max-seq - 1 alone, when none is).
constexpr int64_t kDefaultPrefillChunks[] = {16, 64, 256};

/// The prefill chunk sizes `options` give, ascending: none without
/// generation or with --prefill-len 0; --prefill-len C alone; else
/// --prefill-chunks, by default kDefaultPrefillChunks below --max-seq.
std::vector<int64_t> getPrefillChunks(const CompileOptions &options);

/// Registers every dialect and extension compileModel needs.
void registerCompileDialects(DialectRegistry &registry);

/// Compiles `options.model` into the artifact folder `options.output`,
/// which is replaced only when the new one is complete. Every problem is
/// reported as a diagnostic of `context` (an error at an unknown location
/// for bad options) before failure is returned.
LogicalResult compileModel(MLIRContext &context, const CompileOptions &options);

/// One diagnostic as tp-compile prints it: "model.onnx: warning: at
/// '/h.0/attn/MatMul': message", one line per diagnostic and note, each
/// ending in a newline. `tool` stands in for a missing file name.
std::string formatDiagnostic(Diagnostic &diag, StringRef tool);

} // namespace mlir::tp

#endif // TP_DRIVER_COMPILE_H
