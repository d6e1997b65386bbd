//===- ArtifactPlan.h - what goes into each rank file -----------*- C++ -*-===//
//
// Reads the grid, the stage functions and their weight arguments from a
// partitioned module and decides, for every rank, which weight shards its
// file holds and where.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ARTIFACT_ARTIFACTPLAN_H
#define TP_LIB_TARGET_ARTIFACT_ARTIFACTPLAN_H

#include "InitializerSource.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace mlir::tp::artifact {

/// One stage function's view of a weight.
struct WeightUse {
  unsigned stage = 0;
  /// The dim whose local size differs from the global one; -1: replicated.
  int64_t splitDim = -1;
  std::vector<int64_t> localShape;
  std::string parallel; // tp.parallel, or "replicated"
  /// A fused weight (tp.pieces): lengths of its pieces along the split dim;
  /// each rank holds its 1/t of every piece, concatenated. Empty: one piece.
  std::vector<int64_t> pieces;
  /// tp.padded: the split dim is padded with zeros to this size before it
  /// is split (rows past the initializer's are zeros); 0: not padded.
  int64_t padded = 0;
};

struct WeightPlan {
  std::string name;
  const onnx::TensorProto *initializer = nullptr;
  std::vector<int64_t> globalShape;
  ElementKind kind;
  std::vector<WeightUse> uses;
};

/// A weight shard's place in a rank file.
struct ShardPlacement {
  unsigned weight = 0;         // index into ArtifactPlan::weights
  unsigned use = 0;            // index into WeightPlan::uses
  uint64_t begin = 0, end = 0; // relative to the data section
};

struct RankPlan {
  unsigned rank = 0, stage = 0, tpIndex = 0;
  std::string fileName;
  std::vector<ShardPlacement> shards; // in data order
  uint64_t dataBytes = 0;
};

struct TensorSignature {
  std::string name, dtype;
  std::vector<int64_t> shape;
  unsigned stage = 0;
};

struct ArtifactPlan {
  int64_t tpDevices = 1, stages = 1, microbatches = 1;
  std::vector<func::FuncOp> stageFuncs;
  std::vector<WeightPlan> weights; // in order of first appearance
  std::vector<RankPlan> ranks;     // rank = stage * tpDevices + tp index
  std::vector<TensorSignature> inputs, outputs;
};

/// Builds the plan; `initializers` maps names to the model's initializers.
/// Emits a diagnostic and fails on a module that is not partitioned or a
/// weight whose local shape is not an even split of its initializer.
FailureOr<ArtifactPlan> buildArtifactPlan(
    ModuleOp module,
    const llvm::StringMap<const onnx::TensorProto *> &initializers);

/// "F32", "I64", "BOOL", ... for an MLIR element type.
std::string getDTypeName(Type type);

} // namespace mlir::tp::artifact

#endif // TP_LIB_TARGET_ARTIFACT_ARTIFACTPLAN_H
