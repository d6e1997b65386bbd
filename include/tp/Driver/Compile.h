//===- Compile.h - ONNX model to artifact, as a library ---------*- C++ -*-===//
//
// What tp-compile does, callable in process: import, plan and split, write
// the artifact (and build its library). tp-compile is a command line over
// it; the Python module's tp_mlir.compile is another.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DRIVER_COMPILE_H
#define TP_DRIVER_COMPILE_H

#include "tp/Runtime/Artifact.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlir::tp {

/// tp-compile's options; each field is the flag of the same name.
struct CompileOptions {
  std::string model;  // the .onnx (or ONNX text) file
  std::string output; // -o: the artifact folder
  int64_t devices = 1;
  bool sequenceParallel = false;
  int64_t stages = 1; // --pp
  int64_t microbatches = 1;
  std::string strategy = "auto";
  std::string config;
  std::vector<std::string> inputShapes; // name=DIMS
  /// --max-seq: compile the decode step of a decoder exported with its KV
  /// cache, for contexts of up to this many tokens (0: one forward pass).
  int64_t maxSeq = 0;
  /// --max-batch: sequences decoded at once.
  int64_t maxBatch = 1;
  /// --prefill-len: one prefill chunk of this many tokens (0: none, the
  /// prompt runs through the decode step; -1: --prefill-chunks or the
  /// default).
  int64_t prefillLength = -1;
  /// --prefill-chunks: the prompt runs in chunks of these sizes, each
  /// reading the cache written so far (empty: kDefaultPrefillChunks).
  std::vector<int64_t> prefillChunks;
  bool padding = true;
  /// --gradients: append the gradient of the loss with respect to every
  /// trainable weight as outputs (tp-differentiate), named grad.<weight>.
  bool gradients = false;
  /// --loss: the output to differentiate (default: the only scalar one).
  std::string loss;
  /// --freeze: weights whose name matches this regex are not trained.
  std::string freeze;
  /// --train OPTIMIZER (with --lr, --betas, --eps, --weight-decay,
  /// --momentum, --clip-norm, --accumulate): a training artifact. The
  /// gradients of --gradients, one per weight argument and each rank's
  /// own block, which the runtime's Trainer applies the optimizer to
  /// (`loss` is filled in by the compile).
  std::optional<::tp::rt::TrainingSpec> train;
  bool explain = false; // the report goes to stdout
  /// If set, the plan as tp-explain's JSON goes to this file.
  std::string explainJson;
  /// False: plan and explain only, write no artifact (`output` unused).
  bool writeArtifact = true;
  /// --dtype: bf16 or f16 stores an f32 model's weights and activations
  /// narrowed (tp-convert-dtype); empty or f32 keeps the model's types.
  std::string dtype;
  std::string target = "none";
  std::string cudaArch = "sm_90";
  std::string cxxFlags;
  /// --build-cache: libraries built before from identical code are reused
  /// from this folder (empty: always build).
  std::string buildCache;
  uint64_t chunkBytes = 16u << 20;
  /// Called as the weight shards are written (bytes written, total);
  /// returning false interrupts the compile.
  std::function<bool(uint64_t done, uint64_t total)> progress;
  /// Asked between the compile's stages (import, planning, prefill,
  /// weights, code); true interrupts the compile, which then fails with an
  /// error and leaves no artifact behind (Ctrl-C in tp_mlir.compile).
  std::function<bool()> interrupted;
};

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
