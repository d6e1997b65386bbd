//===- LowerCollectives.cpp - collectives as all_reduce + slices ----------===//
//
// Rewrites shard.all_gather, shard.reduce_scatter and shard.all_slice into
// shard.all_reduce and tensor slices, the subset that upstream
// convert-shard-to-mpi lowers, so partitioned modules can run under MPI for
// numerical testing.
//
//===----------------------------------------------------------------------===//

#include "tp/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_LOWERCOLLECTIVES
#include "tp/Conversion/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::shard;

namespace {

/// Where this process's shard lies along one tensor dim of a collective.
struct ShardPlace {
  Value offset;  // rank-in-group * local size, as an index
  int64_t local; // shard size along the dim
};

/// Builds `rank * local` where rank is the process's linear index within the
/// group of `gridAxes`; fails unless the grid is static and `full` splits
/// evenly, which is all this testing lowering needs.
static FailureOr<ShardPlace>
placeShard(PatternRewriter &rewriter, Operation *op, FlatSymbolRefAttr gridSym,
           ArrayRef<GridAxis> gridAxes, int64_t full, int64_t local) {
  SymbolTableCollection symbolTables;
  GridOp grid = getGridOrNull(op, gridSym, symbolTables);
  if (!grid)
    return rewriter.notifyMatchFailure(op, "grid not found");
  ArrayRef<int64_t> shape = grid.getShape();
  int64_t groupSize = 1;
  for (GridAxis axis : gridAxes) {
    if (ShapedType::isDynamic(shape[axis]))
      return rewriter.notifyMatchFailure(op, "dynamic grid shape");
    groupSize *= shape[axis];
  }
  if (ShapedType::isDynamic(full) || ShapedType::isDynamic(local) ||
      full != local * groupSize)
    return rewriter.notifyMatchFailure(op, "shard dim does not split evenly");

  Location loc = op->getLoc();
  Value rank = arith::ConstantIndexOp::create(rewriter, loc, 0);
  if (!gridAxes.empty()) {
    auto index =
        ProcessMultiIndexOp::create(rewriter, loc, grid.getSymName(), gridAxes);
    // Row-major over the group's axes, as shard's own linearization is.
    for (auto [i, axis] : llvm::enumerate(gridAxes)) {
      Value dim = arith::ConstantIndexOp::create(rewriter, loc, shape[axis]);
      Value scaled = arith::MulIOp::create(rewriter, loc, rank, dim);
      rank = arith::AddIOp::create(rewriter, loc, scaled, index.getResult()[i]);
    }
  }
  Value size = arith::ConstantIndexOp::create(rewriter, loc, local);
  Value offset = arith::MulIOp::create(rewriter, loc, rank, size);
  return ShardPlace{offset, local};
}

/// Offsets/sizes/strides selecting `place` along `dim` of `type`.
static void sliceAlong(OpBuilder &b, RankedTensorType type, int64_t dim,
                       ShardPlace place, SmallVectorImpl<OpFoldResult> &offsets,
                       SmallVectorImpl<OpFoldResult> &sizes,
                       SmallVectorImpl<OpFoldResult> &strides) {
  for (int64_t d = 0, e = type.getRank(); d < e; ++d) {
    offsets.push_back(d == dim ? OpFoldResult(place.offset)
                               : OpFoldResult(b.getIndexAttr(0)));
    sizes.push_back(
        b.getIndexAttr(d == dim ? place.local : type.getDimSize(d)));
    strides.push_back(b.getIndexAttr(1));
  }
}

/// This rank's slice of `full` along `dim`, typed `resultType`.
static Value extractShard(OpBuilder &b, Location loc, Value full,
                          RankedTensorType resultType, int64_t dim,
                          ShardPlace place) {
  SmallVector<OpFoldResult> offsets, sizes, strides;
  sliceAlong(b, cast<RankedTensorType>(full.getType()), dim, place, offsets,
             sizes, strides);
  return tensor::ExtractSliceOp::create(b, loc, resultType, full, offsets,
                                        sizes, strides);
}

struct LowerAllGather : OpRewritePattern<AllGatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AllGatherOp op,
                                PatternRewriter &rewriter) const override {
    auto inType = cast<RankedTensorType>(op.getInput().getType());
    auto outType = cast<RankedTensorType>(op.getResult().getType());
    int64_t dim = op.getGatherAxis().getSExtValue();
    if (!outType.hasStaticShape())
      return rewriter.notifyMatchFailure(op, "dynamic result shape");
    FailureOr<ShardPlace> place =
        placeShard(rewriter, op, op.getGridAttr(), op.getGridAxes(),
                   outType.getDimSize(dim), inType.getDimSize(dim));
    if (failed(place))
      return failure();
    Location loc = op.getLoc();
    // Every element has exactly one non-zero contribution, so the sum is
    // exact for any element type.
    auto zeros = arith::ConstantOp::create(
        rewriter, loc, cast<TypedAttr>(rewriter.getZeroAttr(outType)));
    SmallVector<OpFoldResult> offsets, sizes, strides;
    sliceAlong(rewriter, outType, dim, *place, offsets, sizes, strides);
    Value placed = tensor::InsertSliceOp::create(
        rewriter, loc, op.getInput(), zeros, offsets, sizes, strides);
    rewriter.replaceOpWithNewOp<AllReduceOp>(
        op, placed, op.getGrid(), op.getGridAxes(), ReductionKind::Sum);
    return success();
  }
};

struct LowerReduceScatter : OpRewritePattern<ReduceScatterOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReduceScatterOp op,
                                PatternRewriter &rewriter) const override {
    auto inType = cast<RankedTensorType>(op.getInput().getType());
    auto outType = cast<RankedTensorType>(op.getResult().getType());
    int64_t dim = op.getScatterAxis().getSExtValue();
    FailureOr<ShardPlace> place =
        placeShard(rewriter, op, op.getGridAttr(), op.getGridAxes(),
                   inType.getDimSize(dim), outType.getDimSize(dim));
    if (failed(place))
      return failure();
    Location loc = op.getLoc();
    Value reduced =
        AllReduceOp::create(rewriter, loc, op.getInput(), op.getGrid(),
                            op.getGridAxes(), op.getReduction());
    rewriter.replaceOp(
        op, extractShard(rewriter, loc, reduced, outType, dim, *place));
    return success();
  }
};

struct LowerAllSlice : OpRewritePattern<AllSliceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AllSliceOp op,
                                PatternRewriter &rewriter) const override {
    auto inType = cast<RankedTensorType>(op.getInput().getType());
    auto outType = cast<RankedTensorType>(op.getResult().getType());
    int64_t dim = op.getSliceAxis().getSExtValue();
    FailureOr<ShardPlace> place =
        placeShard(rewriter, op, op.getGridAttr(), op.getGridAxes(),
                   inType.getDimSize(dim), outType.getDimSize(dim));
    if (failed(place))
      return failure();
    rewriter.replaceOp(op, extractShard(rewriter, op.getLoc(), op.getInput(),
                                        outType, dim, *place));
    return success();
  }
};

struct LowerCollectives
    : mlir::tp::impl::LowerCollectivesBase<LowerCollectives> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerAllGather, LowerReduceScatter, LowerAllSlice>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    // A collective left behind would only fail later, in
    // convert-shard-to-mpi, with a less precise message.
    WalkResult left = getOperation().walk([](Operation *op) {
      if (!isa<AllGatherOp, ReduceScatterOp, AllSliceOp>(op))
        return WalkResult::advance();
      op->emitOpError("cannot be lowered: needs a static, evenly split "
                      "shape on a static grid");
      return WalkResult::interrupt();
    });
    if (left.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
