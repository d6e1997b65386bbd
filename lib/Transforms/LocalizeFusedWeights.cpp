//===- LocalizeFusedWeights.cpp - tp-localize-fused-weights ---------------===//
//
// tp-split-fused-projections cuts a fused weight (QKV) into one slice per
// projection, and partition then keeps this rank's chunk of each slice with
// an all_slice: correct, with no communication, but every rank still holds
// the whole fused weight. This pass makes the argument itself the rank's
// chunks, concatenated, so each rank stores and reads only those.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::tp {
#define GEN_PASS_DEF_LOCALIZEFUSEDWEIGHTS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// One projection's slice of the fused weight and the all_slice after it.
struct Piece {
  tensor::ExtractSliceOp slice;
  shard::AllSliceOp keep;
  int64_t offset, length;
};

/// The pieces of `arg` along one dim `dim`, in order, if `arg` is used only
/// as a fused weight that partition sliced per rank over `gridName`.
std::optional<SmallVector<Piece>> matchPieces(BlockArgument arg, int64_t &dim,
                                              int64_t ranks) {
  auto type = dyn_cast<RankedTensorType>(arg.getType());
  if (!type || !type.hasStaticShape() || arg.use_empty())
    return std::nullopt;
  SmallVector<Piece> pieces;
  dim = -1;
  for (Operation *user : arg.getUsers()) {
    auto slice = dyn_cast<tensor::ExtractSliceOp>(user);
    if (!slice || !slice.hasUnitStride() || !slice->hasOneUse() ||
        slice.getType().getRank() != type.getRank() ||
        ShapedType::isDynamicShape(slice.getStaticOffsets()) ||
        ShapedType::isDynamicShape(slice.getStaticSizes()))
      return std::nullopt;
    auto keep = dyn_cast<shard::AllSliceOp>(*slice->getUsers().begin());
    if (!keep || keep.getGridAxes().size() != 1 || keep.getGridAxes()[0] != 0)
      return std::nullopt;
    int64_t axis = keep.getSliceAxis().getSExtValue();
    // The slice cuts only `axis`.
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (d != axis && (slice.getStaticOffsets()[d] != 0 ||
                        slice.getStaticSizes()[d] != type.getDimSize(d)))
        return std::nullopt;
    if (dim != -1 && dim != axis)
      return std::nullopt;
    dim = axis;
    int64_t length = slice.getStaticSizes()[axis];
    if (length % ranks != 0)
      return std::nullopt;
    pieces.push_back({slice, keep, slice.getStaticOffsets()[axis], length});
  }
  // The pieces must tile the dim exactly, so that every byte has one place.
  llvm::sort(pieces, [](const Piece &a, const Piece &b) {
    return a.offset < b.offset;
  });
  int64_t next = 0;
  for (const Piece &piece : pieces) {
    if (piece.offset != next)
      return std::nullopt;
    next += piece.length;
  }
  if (next != type.getDimSize(dim))
    return std::nullopt;
  return pieces;
}

struct LocalizeFusedWeights
    : tp::impl::LocalizeFusedWeightsBase<LocalizeFusedWeights> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto module = func->getParentOfType<ModuleOp>();
    auto grid = module ? module.lookupSymbol<shard::GridOp>("grid") : nullptr;
    if (!grid || grid.getShape().size() != 1 || grid.getShape()[0] < 2)
      return;
    int64_t ranks = grid.getShape()[0];
    MLIRContext *ctx = func.getContext();
    SmallVector<Type> inputs(func.getArgumentTypes());
    for (BlockArgument arg : func.getArguments()) {
      unsigned index = arg.getArgNumber();
      if (!func.getArgAttr(index, TPDialect::kWeightAttrName) ||
          func.getArgAttr(index, TPDialect::kParallelAttrName))
        continue;
      int64_t dim;
      std::optional<SmallVector<Piece>> pieces = matchPieces(arg, dim, ranks);
      if (!pieces)
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[dim] /= ranks;
      arg.setType(type.clone(shape));
      inputs[index] = arg.getType();
      SmallVector<int64_t> lengths;
      for (Piece &piece : *pieces) {
        lengths.push_back(piece.length);
        // This rank's chunk of the piece now starts at offset / ranks.
        OpBuilder b(piece.slice);
        SmallVector<int64_t> offsets(type.getRank(), 0);
        offsets[dim] = piece.offset / ranks;
        auto localType = cast<RankedTensorType>(piece.keep.getType());
        SmallVector<int64_t> strides(type.getRank(), 1);
        auto local = tensor::ExtractSliceOp::create(
            b, piece.slice.getLoc(), localType, arg, ValueRange(),
            ValueRange(), ValueRange(), b.getDenseI64ArrayAttr(offsets),
            b.getDenseI64ArrayAttr(localType.getShape()),
            b.getDenseI64ArrayAttr(strides));
        local->setDiscardableAttrs(piece.slice->getDiscardableAttrDictionary());
        piece.keep.getResult().replaceAllUsesWith(local.getResult());
        piece.keep.erase();
        piece.slice.erase();
      }
      func.setArgAttr(index, TPDialect::kParallelAttrName,
                      StringAttr::get(ctx, "fused-column"));
      func.setArgAttr(index, TPDialect::kPiecesAttrName,
                      DenseI64ArrayAttr::get(ctx, lengths));
    }
    func.setType(FunctionType::get(ctx, inputs, func.getResultTypes()));
  }
};

} // namespace
