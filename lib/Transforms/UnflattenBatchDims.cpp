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

/// A reshape that merges (or splits) leading dims only, two or more of them
/// real (not size 1), and keeps the other dims: [[0, 1, ...], [k], ...].
/// Reshapes that only add or drop unit dims (a bias broadcast) are left
/// alone.
bool mergesLeadingDims(ArrayRef<ReassociationIndices> groups,
                       ArrayRef<int64_t> fineShape) {
  if (groups.size() < 2 || groups.front().size() < 2)
    return false;
  if (llvm::count_if(groups.front(),
                     [&](int64_t d) { return fineShape[d] != 1; }) < 2)
    return false;
  return llvm::all_of(groups.drop_front(), [](const ReassociationIndices &g) {
    return g.size() == 1;
  });
}

bool isLeadingDimsReshape(Operation *op) {
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return mergesLeadingDims(collapse.getReassociationIndices(),
                             collapse.getSrcType().getShape());
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return mergesLeadingDims(expand.getReassociationIndices(),
                             expand.getResultType().getShape());
  return false;
}

/// Which (reshape, linalg op) pairs to fold: leading-dim reshapes only, and
/// never into an embedding lookup, whose form later stages rely on.
bool shouldFold(OpOperand *fused) {
  Operation *owner = fused->getOwner();
  Operation *def = fused->get().getDefiningOp();
  // Producer reshape into a consumer op, or a producer op into the reshape
  // that consumes it.
  Operation *reshape = isLeadingDimsReshape(owner) ? owner : def;
  Operation *linalgOp = reshape == owner ? def : owner;
  if (!reshape || !linalgOp || !isLeadingDimsReshape(reshape))
    return false;
  return !linalgOp->hasAttr(TPDialect::kEmbeddingAttrName);
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
      patterns.add<ReshapeOfEmpty<tensor::ExpandShapeOp>,
                   ReshapeOfEmpty<tensor::CollapseShapeOp>,
                   CancelReshapePair<tensor::ExpandShapeOp,
                                     tensor::CollapseShapeOp>,
                   CancelReshapePair<tensor::CollapseShapeOp,
                                     tensor::ExpandShapeOp>>(ctx);
      // No folding or constant CSE: the importer's form (constants inside
      // bodies, one init per op) is what partition needs.
      GreedyRewriteConfig config;
      config.enableFolding(false).enableConstantCSE(false).setRegionSimplificationLevel(
          GreedySimplifyRegionLevel::Disabled);
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
