//===- ModelSignature.h - what a model library says it needs ----*- C++ -*-===//
//
// The text a generated model library returns from tp_model_signature()
// (format in tp/Runtime/ArtifactFormat.h): the grid and the dtype and shape
// of every argument and result of each stage function. Both emitters
// compile it into the library; the runtime compares it with manifest.json.
// A library of its own (TPModelSignature): code generation links it, not
// the artifact writer and the ONNX parser behind that.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_ARTIFACT_MODELSIGNATURE_H
#define TP_TARGET_ARTIFACT_MODELSIGNATURE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::tp {

/// The stage functions of a partitioned module, in stage order: @main
/// without a pipeline, else the functions tagged tp.stage 0 .. P-1. Emits a
/// diagnostic and fails when they are missing or duplicated.
FailureOr<SmallVector<func::FuncOp>> getStageFunctions(ModuleOp module);

/// One prefill chunk program of a generation artifact: its length in tokens
/// and its stage functions (tp.prefill_stage 0 .. P-1), in stage order.
struct PrefillChunk {
  int64_t length = 0;
  SmallVector<func::FuncOp> stages;
};

/// The prefill chunk programs of a generation artifact (functions tagged
/// tp.prefill_chunk and tp.prefill_stage), by ascending length; empty when
/// it has none. Fails, with a diagnostic, on missing or duplicated stages.
FailureOr<SmallVector<PrefillChunk>> getPrefillChunks(ModuleOp module);

/// The signature text of a partitioned module: a line per stage function,
/// then one per prefill stage function, chunk by chunk.
FailureOr<std::string> getModelSignature(ModuleOp module);

/// Prints the C definition of tp_model_signature() returning
/// getModelSignature(module), or "" for a module that is not partitioned
/// (no @grid), which no artifact holds. Fails as getModelSignature does.
LogicalResult emitModelSignature(ModuleOp module, llvm::raw_ostream &os);

namespace artifact {
/// "F32", "I64", "BOOL", ... for an MLIR element type: the dtype names of
/// the signature and of manifest.json.
std::string getDTypeName(Type type);
} // namespace artifact

} // namespace mlir::tp

#endif // TP_TARGET_ARTIFACT_MODELSIGNATURE_H
