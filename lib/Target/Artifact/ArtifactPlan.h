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
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/Artifact/ModelSignature.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace mlir::tp::artifact {

/// One weight argument of a stage function: the initializer's range it
/// holds (all of it, or a piece of a fused weight), split over the stage's
/// ranks or whole on each.
struct WeightUse {
  unsigned stage = 0;
  /// How the rank file and the runtime name this argument: the
  /// initializer's name, or its range for a piece (`w[:, 0:64]`).
  std::string key;
  SplitRole role = SplitRole::Replicated;
  /// The dim the layout splits, slices or pads; -1: no layout (the whole
  /// initializer on every rank).
  int64_t dim = -1;
  bool split = false;
  /// The range [offset, offset + size) of `dim` this argument holds.
  int64_t offset = 0, size = 0;
  bool piece = false;
  /// `padded = [size, padded]`: the range is padded with zeros to this
  /// many rows before it is split; 0: not padded.
  int64_t padded = 0;
  /// `repeat = [repeatBlocks, repeat]`: the range is `repeatBlocks` blocks,
  /// each repeated `repeat` times in place before it is split; 1: not
  /// repeated.
  int64_t repeatBlocks = 0, repeat = 1;
  std::vector<int64_t> localShape;

  int64_t getSplitDim() const { return split ? dim : -1; }
  /// The rows of `dim` the ranks share: the range, padded if padded,
  /// repeated if repeated.
  int64_t getRows() const { return (padded ? padded : size) * repeat; }
  /// True if the use reads the whole initializer (no piece of it).
  bool readsWhole() const { return !piece; }
};

struct WeightPlan {
  std::string name;
  const onnx::TensorProto *initializer = nullptr;
  std::vector<int64_t> globalShape;
  ElementKind kind;
  /// In the order the writer reads them, which is also their order in
  /// each rank file: uses of the whole initializer first, then pieces by
  /// offset.
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
  /// tp.index_bound of an input read as indices: its values lie in
  /// [-indexBound, indexBound). 0 when it is not read as indices.
  int64_t indexBound = 0;
  /// An output that each rank of the last stage returns a block of
  /// (tp.split_output): the dim; `shape` is the whole output's. -1: none.
  int64_t splitDim = -1;
};

struct ArtifactPlan {
  int64_t tpDevices = 1, stages = 1, microbatches = 1;
  std::vector<func::FuncOp> stageFuncs;
  std::vector<WeightPlan> weights; // in order of first appearance
  std::vector<RankPlan> ranks;     // rank = stage * tpDevices + tp index
  std::vector<TensorSignature> inputs, outputs;
  /// A generation artifact's prefill chunk programs, by ascending length:
  /// their stage functions (on the same ranks and weights as stageFuncs)
  /// and signatures; empty without any.
  struct Prefill {
    int64_t length = 0;
    std::vector<func::FuncOp> funcs;
    std::vector<TensorSignature> inputs, outputs;
  };
  std::vector<Prefill> prefills;
};

/// Builds the plan; `initializers` maps names to the model's initializers.
/// Emits a diagnostic and fails on a module that is not partitioned or a
/// weight whose local shape is not what its `tp.layout` says.
FailureOr<ArtifactPlan> buildArtifactPlan(
    ModuleOp module,
    const llvm::StringMap<const onnx::TensorProto *> &initializers);

} // namespace mlir::tp::artifact

#endif // TP_LIB_TARGET_ARTIFACT_ARTIFACTPLAN_H
