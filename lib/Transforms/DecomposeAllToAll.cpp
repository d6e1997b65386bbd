//===- DecomposeAllToAll.cpp - tp-decompose-all-to-all --------------------===//
//
// Partition reshards a value split on one dim to the same value split on
// another with shard.all_to_all (a TorchScript trace of Funnel under
// sequence parallelism does). Neither runtime has that collective; this
// pass writes it as what it computes, an all_gather along the concatenated
// dim and a local all_slice along the split one:
//   all_to_all(x, split, concat) = all_slice(all_gather(x, concat), split)
// which sends (ranks - 1) times the bytes of one piece per rank more than
// an all-to-all would.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_DECOMPOSEALLTOALL
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

struct AllToAllAsGatherSlice : OpRewritePattern<shard::AllToAllOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(shard::AllToAllOp op,
                                PatternRewriter &rewriter) const override {
    auto input = cast<RankedTensorType>(op.getInput().getType());
    auto result = cast<RankedTensorType>(op.getResult().getType());
    int64_t split = op.getSplitAxis().getSExtValue();
    int64_t concat = op.getConcatAxis().getSExtValue();
    if (split == concat || input.isDynamicDim(concat) ||
        result.isDynamicDim(concat))
      return rewriter.notifyMatchFailure(op, "not a static resharding");
    SmallVector<int64_t> gathered(input.getShape());
    gathered[concat] = result.getDimSize(concat);
    Value whole = shard::AllGatherOp::create(
        rewriter, op.getLoc(), input.clone(gathered), op.getGridAttr(),
        op.getGridAxesAttr(), op.getInput(), op.getConcatAxisAttr());
    rewriter.replaceOpWithNewOp<shard::AllSliceOp>(op, result, op.getGridAttr(),
                                                   op.getGridAxesAttr(), whole,
                                                   op.getSplitAxisAttr());
    return success();
  }
};

struct DecomposeAllToAll : tp::impl::DecomposeAllToAllBase<DecomposeAllToAll> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<AllToAllAsGatherSlice>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
