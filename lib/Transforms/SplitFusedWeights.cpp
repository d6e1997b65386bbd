//===- SplitFusedWeights.cpp - tp-split-fused-weights ---------------------===//
//
// tp-split-fused-projections reads a fused weight (QKV) through one slice
// per projection. This pass gives each slice's range its own argument, the
// same initializer's piece (`#tp.layout<..., slice = [offset, size]>`), so
// that planning, partition and code generation see plain weights: no rank
// stores or copies another projection's bytes.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_SPLITFUSEDWEIGHTS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The pieces of a fused weight: the dim they cut and, by [offset, size) in
/// offset order, the slices that read each.
struct Pieces {
  int64_t dim = -1;
  std::map<std::pair<int64_t, int64_t>, SmallVector<tensor::ExtractSliceOp>>
      slices;
};

/// The dim `slice` cuts, if it keeps the rank, has static unit-stride
/// bounds and cuts exactly one dim of `type`.
std::optional<int64_t> getCutDim(tensor::ExtractSliceOp slice,
                                 RankedTensorType type) {
  if (!slice.hasUnitStride() || slice.getType().getRank() != type.getRank() ||
      ShapedType::isDynamicShape(slice.getStaticOffsets()) ||
      ShapedType::isDynamicShape(slice.getStaticSizes()))
    return std::nullopt;
  std::optional<int64_t> cut;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (slice.getStaticOffsets()[d] == 0 &&
        slice.getStaticSizes()[d] == type.getDimSize(d))
      continue;
    if (cut)
      return std::nullopt;
    cut = d;
  }
  return cut;
}

/// The pieces of `arg` if its slices cut one common dim and their distinct
/// ranges tile that dim (every byte has one place), with at least two
/// ranges. Other uses read the whole weight and keep `arg`: one initializer
/// that the export shares between a fused projection's bias and another
/// bias of its length (torch.onnx deduplicates equal initializers) is two
/// weights to the planner, each split with its own block.
std::optional<Pieces> matchPieces(BlockArgument arg) {
  auto type = dyn_cast<RankedTensorType>(arg.getType());
  if (!type || !type.hasStaticShape() || arg.use_empty())
    return std::nullopt;
  Pieces pieces;
  for (Operation *user : arg.getUsers()) {
    auto slice = dyn_cast<tensor::ExtractSliceOp>(user);
    if (!slice)
      continue;
    std::optional<int64_t> dim = getCutDim(slice, type);
    if (!dim || (pieces.dim != -1 && pieces.dim != *dim))
      return std::nullopt;
    pieces.dim = *dim;
    pieces
        .slices[{slice.getStaticOffsets()[*dim], slice.getStaticSizes()[*dim]}]
        .push_back(slice);
  }
  if (pieces.slices.size() < 2)
    return std::nullopt;
  int64_t next = 0;
  for (const auto &[range, slices] : pieces.slices) {
    if (range.first != next)
      return std::nullopt;
    next += range.second;
  }
  if (next != type.getDimSize(pieces.dim))
    return std::nullopt;
  return pieces;
}

struct SplitFusedWeights : tp::impl::SplitFusedWeightsBase<SplitFusedWeights> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *ctx = func.getContext();
    // Walk backwards so that inserting and erasing arguments leaves the
    // indices still to visit unchanged.
    if (func.isExternal())
      return;
    for (int64_t index = static_cast<int64_t>(func.getNumArguments()) - 1;
         index >= 0; --index) {
      BlockArgument arg = func.getArgument(index);
      auto name =
          func.getArgAttrOfType<StringAttr>(index, TPDialect::kWeightAttrName);
      if (!name || getLayout(func, index))
        continue;
      std::optional<Pieces> pieces = matchPieces(arg);
      if (!pieces)
        continue;
      unsigned position = index + 1;
      for (auto &[range, slices] : pieces->slices) {
        auto layout =
            LayoutAttr::get(ctx, SplitRole::Replicated, pieces->dim,
                            /*block=*/-1, {range.first, range.second});
        NamedAttribute attrs[] = {
            NamedAttribute(TPDialect::kWeightAttrName, name),
            NamedAttribute(TPDialect::kLayoutAttrName, layout)};
        if (failed(func.insertArgument(position, slices.front().getType(),
                                       DictionaryAttr::get(ctx, attrs),
                                       arg.getLoc())))
          return signalPassFailure();
        BlockArgument piece = func.getArgument(position++);
        for (tensor::ExtractSliceOp slice : slices) {
          slice.replaceAllUsesWith(piece);
          slice.erase();
        }
      }
      if (arg.use_empty() && failed(func.eraseArgument(index)))
        return signalPassFailure();
    }
  }
};

} // namespace
