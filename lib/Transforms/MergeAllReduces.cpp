//===- MergeAllReduces.cpp - tp-merge-all-reduces -------------------------===//
//
// A parallel-residual block (GPT-NeoX, GPT-J, Falcon, Phi) adds attention
// and MLP outputs that read the same input: after partition both end in an
// all-reduce, and the sum of the two reduced values is what the model uses.
// The sum of reduces is the reduce of the sum: each rank adds its partial
// results and one all-reduce sends half the bytes. The other terms of the
// sum (the residual, biases added after each reduce so that they count once)
// are added after the merged reduce, whatever the order the model added
// them in. Under sequence parallelism the same holds of reduce-scatters.
//
// A term may reach the sum through a scale first (a mixture of experts'
// routing weight and mask): SinkReduces.cpp moves such reduces after the
// scale, so that the sum over experts ends in one reduce.
//
//===----------------------------------------------------------------------===//

#include "SinkReduces.h"

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

/// An elementwise float add of two operands (either may be broadcast).
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

/// True if `input` of the add `user` is read whole, in the result's shape.
bool isReadWhole(linalg::GenericOp user, OpOperand &input) {
  return user.isDpsInput(&input) &&
         input.get().getType() == user->getResult(0).getType() &&
         user.getMatchingIndexingMap(&input).isIdentity();
}

/// The add that computes `input` of the add `user` if it is part of the
/// same sum: read whole, used nowhere else, in the same block.
linalg::GenericOp getInnerAdd(linalg::GenericOp user, OpOperand &input) {
  auto add = input.get().getDefiningOp<linalg::GenericOp>();
  if (!add || !add->hasOneUse() || add->getBlock() != user->getBlock() ||
      !isBinaryAdd(add) || !isReadWhole(user, input))
    return {};
  return add;
}

/// One term of a sum: a value and the map through which it is read.
struct Term {
  Value value;
  AffineMap map;
};

/// The terms of the sum that `add` computes, left to right, through the
/// adds inside it (appended to `adds`, outer before inner).
void collectTerms(linalg::GenericOp add, SmallVectorImpl<Term> &terms,
                  SmallVectorImpl<linalg::GenericOp> &adds) {
  adds.push_back(add);
  for (OpOperand *input : add.getDpsInputOperands()) {
    if (linalg::GenericOp inner = getInnerAdd(add, *input))
      collectTerms(inner, terms, adds);
    else
      terms.push_back({input->get(), add.getMatchingIndexingMap(input)});
  }
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

/// `lhs + rhs` in the shape of `init`, `lhs` read whole and `rhs` through
/// `rhsMap`.
Value createAdd(OpBuilder &b, Location loc, Value lhs, Value rhs,
                AffineMap rhsMap, Value init) {
  auto type = cast<RankedTensorType>(init.getType());
  AffineMap identity =
      AffineMap::getMultiDimIdentityMap(type.getRank(), b.getContext());
  return linalg::GenericOp::create(
             b, loc, type, ValueRange{lhs, rhs}, init,
             {identity, rhsMap, identity},
             SmallVector<utils::IteratorType>(type.getRank(),
                                              utils::IteratorType::parallel),
             [](OpBuilder &b, Location l, ValueRange args) {
               Value s = arith::AddFOp::create(b, l, args[0], args[1]);
               linalg::YieldOp::create(b, l, s);
             })
      .getResult(0);
}

/// Rewrites a sum of adds whose terms include two or more reduces of the
/// same kind into one reduce of the sum of their partial results, plus the
/// other terms after it.
template <typename ReduceOp>
struct MergeSummedReduces : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp root,
                                PatternRewriter &rewriter) const override {
    if (!isBinaryAdd(root))
      return rewriter.notifyMatchFailure(root, "not an elementwise add");
    // The whole sum is rewritten from its outermost add.
    if (root->hasOneUse()) {
      auto user = dyn_cast<linalg::GenericOp>(*root->user_begin());
      if (user && isBinaryAdd(user) && getInnerAdd(user, *root->use_begin()))
        return rewriter.notifyMatchFailure(root, "inside a larger sum");
    }
    SmallVector<Term> terms;
    SmallVector<linalg::GenericOp> adds;
    collectTerms(root, terms, adds);

    // The first reduce that shares its collective with another term, and
    // all those that do.
    Type type = root->getResult(0).getType();
    auto getReduce = [&](const Term &term) -> ReduceOp {
      if (term.value.getType() != type || !term.map.isIdentity())
        return {};
      ReduceOp reduce = getSoleReduce<ReduceOp>(term.value);
      if (!reduce || reduce->getBlock() != root->getBlock())
        return {};
      return reduce;
    };
    SmallVector<ReduceOp> group;
    SmallVector<bool> merged(terms.size(), false);
    for (auto [i, term] : llvm::enumerate(terms)) {
      ReduceOp first = getReduce(term);
      if (!first)
        continue;
      group.assign({first});
      merged.assign(terms.size(), false);
      merged[i] = true;
      for (size_t j = i + 1; j < terms.size(); ++j) {
        ReduceOp other = getReduce(terms[j]);
        if (other && sameCollective(first, other)) {
          group.push_back(other);
          merged[j] = true;
        }
      }
      if (group.size() > 1)
        break;
    }
    if (group.size() < 2)
      return rewriter.notifyMatchFailure(root, "fewer than two reduces of "
                                               "one kind in the sum");

    // The partial results are added, and reduced once, where the last of
    // the reduces was: every partial result is computed by then.
    ReduceOp later = group.front();
    for (ReduceOp reduce : group)
      if (later->isBeforeInBlock(reduce))
        later = reduce;
    Location loc = root.getLoc();
    rewriter.setInsertionPoint(later);
    // In the reduce's input shape (the whole activation; a reduce-scatter's
    // result is this rank's slice of it).
    Value first = group.front().getInput();
    Value init = tensor::EmptyOp::create(
        rewriter, loc, tensor::getMixedSizes(rewriter, loc, first),
        cast<RankedTensorType>(first.getType()).getElementType());
    AffineMap identity = AffineMap::getMultiDimIdentityMap(
        cast<RankedTensorType>(first.getType()).getRank(),
        rewriter.getContext());
    Value partial = first;
    for (ReduceOp reduce : llvm::drop_begin(group))
      partial =
          createAdd(rewriter, loc, partial, reduce.getInput(), identity, init);
    Value sum = createLike(rewriter, loc, partial, group.front()).getResult();

    // The other terms follow in the order the model wrote them, broadcast
    // ones (biases) before whole activations (the residual): the block's
    // output, then one residual add, as a sequential layer ends.
    rewriter.setInsertionPoint(root);
    for (bool whole : {false, true})
      for (auto [term, isMerged] : llvm::zip_equal(terms, merged))
        if (!isMerged && term.map.isIdentity() == whole)
          sum = createAdd(rewriter, loc, sum, term.value, term.map,
                          root.getDpsInits()[0]);
    rewriter.replaceOp(root, sum);
    for (linalg::GenericOp add : llvm::drop_begin(adds))
      rewriter.eraseOp(add);
    for (ReduceOp reduce : group)
      rewriter.eraseOp(reduce);
    return success();
  }
};

struct MergeAllReduces : tp::impl::MergeAllReducesBase<MergeAllReduces> {
  void runOnOperation() override {
    sinkReducesThroughScales(getOperation());
    RewritePatternSet patterns(&getContext());
    patterns.add<MergeSummedReduces<shard::AllReduceOp>,
                 MergeSummedReduces<shard::ReduceScatterOp>>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
