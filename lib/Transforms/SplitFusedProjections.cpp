//===- SplitFusedProjections.cpp - tp-split-fused-projections -------------===//
//
// Rewrites a fused projection (one weight contraction whose output is cut
// into Q, K and V slices) into one contraction per slice, so that each can
// be split column-parallel without mixing the three on a rank.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::tp {
#define GEN_PASS_DEF_SPLITFUSEDPROJECTIONS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// One op of the chain from the contraction to the slices, and the operand
/// that carries the chain.
struct ChainLink {
  linalg::LinalgOp op;
  unsigned chainOperand;
};

/// Slices `v` along `dim` to [offset, offset + size). A slice of a static
/// slice (a piece of a piece: multi-query K and V cut from one K/V
/// projection) is one slice of the source.
Value sliceAlong(OpBuilder &b, Location loc, Value v, int64_t dim,
                 int64_t offset, int64_t size) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> offsets(type.getRank(), 0), sizes(type.getShape()),
      strides(type.getRank(), 1);
  if (auto inner = v.getDefiningOp<tensor::ExtractSliceOp>();
      inner && inner.hasUnitStride() && inner.getOffsets().empty() &&
      inner.getSourceType().getRank() == type.getRank()) {
    offsets.assign(inner.getStaticOffsets().begin(),
                   inner.getStaticOffsets().end());
    offset += offsets[dim];
    v = inner.getSource();
  }
  offsets[dim] = offset;
  sizes[dim] = size;
  auto resultType = RankedTensorType::get(sizes, type.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, resultType, v, ValueRange{},
                                        ValueRange{}, ValueRange{}, offsets,
                                        sizes, strides);
}

/// An init tensor like `init` (tensor.empty, or a linalg.fill of one) but of
/// `shape`.
Value createInit(OpBuilder &b, Location loc, Value init,
                 ArrayRef<int64_t> shape) {
  Type elementType = cast<ShapedType>(init.getType()).getElementType();
  Value empty = tensor::EmptyOp::create(b, loc, shape, elementType);
  if (auto fill = init.getDefiningOp<linalg::FillOp>())
    return linalg::FillOp::create(b, loc, fill.getInputs()[0], empty)
        .getResult(0);
  return empty;
}

/// The operand dim that loop `loop` indexes, if any.
std::optional<int64_t> operandDimOfLoop(linalg::LinalgOp op, OpOperand &operand,
                                        unsigned loop) {
  if (auto pos = op.getMatchingIndexingMap(&operand).getResultPosition(
          getAffineDimExpr(loop, op->getContext())))
    return *pos;
  return std::nullopt;
}

struct SplitFusedProjections
    : tp::impl::SplitFusedProjectionsBase<SplitFusedProjections> {
  void runOnOperation() override {
    // A piece may be fused again (K and V in one multi-query projection,
    // next to Q): split until no contraction changes.
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<linalg::LinalgOp> candidates;
      getOperation().walk([&](linalg::LinalgOp op) {
        if (getWeightOperand(op))
          candidates.push_back(op);
      });
      for (linalg::LinalgOp op : candidates)
        changed |= trySplit(op);
    }
  }

  /// Splits `contraction` if it is fused; returns true if it did.
  bool trySplit(linalg::LinalgOp contraction) {
    unsigned weightIdx = *getWeightOperand(contraction);
    AffineMap resultMap = contraction.getIndexingMapMatchingResult(
        cast<OpResult>(contraction->getResult(0)));
    AffineMap weightMap = contraction.getMatchingIndexingMap(
        &contraction->getOpOperand(weightIdx));
    // The output loop: a parallel loop of the weight that the result keeps.
    std::optional<unsigned> loop;
    for (AffineExpr e : weightMap.getResults()) {
      auto d = dyn_cast<AffineDimExpr>(e);
      if (d &&
          contraction.getIteratorTypesArray()[d.getPosition()] ==
              utils::IteratorType::parallel &&
          resultMap.getResultPosition(d))
        loop = d.getPosition();
    }
    if (!loop)
      return false;
    int64_t dim = *resultMap.getResultPosition(
        getAffineDimExpr(*loop, contraction->getContext()));

    // Walk single-use elementwise ops that keep the dim in place.
    SmallVector<ChainLink> chain = {{contraction, weightIdx}};
    Value end = contraction->getResult(0);
    while (end.hasOneUse()) {
      auto next = dyn_cast<linalg::LinalgOp>(*end.getUsers().begin());
      if (!next || next.getNumReductionLoops() != 0 ||
          next->getNumResults() != 1 ||
          !next.isDpsInput(&*end.getUses().begin()))
        break;
      OpOperand &use = *end.getUses().begin();
      AffineMap map = next.getMatchingIndexingMap(&use);
      AffineMap out =
          next.getIndexingMapMatchingResult(cast<OpResult>(next->getResult(0)));
      if (!map.isIdentity() || !out.isIdentity())
        break;
      chain.push_back({next, use.getOperandNumber()});
      end = next->getResult(0);
    }
    // The pieces may be cut after a view that splits the output dim into
    // (heads, head_dim): Falcon's K and V as the last heads of one
    // [b, s, heads + 2, d] view, or its per-group layout with one group.
    tensor::ExpandShapeOp view;
    if (end.hasOneUse())
      view = dyn_cast<tensor::ExpandShapeOp>(*end.getUsers().begin());
    Value cut = view ? view.getResult() : end;
    ReassociationIndices group = {dim};
    if (view)
      group = view.getReassociationIndices()[dim];
    auto cutShape = cast<RankedTensorType>(cut.getType()).getShape();

    // All users must be slices that cut one dim of `group` only, with the
    // dims before it in the group of size 1 and those after it whole: a
    // contiguous piece of the output dim.
    struct Piece {
      tensor::ExtractSliceOp slice;
      int64_t offset, size;
    };
    SmallVector<Piece> pieces;
    for (Operation *user : cut.getUsers()) {
      auto slice = dyn_cast<tensor::ExtractSliceOp>(user);
      if (!slice || !slice.getOffsets().empty() || !slice.getSizes().empty() ||
          slice.getResultType().getRank() != slice.getSourceType().getRank())
        return false;
      std::optional<int64_t> cutDim;
      for (int64_t d = 0, e = slice.getSourceType().getRank(); d < e; ++d) {
        if (slice.getStaticStrides()[d] != 1)
          return false;
        bool whole = slice.getStaticOffsets()[d] == 0 &&
                     slice.getStaticSizes()[d] == cutShape[d];
        if (whole)
          continue;
        if (cutDim || !llvm::is_contained(group, d))
          return false;
        cutDim = d;
      }
      if (!cutDim)
        return false;
      int64_t inner = 1;
      for (int64_t d : group) {
        if (d < *cutDim && cutShape[d] != 1)
          return false;
        if (d > *cutDim)
          inner *= cutShape[d];
      }
      pieces.push_back({slice, slice.getStaticOffsets()[*cutDim] * inner,
                        slice.getStaticSizes()[*cutDim] * inner});
    }
    if (pieces.size() < 2)
      return false;

    auto endType = cast<RankedTensorType>(end.getType());
    for (auto [slice, offset, size] : pieces) {
      SmallVector<int64_t> shape(endType.getShape());
      shape[dim] = size;
      OpBuilder b(slice);
      Value carried;
      for (auto [i, link] : llvm::enumerate(chain)) {
        IRMapping mapping;
        // Slice every operand that indexes the output loop (the weight,
        // biases); the chain value itself comes from the previous clone.
        for (OpOperand &operand : link.op->getOpOperands()) {
          if (i > 0 && operand.getOperandNumber() == link.chainOperand) {
            mapping.map(operand.get(), carried);
            continue;
          }
          // A fresh init of the piece's shape rather than a slice of the
          // old one: an init is only zeros or scratch.
          if (link.op.isDpsInit(&operand)) {
            mapping.map(operand.get(),
                        createInit(b, slice.getLoc(), operand.get(), shape));
            continue;
          }
          unsigned l = i == 0 ? *loop : static_cast<unsigned>(dim);
          std::optional<int64_t> d = operandDimOfLoop(link.op, operand, l);
          if (!d)
            continue;
          mapping.map(
              operand.get(),
              sliceAlong(b, slice.getLoc(), operand.get(), *d, offset, size));
        }
        Operation *clone = b.clone(*link.op, mapping);
        clone->getResult(0).setType(endType.clone(
            shape, cast<ShapedType>(link.op->getResult(0).getType())
                       .getElementType()));
        carried = clone->getResult(0);
      }
      if (view)
        carried = tensor::ExpandShapeOp::create(b, slice.getLoc(),
                                                slice.getResultType(), carried,
                                                view.getReassociationIndices());
      slice.replaceAllUsesWith(carried);
      slice.erase();
    }
    if (view)
      view.erase();
    // The old inits (a fill of an empty) and the slices of a piece split
    // again are dead now; partition cannot leave dead tensors unannotated,
    // so remove them. A set: an op may feed several of those erased (an
    // empty under two fills), and the chain's own links are erased here.
    llvm::SmallPtrSet<Operation *, 8> links;
    for (ChainLink &link : chain)
      links.insert(link.op);
    llvm::SetVector<Operation *> inits;
    for (ChainLink &link : llvm::reverse(chain)) {
      for (Value operand : link.op->getOperands())
        if (Operation *def = operand.getDefiningOp(); def && !links.count(def))
          inits.insert(def);
      link.op->erase();
    }
    while (!inits.empty()) {
      Operation *def = inits.pop_back_val();
      if (!def->use_empty() ||
          !isa<tensor::EmptyOp, linalg::FillOp, tensor::ExtractSliceOp>(def))
        continue;
      for (Value operand : def->getOperands())
        if (Operation *producer = operand.getDefiningOp())
          inits.insert(producer);
      def->erase();
    }
    return true;
  }
};

} // namespace
