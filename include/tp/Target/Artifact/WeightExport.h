//===- WeightExport.h - unsharded weights from an artifact ------*- C++ -*-===//
//
// Rebuilds the model's whole weights from an artifact's rank files, the
// inverse of the artifact writer's sharding (tp-export-weights).
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_ARTIFACT_WEIGHTEXPORT_H
#define TP_TARGET_ARTIFACT_WEIGHTEXPORT_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::tp {

/// Checks every rank file of the artifact in `artifactDir` against the
/// manifest's size and SHA-256, then writes each weight once, unsharded, to
/// the safetensors file `outPath`, streaming in bounded chunks. Returns
/// false with `error` set on failure; a corrupted rank file is named.
/// With `checkpointDir` (tp-run --train --save), the rank files are the
/// checkpoint's, checked against its SHA256SUMS: the trained weights.
bool exportWeights(llvm::StringRef artifactDir, llvm::StringRef outPath,
                   bool progress, std::string &error,
                   llvm::StringRef checkpointDir = "");

/// Writes the ONNX model `sourceModel` (the artifact's own source when
/// empty) to `outPath` with each weight initializer replaced by the
/// artifact's, or the checkpoint's, unsplit value: the trained model.
/// Initializers that were external data, or weights over 1 GiB, go to
/// `<outPath>.data`. Fails if a weight is not an initializer of the source
/// or has another shape there.
bool exportOnnxModel(llvm::StringRef artifactDir, llvm::StringRef sourceModel,
                     llvm::StringRef outPath, bool progress, std::string &error,
                     llvm::StringRef checkpointDir = "");

} // namespace mlir::tp

#endif // TP_TARGET_ARTIFACT_WEIGHTEXPORT_H
