//===- ArtifactFormat.h - the version of manifest.json ----------*- C++ -*-===//
//
// The one version number of the contract between tp-compile's artifact
// writer and its readers (the runtime, tp-export-weights), in a header that
// needs neither MLIR nor the runtime. A macro, so that the compiler
// (mlir::tp) and the runtime (tp::rt) each name it in their own namespace.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_ARTIFACTFORMAT_H
#define TP_RUNTIME_ARTIFACTFORMAT_H

/// Bumped whenever a reader of manifest.json would need to change.
/// 3: one rank-file entry per weight argument, named by its key (a piece of
/// a fused weight by its range, `w[:, 0:64]`), with `initializer`, `slice`
/// and `role` (was `parallel`); `pieces` is gone.
#define TP_ARTIFACT_FORMAT_VERSION 3

#endif // TP_RUNTIME_ARTIFACTFORMAT_H
