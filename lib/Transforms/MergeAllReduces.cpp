//===- MergeAllReduces.cpp - tp-merge-all-reduces -------------------------===//
//
// A parallel-residual block (GPT-NeoX, GPT-J, Falcon, Phi) adds attention
// and MLP outputs that read the same input: after partition both end in an
// all-reduce, and the sum of the two reduced values is what the model uses.
// The sum of two all-reduces is the all-reduce of the sum: each rank adds its
// two partial results and one all-reduce sends half the bytes. Biases added
// on the way (after each reduce, so that they count once) are added after
// the merged reduce instead. Under sequence parallelism the same holds of
// the two reduce-scatters.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_MERGEALLREDUCES
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// An elementwise float add of two operands into a result of `type`.
bool isBinaryAdd(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 2 || op->getNumResults() != 1 ||
      op.getNumReductionLoops() != 0 ||
      !op.getIndexingMapMatchingResult(op->getResult(0)).isIdentity())
    return false;
  Block *body = op.getBody();
  auto add = dyn_cast_or_null<arith::AddFOp>(
      body->getTerminator()->getOperand(0).getDefiningOp());
  return add && body->getOperations().size() == 2 &&
         llvm::is_contained(body->getArguments(), add.getLhs()) &&
         llvm::is_contained(body->getArguments(), add.getRhs()) &&
         add.getLhs() != add.getRhs() && add.getLhs() != body->getArgument(2) &&
         add.getRhs() != body->getArgument(2);
}

/// A summed all-reduce or reduce-scatter used only once.
template <typename ReduceOp>
ReduceOp getSoleReduce(Value v) {
  auto reduce = v.template getDefiningOp<ReduceOp>();
  if (!reduce || !reduce->hasOneUse() ||
      reduce.getReduction() != shard::ReductionKind::Sum)
    return {};
  if constexpr (std::is_same_v<ReduceOp, shard::AllReduceOp>)
    if (reduce.getInput().getType() != reduce.getResult().getType())
      return {};
  return reduce;
}

/// `v` as reduce(p), or as reduce(p) + bias through one single-use add
/// whose other operand is not reduced (the bias of a row-parallel layer).
/// Sets `biasAdd` in the second case.
template <typename ReduceOp>
ReduceOp matchReduced(Value v, linalg::GenericOp &biasAdd) {
  biasAdd = {};
  if (ReduceOp reduce = getSoleReduce<ReduceOp>(v))
    return reduce;
  auto add = v.getDefiningOp<linalg::GenericOp>();
  if (!add || !add->hasOneUse() || !isBinaryAdd(add))
    return {};
  for (OpOperand *input : add.getDpsInputOperands()) {
    if (input->get().getType() != v.getType() ||
        !add.getMatchingIndexingMap(input).isIdentity())
      continue;
    if (ReduceOp reduce = getSoleReduce<ReduceOp>(input->get())) {
      biasAdd = add;
      return reduce;
    }
  }
  return {};
}

/// True if `a` and `b` reduce over the same ranks into the same layout.
bool sameCollective(shard::AllReduceOp a, shard::AllReduceOp b) {
  return a.getGrid() == b.getGrid() && a.getGridAxes() == b.getGridAxes();
}
bool sameCollective(shard::ReduceScatterOp a, shard::ReduceScatterOp b) {
  return a.getGrid() == b.getGrid() && a.getGridAxes() == b.getGridAxes() &&
         a.getScatterAxis() == b.getScatterAxis() &&
         a.getInput().getType() == b.getInput().getType();
}

shard::AllReduceOp createLike(OpBuilder &b, Location loc, Value partial,
                              shard::AllReduceOp like) {
  return shard::AllReduceOp::create(b, loc, partial, like.getGrid(),
                                    like.getGridAxes(), like.getReduction());
}
shard::ReduceScatterOp createLike(OpBuilder &b, Location loc, Value partial,
                                  shard::ReduceScatterOp like) {
  return shard::ReduceScatterOp::create(
      b, loc, TypeRange{like.getResult().getType()}, like.getGridAttr(),
      like.getGridAxesAttr(), partial, like.getReductionAttr(),
      like.getScatterAxisAttr());
}

template <typename ReduceOp>
struct MergeSummedReduces : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp sum,
                                PatternRewriter &rewriter) const override {
    if (!isBinaryAdd(sum))
      return rewriter.notifyMatchFailure(sum, "not an elementwise add");
    Value lhs = sum.getDpsInputs()[0], rhs = sum.getDpsInputs()[1];
    Type type = sum->getResult(0).getType();
    if (lhs.getType() != type || rhs.getType() != type ||
        !sum.getMatchingIndexingMap(sum.getDpsInputOperand(0)).isIdentity() ||
        !sum.getMatchingIndexingMap(sum.getDpsInputOperand(1)).isIdentity())
      return rewriter.notifyMatchFailure(sum, "operands are not the result's "
                                              "shape");
    linalg::GenericOp lhsBias, rhsBias;
    ReduceOp lhsReduce = matchReduced<ReduceOp>(lhs, lhsBias);
    ReduceOp rhsReduce = matchReduced<ReduceOp>(rhs, rhsBias);
    if (!lhsReduce || !rhsReduce || lhsReduce == rhsReduce)
      return rewriter.notifyMatchFailure(sum, "not a sum of two reduces");
    if (!sameCollective(lhsReduce, rhsReduce))
      return rewriter.notifyMatchFailure(sum, "reduces on other axes");
    // Keep the side without a bias as the one whose bias (if any) stays in
    // place; the other side's bias moves after the merged reduce.
    if (!lhsBias && rhsBias) {
      std::swap(lhsReduce, rhsReduce);
      std::swap(lhsBias, rhsBias);
    }
    // The merged reduce sits where the later of the two was.
    ReduceOp later =
        lhsReduce->isBeforeInBlock(rhsReduce) ? rhsReduce : lhsReduce;
    if (lhsReduce->getBlock() != rhsReduce->getBlock() ||
        sum->getBlock() != later->getBlock())
      return rewriter.notifyMatchFailure(sum, "across blocks");
    Location loc = sum.getLoc();
    rewriter.setInsertionPoint(later);
    // The partial sums are added in the reduce's input shape (the whole
    // activation; a reduce-scatter's result is this rank's slice of it).
    Type partialType = lhsReduce.getInput().getType();
    auto rankedType = cast<RankedTensorType>(partialType);
    Value init = tensor::EmptyOp::create(rewriter, loc, rankedType.getShape(),
                                         rankedType.getElementType());
    Value partial =
        linalg::GenericOp::create(
            rewriter, loc, partialType,
            ValueRange{lhsReduce.getInput(), rhsReduce.getInput()}, init,
            SmallVector<AffineMap>(
                3, sum.getIndexingMapMatchingResult(sum->getResult(0))),
            sum.getIteratorTypesArray(),
            [](OpBuilder &b, Location l, ValueRange args) {
              Value s = arith::AddFOp::create(b, l, args[0], args[1]);
              linalg::YieldOp::create(b, l, s);
            })
            .getResult(0);
    ReduceOp merged = createLike(rewriter, loc, partial, lhsReduce);
    // lhs: reduce(p0 + p1) (+ its bias, through the existing add, which must
    // now come after the merged reduce).
    rewriter.replaceOp(lhsReduce, merged.getResult());
    if (lhsBias && lhsBias->isBeforeInBlock(merged))
      rewriter.moveOpAfter(lhsBias, merged);
    Value lhsValue =
        lhsBias ? lhsBias->getResult(0) : Value(merged.getResult());
    if (!rhsBias) {
      rewriter.replaceOp(sum, lhsValue);
      rewriter.eraseOp(rhsReduce);
      return success();
    }
    // rhs was reduce(p1) + bias: the sum becomes lhs + bias, read through
    // the bias's own map.
    OpOperand *biasOperand = nullptr;
    for (OpOperand *input : rhsBias.getDpsInputOperands())
      if (input->get() != rhsReduce.getResult())
        biasOperand = input;
    AffineMap biasMap = rhsBias.getMatchingIndexingMap(biasOperand);
    AffineMap identity = sum.getIndexingMapMatchingResult(sum->getResult(0));
    rewriter.setInsertionPoint(sum);
    Value result =
        linalg::GenericOp::create(
            rewriter, loc, type, ValueRange{lhsValue, biasOperand->get()},
            sum.getDpsInits(), {identity, biasMap, identity},
            sum.getIteratorTypesArray(),
            [](OpBuilder &b, Location l, ValueRange args) {
              Value s = arith::AddFOp::create(b, l, args[0], args[1]);
              linalg::YieldOp::create(b, l, s);
            })
            .getResult(0);
    rewriter.replaceOp(sum, result);
    rewriter.eraseOp(rhsBias);
    rewriter.eraseOp(rhsReduce);
    return success();
  }
};

struct MergeAllReduces : tp::impl::MergeAllReducesBase<MergeAllReduces> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<MergeSummedReduces<shard::AllReduceOp>,
                 MergeSummedReduces<shard::ReduceScatterOp>>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
