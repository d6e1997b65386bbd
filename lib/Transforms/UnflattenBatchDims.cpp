//===- UnflattenBatchDims.cpp - tp-unflatten-batch-dims -------------------===//
//
// Exports often flatten leading dims into one before a batched op and split
// them back after it: GPT-NeoX and BLOOM run attention on [batch * heads,
// seq, dim] for `baddbmm`, GPT-2's Conv1D multiplies a [batch * seq, hidden]
// view. A split of heads cannot pass such a merge (it lands inside the
// merged dim, not on its outer part), so the planner would replicate the
// whole attention. This pass undoes the flattening: each op that reads a
// collapse of leading dims, or whose result is split into leading dims, is
// rewritten on the unflattened shape (upstream's fold-reshape-by-expansion),
// until the collapse meets its expand and both fold away.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_UNFLATTENBATCHDIMS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The group of a reshape that merges (or splits) two or more real (not
/// size 1) dims, if it is the only group of more than one dim: [B, S·H, D]
/// from [B, S, H, D]. Also GPT-2's [B·S, H] view from [B, S, H] when B or S
/// (or both) is 1: one sequence, or a one-token step, has the shape of any
/// other batch. Other reshapes that only add or drop unit dims (a bias
/// broadcast, a mask's [B, 1, 1, S]) have none and are left alone.
std::optional<int64_t> getMergedGroup(ArrayRef<ReassociationIndices> groups,
                                      ArrayRef<int64_t> fineShape) {
  if (groups.size() < 2)
    return std::nullopt;
  std::optional<int64_t> merged;
  for (auto [g, dims] : llvm::enumerate(groups)) {
    if (dims.size() == 1)
      continue;
    int64_t real =
        llvm::count_if(dims, [&](int64_t d) { return fineShape[d] != 1; });
    bool batchTimesSequence = g == 0 && dims.size() == 2 &&
                              fineShape.size() == 3 && groups.size() == 2;
    if (merged || (real < 2 && !batchTimesSequence))
      return std::nullopt;
    merged = g;
  }
  return merged;
}

std::optional<int64_t> getMergedGroup(Operation *op) {
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return getMergedGroup(collapse.getReassociationIndices(),
                          collapse.getSrcType().getShape());
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return getMergedGroup(expand.getReassociationIndices(),
                          expand.getResultType().getShape());
  return std::nullopt;
}

/// Reshapes to unflatten: a merge of two or more real dims (GPT-NeoX's
/// [B·H, S, D] baddbmm view, GPTBigCode's [B, S·H, D] multi-query view).
/// A merge of a broadcast is a repeat (Llama's repeat_kv of the K/V heads):
/// the merged heads already split, and unflattened they could split only
/// as far as the K/V heads do, so it is left alone.
bool isLeadingDimsReshape(Operation *op) {
  std::optional<int64_t> group = getMergedGroup(op);
  if (!group)
    return false;
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return !isBroadcast(collapse.getSrc());
  return true;
}

/// Which (reshape, linalg op) pairs to fold: reshapes with one merged group,
/// never into an embedding lookup (whose form later stages rely on), and
/// never so that a weight would be reshaped: the merged dims must not be
/// read by the op's weight (a head merge before an output projection stays).
bool shouldFold(OpOperand *fused) {
  Operation *owner = fused->getOwner();
  Operation *def = fused->get().getDefiningOp();
  // Producer reshape into a consumer op, or a producer op into the reshape
  // that consumes it.
  Operation *reshape = isLeadingDimsReshape(owner) ? owner : def;
  auto linalgOp =
      dyn_cast_or_null<linalg::LinalgOp>(reshape == owner ? def : owner);
  if (!reshape || !linalgOp || !isLeadingDimsReshape(reshape) ||
      linalgOp->hasAttr(TPDialect::kEmbeddingAttrName))
    return false;
  // The loop of the merged (coarse) dim, on the operand or result that
  // meets the reshape.
  AffineMap map =
      reshape == owner
          ? linalgOp.getIndexingMapMatchingResult(cast<OpResult>(fused->get()))
          : linalgOp.getMatchingIndexingMap(fused);
  auto loop = dyn_cast<AffineDimExpr>(map.getResult(*getMergedGroup(reshape)));
  if (!loop)
    return false;
  // Weights (a projection's matrix, a bias) keep their shapes: the plan
  // and the artifact read them as they are in the model.
  for (OpOperand *input : linalgOp.getDpsInputOperands()) {
    auto arg = dyn_cast<BlockArgument>(input->get());
    auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                    : func::FuncOp();
    if (func &&
        func.getArgAttr(arg.getArgNumber(), TPDialect::kWeightAttrName) &&
        linalgOp.getMatchingIndexingMap(input).getResultPosition(loop))
      return false;
  }
  return true;
}

/// Named ops that touch a leading-dim reshape become generics, which the
/// expansion patterns rewrite; contractions stay contractions (code
/// generation recognises them as generics too).
void generalizeAroundReshapes(func::FuncOp func) {
  SmallVector<linalg::LinalgOp> named;
  func.walk([&](linalg::LinalgOp op) {
    if (isa<linalg::GenericOp, linalg::FillOp>(op.getOperation()))
      return;
    bool touches = llvm::any_of(op->getOperands(), [](Value v) {
      Operation *def = v.getDefiningOp();
      return def && isLeadingDimsReshape(def);
    });
    touches |= llvm::any_of(op->getUsers(), isLeadingDimsReshape);
    if (touches)
      named.push_back(op);
  });
  IRRewriter rewriter(func.getContext());
  for (linalg::LinalgOp op : named) {
    rewriter.setInsertionPoint(op);
    (void)linalg::generalizeNamedOp(rewriter, op);
  }
}

/// A reshape of a shape-only tensor.empty (the expansion patterns reshape
/// init operands) is an empty tensor of the new shape.
template <typename ReshapeOp>
struct ReshapeOfEmpty : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern<ReshapeOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(ReshapeOp reshape,
                                PatternRewriter &rewriter) const override {
    auto empty = reshape.getSrc().template getDefiningOp<tensor::EmptyOp>();
    if (!empty || !reshape.getResultType().hasStaticShape())
      return rewriter.notifyMatchFailure(reshape, "not a static empty tensor");
    rewriter.replaceOpWithNewOp<tensor::EmptyOp>(
        reshape, reshape.getResultType().getShape(),
        reshape.getResultType().getElementType());
    return success();
  }
};

/// A reshape of a fill of an empty tensor (a reduction's init) is a fill of
/// an empty tensor of the new shape.
template <typename ReshapeOp>
struct ReshapeOfFill : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern<ReshapeOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(ReshapeOp reshape,
                                PatternRewriter &rewriter) const override {
    auto fill = reshape.getSrc().template getDefiningOp<linalg::FillOp>();
    RankedTensorType type = reshape.getResultType();
    if (!fill || !type.hasStaticShape() ||
        !fill.getOutputs()[0].template getDefiningOp<tensor::EmptyOp>())
      return rewriter.notifyMatchFailure(reshape, "not a fill of an empty");
    Value empty = tensor::EmptyOp::create(
        rewriter, reshape.getLoc(), type.getShape(), type.getElementType());
    rewriter.replaceOpWithNewOp<linalg::FillOp>(reshape, fill.getInputs()[0],
                                                empty);
    return success();
  }
};

/// expand(collapse(x)) (or collapse(expand(x))) with the same groups is x.
/// Folding is off in this pass (see below), so the pair is cancelled here.
template <typename OuterOp, typename InnerOp>
struct CancelReshapePair : OpRewritePattern<OuterOp> {
  using OpRewritePattern<OuterOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(OuterOp outer,
                                PatternRewriter &rewriter) const override {
    auto inner = outer.getSrc().template getDefiningOp<InnerOp>();
    if (!inner || inner.getSrc().getType() != outer.getResult().getType() ||
        inner.getReassociationIndices() != outer.getReassociationIndices())
      return rewriter.notifyMatchFailure(outer, "not the inverse reshape");
    rewriter.replaceOp(outer, inner.getSrc());
    return success();
  }
};

/// True if a group of `groups` holds two or more real (not size 1) dims.
bool mergesRealDims(ArrayRef<ReassociationIndices> groups,
                    ArrayRef<int64_t> fineShape) {
  return llvm::any_of(groups, [&](const ReassociationIndices &dims) {
    return llvm::count_if(dims, [&](int64_t d) { return fineShape[d] != 1; }) >
           1;
  });
}

/// expand(collapse(x)) where one of the two only adds or drops unit dims:
/// the same reshape as collapse'(expand'(x)), with the unit dims moved to
/// the other side, so that the merge of real dims meets the op it can fold
/// into. LayerNorm on OPT's [B·S, H] view reduces to [B·S] and reshapes to
/// [B·S, 1]; once the merge has moved up through the reduction that is
/// expand([2, 12] -> [24]) into [24, 1], which is collapse'([2, 12, 1]).
struct SwapUnitReshape : OpRewritePattern<tensor::ExpandShapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ExpandShapeOp expand,
                                PatternRewriter &rewriter) const override {
    auto collapse = expand.getSrc().getDefiningOp<tensor::CollapseShapeOp>();
    if (!collapse || !collapse.getSrcType().hasStaticShape() ||
        !expand.getResultType().hasStaticShape() ||
        mergesRealDims(expand.getReassociationIndices(),
                       expand.getResultType().getShape()) ==
            mergesRealDims(collapse.getReassociationIndices(),
                           collapse.getSrcType().getShape()))
      return rewriter.notifyMatchFailure(expand, "not a merge and a unit "
                                                 "reshape");
    ArrayRef<int64_t> src = collapse.getSrcType().getShape();
    ArrayRef<int64_t> dst = expand.getResultType().getShape();
    auto srcGroups = collapse.getReassociationIndices();
    auto dstGroups = expand.getReassociationIndices();
    // Per middle dim: the intermediate dims, and which of them each source
    // and each result dim covers.
    SmallVector<int64_t> mid;
    SmallVector<ReassociationIndices> expandGroups(src.size()),
        collapseGroups(dst.size());
    for (auto [c, r] : llvm::zip(srcGroups, dstGroups)) {
      if (c.empty() || r.empty())
        return failure();
      auto realDims = [](ArrayRef<int64_t> shape,
                         const ReassociationIndices &g) {
        return llvm::count_if(g, [&](int64_t d) { return shape[d] != 1; });
      };
      // `outer` keeps its dims; `inner` (at most one real dim) contributes
      // its unit dims around them.
      bool unitResult = realDims(dst, r) <= 1;
      if (!unitResult && realDims(src, c) > 1)
        return failure();
      const ReassociationIndices &outer = unitResult ? c : r;
      const ReassociationIndices &inner = unitResult ? r : c;
      ArrayRef<int64_t> outerShape = unitResult ? src : dst;
      ArrayRef<int64_t> innerShape = unitResult ? dst : src;
      auto &outerGroups = unitResult ? expandGroups : collapseGroups;
      auto &innerGroups = unitResult ? collapseGroups : expandGroups;
      auto main =
          llvm::find_if(inner, [&](int64_t d) { return innerShape[d] != 1; });
      // Units before the main inner dim, the outer dims, units after it.
      int64_t first = mid.size();
      for (int64_t d : inner) {
        if (d == (main == inner.end() ? inner.back() : *main))
          break;
        innerGroups[d].push_back(mid.size());
        mid.push_back(1);
      }
      int64_t outerBegin = mid.size();
      for (int64_t d : outer) {
        outerGroups[d].push_back(mid.size());
        mid.push_back(outerShape[d]);
      }
      int64_t outerEnd = mid.size();
      bool afterMain = false;
      for (int64_t d : inner) {
        if (d == (main == inner.end() ? inner.back() : *main)) {
          // The main inner dim covers all the outer dims.
          for (int64_t i = outerBegin; i < outerEnd; ++i)
            innerGroups[d].push_back(i);
          afterMain = true;
          continue;
        }
        if (!afterMain)
          continue;
        innerGroups[d].push_back(mid.size());
        mid.push_back(1);
      }
      // Units of `inner` before and after belong to the first and last
      // outer dim too, so that the outer groups stay contiguous.
      for (int64_t i = outerEnd; i < int64_t(mid.size()); ++i)
        outerGroups[outer.back()].push_back(i);
      for (int64_t i = outerBegin - 1; i >= first; --i)
        outerGroups[outer.front()].insert(outerGroups[outer.front()].begin(),
                                          i);
    }
    Type element = expand.getResultType().getElementType();
    auto midType = RankedTensorType::get(mid, element);
    Location loc = expand.getLoc();
    Value wide = tensor::ExpandShapeOp::create(rewriter, loc, midType,
                                               collapse.getSrc(), expandGroups);
    rewriter.replaceOpWithNewOp<tensor::CollapseShapeOp>(
        expand, expand.getResultType(), wide, collapseGroups);
    return success();
  }
};

struct UnflattenBatchDims
    : tp::impl::UnflattenBatchDimsBase<UnflattenBatchDims> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *ctx = &getContext();
    // Each rewrite moves a reshape one op further; generalize what it
    // reaches next, until nothing changes.
    for (int round = 0; round < 64; ++round) {
      generalizeAroundReshapes(func);
      RewritePatternSet patterns(ctx);
      linalg::populateFoldReshapeOpsByExpansionPatterns(patterns, shouldFold);
      patterns.add<
          ReshapeOfEmpty<tensor::ExpandShapeOp>,
          ReshapeOfEmpty<tensor::CollapseShapeOp>,
          ReshapeOfFill<tensor::ExpandShapeOp>,
          ReshapeOfFill<tensor::CollapseShapeOp>,
          CancelReshapePair<tensor::ExpandShapeOp, tensor::CollapseShapeOp>,
          CancelReshapePair<tensor::CollapseShapeOp, tensor::ExpandShapeOp>,
          SwapUnitReshape>(ctx);
      // No folding or constant CSE: the importer's form (constants inside
      // bodies, one init per op) is what partition needs.
      GreedyRewriteConfig config;
      config.enableFolding(false)
          .enableConstantCSE(false)
          .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
      bool changed = false;
      if (failed(applyPatternsGreedily(func, std::move(patterns), config,
                                       &changed))) {
        func.emitError("tp-unflatten-batch-dims did not converge");
        return signalPassFailure();
      }
      if (!changed)
        return;
    }
  }
};

} // namespace
