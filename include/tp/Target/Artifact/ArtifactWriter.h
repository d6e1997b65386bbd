//===- ArtifactWriter.h - tp-compile's artifact folder ----------*- C++ -*-===//
//
// Writes what the runtime loads for a partitioned module: manifest.json,
// one rank-K.safetensors of weight shards per rank, and model.mlir.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_ARTIFACT_ARTIFACTWRITER_H
#define TP_TARGET_ARTIFACT_ARTIFACTWRITER_H

#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/ArtifactFormat.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mlir::tp {

struct ArtifactOptions {
  /// Bytes read from an initializer at a time; bounds the writer's memory.
  uint64_t chunkBytes = 16u << 20;
  /// Print "bytes done / total" to stderr while writing shards.
  bool progress = true;
  /// Called after each chunk of weights is written, with the bytes written
  /// and the total; returning false stops the writer (an interrupted
  /// compile), which then fails with an error.
  std::function<bool(uint64_t done, uint64_t total)> onProgress;
  /// Code generation target recorded in the manifest ("none", "cpu", ...).
  std::string target = "none";
  /// Generation: the decode step's longest context and batch (--max-seq,
  /// --max-batch), recorded in the manifest; 0 for one forward pass.
  int64_t maxSeq = 0, maxBatch = 0;
  /// Training (tp-compile --train): the optimizer, recorded in the
  /// manifest for the runtime to apply.
  std::optional<::tp::rt::TrainingSpec> training;
  /// Writes the emitted source and compiled library into the folder (given
  /// as its argument) and returns their file names; runs after the weight
  /// shards and before the manifest, so a folder with a manifest is whole.
  std::function<LogicalResult(StringRef outDir, std::string &source,
                              std::string &library)>
      generateCode;
};

/// The manifest's `format_version` (see tp/Runtime/ArtifactFormat.h).
constexpr int64_t kArtifactFormatVersion = TP_ARTIFACT_FORMAT_VERSION;

/// Writes the artifact for `partitioned` (the output of tp-parallelize: a
/// `@main`, or `@main_stage<k>` functions under `tp.pipeline`) into `outDir`,
/// creating it. Weight bytes are read from the model named by `tp.model`,
/// streamed in chunks, never a whole tensor at once. Failures are emitted as
/// diagnostics on the module.
LogicalResult writeArtifact(ModuleOp partitioned, StringRef outDir,
                            const ArtifactOptions &options = {});

} // namespace mlir::tp

#endif // TP_TARGET_ARTIFACT_ARTIFACTWRITER_H
