//===- FormReduceScatter.cpp - tp-form-reduce-scatter ---------------------===//
//
// all_reduce then all_slice on the same grid axes is a reduce-scatter that
// sends every byte twice; this pass writes the reduce-scatter.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_FORMREDUCESCATTER
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

struct AllReduceThenSlice : OpRewritePattern<shard::AllSliceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(shard::AllSliceOp slice,
                                PatternRewriter &rewriter) const override {
    auto reduce = slice.getInput().getDefiningOp<shard::AllReduceOp>();
    if (!reduce || !reduce->hasOneUse())
      return rewriter.notifyMatchFailure(slice, "input is not an all_reduce "
                                                "used only here");
    if (reduce.getGrid() != slice.getGrid() ||
        reduce.getGridAxes() != slice.getGridAxes())
      return rewriter.notifyMatchFailure(slice, "different grid axes");
    if (reduce.getResult().getType() != reduce.getInput().getType())
      return rewriter.notifyMatchFailure(slice, "all_reduce changes type");
    rewriter.replaceOpWithNewOp<shard::ReduceScatterOp>(
        slice, slice.getResult().getType(), reduce.getGridAttr(),
        reduce.getGridAxesAttr(), reduce.getInput(), reduce.getReductionAttr(),
        slice.getSliceAxisAttr());
    rewriter.eraseOp(reduce);
    return success();
  }
};

struct FormReduceScatter : tp::impl::FormReduceScatterBase<FormReduceScatter> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<AllReduceThenSlice>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
