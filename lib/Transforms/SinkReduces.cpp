//===- SinkReduces.cpp - reduces moved after a linear scale ---------------===//
//
// A step of tp-merge-all-reduces. A mixture of experts split inside each
// expert all-reduces each expert's output, then scales it by the token's
// routing weight and selects it (or 0) by the routing mask, both the same
// on every rank; the experts' results are then summed. all_reduce(p) * w
// is all_reduce(p * w) when w is replicated, so the reduce moves after the
// scale and the sum over experts becomes a sum of reduces, which
// tp-merge-all-reduces turns into one. Under sequence parallelism the
// reduce is a reduce-scatter and w is this rank's slice of the replicated
// routing weight: the slice's computation is redone on the whole value.
//
//===----------------------------------------------------------------------===//

#include "SinkReduces.h"

#include "tp/Dialect/TP/TPAttrs.h"
#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/CallInterfaces.h"

using namespace mlir;
using namespace mlir::tp;

namespace {

/// True if the body of `op` reads its init (an accumulation): the clones
/// here start from an empty tensor.
bool readsInit(linalg::GenericOp op) {
  return llvm::any_of(op.getDpsInitsMutable(), [&](OpOperand &init) {
    return !op.getMatchingBlockArgument(&init).use_empty();
  });
}

/// Rebuilds the whole value of which a value is this rank's slice along
/// one dim: through reshapes that keep that dim, and elementwise generics
/// that read no position (no linalg.index), back to an all_slice of a
/// replicated value. The clones go before `at`.
class Unslicer {
public:
  using Cache = DenseMap<std::pair<Value, int64_t>, Value>;
  Unslicer(const DenseSet<Value> &replicated, shard::ReduceScatterOp like,
           Cache &done)
      : replicated(replicated), like(like), done(done) {}
  Operation *at = nullptr;

  Value unslice(Value v, int64_t dim) {
    auto key = std::make_pair(v, dim);
    if (auto it = done.find(key); it != done.end())
      return it->second;
    Value whole = build(v, dim);
    done[key] = whole;
    return whole;
  }

private:
  Value build(Value v, int64_t dim) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return {};
    if (auto slice = dyn_cast<shard::AllSliceOp>(def)) {
      if (slice.getGrid() != like.getGrid() ||
          slice.getGridAxes() != like.getGridAxes() ||
          slice.getSliceAxis().getSExtValue() != dim ||
          !replicated.contains(slice.getInput()))
        return {};
      return slice.getInput();
    }
    OpBuilder b(at);
    if (auto reshape = dyn_cast<tensor::CollapseShapeOp>(def)) {
      std::optional<int64_t> src = sourceDim(
          reshape.getReassociationIndices()[dim], reshape.getSrcType());
      Value whole = src ? unslice(reshape.getSrc(), *src) : Value();
      if (!whole)
        return {};
      return tensor::CollapseShapeOp::create(b, def->getLoc(), whole,
                                             reshape.getReassociationIndices());
    }
    if (auto reshape = dyn_cast<tensor::ExpandShapeOp>(def)) {
      // The result dim `dim` is the one non-unit dim of its group.
      for (auto [i, group] :
           llvm::enumerate(reshape.getReassociationIndices())) {
        if (!llvm::is_contained(group, dim))
          continue;
        if (sourceDim(group, reshape.getResultType()) != dim)
          return {};
        Value whole = unslice(reshape.getSrc(), i);
        if (!whole)
          return {};
        SmallVector<int64_t> shape(reshape.getResultType().getShape());
        shape[dim] = cast<RankedTensorType>(whole.getType()).getDimSize(i);
        return tensor::ExpandShapeOp::create(
            b, def->getLoc(),
            RankedTensorType::get(shape,
                                  reshape.getResultType().getElementType()),
            whole, reshape.getReassociationIndices());
      }
      return {};
    }
    auto generic = dyn_cast<linalg::GenericOp>(def);
    if (!generic || generic->getNumResults() != 1 ||
        generic.getNumReductionLoops() != 0 ||
        !generic.getIndexingMapMatchingResult(generic->getResult(0))
             .isIdentity())
      return {};
    if (readsInit(generic))
      return {};
    for (Operation &inner : generic.getBody()->without_terminator()) {
      if (isa<linalg::IndexOp>(inner))
        return {};
      for (Value x : inner.getOperands())
        if (x.getParentBlock() != generic.getBody() && !replicated.contains(x))
          return {};
    }
    SmallVector<Value> inputs;
    for (OpOperand *input : generic.getDpsInputOperands()) {
      AffineMap map = generic.getMatchingIndexingMap(input);
      if (!map.isFunctionOfDim(dim)) {
        if (!replicated.contains(input->get()))
          return {};
        inputs.push_back(input->get());
        continue;
      }
      std::optional<unsigned> pos =
          map.getResultPosition(getAffineDimExpr(dim, generic.getContext()));
      Value whole = pos ? unslice(input->get(), *pos) : Value();
      if (!whole)
        return {};
      inputs.push_back(whole);
    }
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    for (auto [input, whole] :
         llvm::zip(generic.getDpsInputOperands(), inputs)) {
      AffineMap map = generic.getMatchingIndexingMap(input);
      if (std::optional<unsigned> pos = map.getResultPosition(
              getAffineDimExpr(dim, generic.getContext())))
        shape[dim] = cast<RankedTensorType>(whole.getType()).getDimSize(*pos);
    }
    Value init =
        tensor::EmptyOp::create(b, def->getLoc(), shape, type.getElementType());
    auto clone = linalg::GenericOp::create(
        b, def->getLoc(), TypeRange{init.getType()}, inputs, ValueRange{init},
        generic.getIndexingMapsArray(), generic.getIteratorTypesArray());
    IRMapping mapping;
    generic.getRegion().cloneInto(&clone.getRegion(), mapping);
    return clone.getResult(0);
  }

  /// The one dim of `group` (dims of `type`) that is not 1, if any.
  static std::optional<int64_t> sourceDim(ArrayRef<int64_t> group,
                                          RankedTensorType type) {
    std::optional<int64_t> found;
    for (int64_t d : group) {
      if (type.getDimSize(d) == 1)
        continue;
      if (found)
        return std::nullopt;
      found = d;
    }
    return found;
  }

  const DenseSet<Value> &replicated;
  shard::ReduceScatterOp like;
  /// Whole values rebuilt so far, shared by the reduces of one function
  /// (clones go before the first op that needs them, so they dominate the
  /// later ones).
  Cache &done;
};

/// The values every rank holds whole and alike: replicated arguments,
/// constants, the results of all-reduces and all-gathers, and what is
/// computed from those alone (values an op's regions read included).
DenseSet<Value> findReplicated(func::FuncOp func) {
  DenseSet<Value> replicated;
  for (BlockArgument arg : func.getArguments()) {
    auto layout = func.getArgAttrOfType<LayoutAttr>(arg.getArgNumber(),
                                                    TPDialect::kLayoutAttrName);
    if (!layout || layout.getRole() == SplitRole::Replicated)
      replicated.insert(arg);
  }
  func.walk([&](Operation *op) {
    if (op->getParentOp() != func)
      return;
    bool whole;
    if (isa<shard::AllReduceOp, shard::AllGatherOp>(op)) {
      whole = true;
    } else if (op->getDialect() &&
               op->getDialect()->getNamespace() ==
                   shard::ShardDialect::getDialectNamespace()) {
      whole = false; // a rank's slice, or its index
    } else if (isa<CallOpInterface>(op)) {
      whole = false; // the callee may read its rank
    } else if (auto layout =
                   op->getAttrOfType<LayoutAttr>(TPDialect::kLayoutAttrName);
               layout && layout.getRole() != SplitRole::Replicated) {
      whole = false;
    } else {
      whole = llvm::all_of(op->getOperands(),
                           [&](Value v) { return replicated.contains(v); });
      op->walk([&](Operation *inner) {
        for (Value v : inner->getOperands())
          if (!op->isAncestor(v.getParentBlock()->getParentOp()) &&
              !replicated.contains(v))
            whole = false;
      });
    }
    if (whole)
      for (Value r : op->getResults())
        replicated.insert(r);
  });
  return replicated;
}

/// True if the body of the elementwise `op` is linear in its argument `x`:
/// x only scaled (mulf or divf by a value not computed from x), negated, or
/// selected against 0 by a condition not computed from x.
bool isLinearIn(linalg::GenericOp op, BlockArgument x) {
  DenseSet<Value> fromX = {x};
  Block *body = op.getBody();
  for (Operation &inner : body->without_terminator()) {
    auto uses = [&](Value v) { return fromX.contains(v); };
    if (llvm::none_of(inner.getOperands(), uses))
      continue;
    bool linear = false;
    if (isa<arith::MulFOp>(inner))
      linear = uses(inner.getOperand(0)) != uses(inner.getOperand(1));
    else if (isa<arith::DivFOp>(inner))
      linear = !uses(inner.getOperand(1));
    else if (isa<arith::NegFOp>(inner))
      linear = true;
    else if (auto select = dyn_cast<arith::SelectOp>(inner))
      linear = !uses(select.getCondition()) &&
               ((uses(select.getTrueValue()) &&
                 matchPattern(select.getFalseValue(), m_AnyZeroFloat())) ||
                (uses(select.getFalseValue()) &&
                 matchPattern(select.getTrueValue(), m_AnyZeroFloat())));
    if (!linear)
      return false;
    fromX.insert(inner.getResult(0));
  }
  return fromX.contains(body->getTerminator()->getOperand(0));
}

/// Moves a sum-reduce (all-reduce, or reduce-scatter along `scatterAxis`)
/// used only by `op` after it when `op` is elementwise, linear in the
/// reduced value, and reads nothing else that differs between ranks (under
/// a reduce-scatter: replicated values broadcast along the scattered dim,
/// or slices of replicated values along it, read whole instead). Returns
/// the moved reduce, or null.
template <typename ReduceOp>
ReduceOp sinkReduce(linalg::GenericOp op, const DenseSet<Value> &replicated,
                    SmallVectorImpl<Operation *> *slicedReads = nullptr,
                    Unslicer::Cache *cache = nullptr) {
  if (op->getNumResults() != 1 || op.getNumReductionLoops() != 0 ||
      !op.getIndexingMapMatchingResult(op->getResult(0)).isIdentity())
    return {};
  OpOperand *reduced = nullptr;
  for (OpOperand *input : op.getDpsInputOperands())
    if (auto reduce = getSoleReduce<ReduceOp>(input->get());
        reduce && input->get().getType() == op->getResult(0).getType() &&
        op.getMatchingIndexingMap(input).isIdentity()) {
      reduced = input;
      break;
    }
  if (!reduced || readsInit(op) ||
      !isLinearIn(op, op.getMatchingBlockArgument(reduced)))
    return {};
  auto reduce = reduced->get().template getDefiningOp<ReduceOp>();
  constexpr bool scatters = std::is_same_v<ReduceOp, shard::ReduceScatterOp>;
  std::optional<Unslicer> unslicerStorage;
  if constexpr (scatters) {
    unslicerStorage.emplace(replicated, reduce, *cache);
    unslicerStorage->at = op;
  }
  SmallVector<Value> inputs;
  for (OpOperand *input : op.getDpsInputOperands()) {
    Value v = input->get();
    if (input == reduced) {
      inputs.push_back(reduce.getInput());
      continue;
    }
    if constexpr (scatters) {
      // Read along the scattered dim: this rank's slice of a replicated
      // value, read whole instead.
      AffineMap map = op.getMatchingIndexingMap(input);
      int64_t axis = reduce.getScatterAxis().getSExtValue();
      if (map.isFunctionOfDim(axis)) {
        std::optional<unsigned> at =
            map.getResultPosition(getAffineDimExpr(axis, op.getContext()));
        Value whole = at ? unslicerStorage->unslice(v, *at) : Value();
        if (!whole)
          return {};
        inputs.push_back(whole);
        if (Operation *def = v.getDefiningOp(); def && slicedReads)
          slicedReads->push_back(def);
        continue;
      }
    }
    if (!replicated.contains(v))
      return {};
    inputs.push_back(v);
  }
  for (Operation &inner : op.getBody()->without_terminator()) {
    // Under a reduce-scatter the loops run over the whole activation, no
    // longer this rank's slice: nothing may read where it is.
    if (scatters && isa<linalg::IndexOp>(inner))
      return {};
    for (Value v : inner.getOperands())
      if (v.getParentBlock() != op.getBody() &&
          (!replicated.contains(v) ||
           (scatters && isa<RankedTensorType>(v.getType()))))
        return {};
  }

  OpBuilder b(op);
  Location loc = op.getLoc();
  Value partial = reduce.getInput();
  Value init = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, partial),
      cast<RankedTensorType>(op->getResult(0).getType()).getElementType());
  IRMapping mapping;
  auto scaled = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, inputs, ValueRange{init},
      op.getIndexingMapsArray(), op.getIteratorTypesArray());
  op.getRegion().cloneInto(&scaled.getRegion(), mapping);
  ReduceOp sum = createLike(b, loc, scaled.getResult(0), reduce);
  op->getResult(0).replaceAllUsesWith(sum.getResult());
  op->erase();
  reduce->erase();
  return sum;
}

/// True if `v` is read once, by an elementwise generic linear in it: a
/// scale that a reduce of `v` could move past.
bool readByScale(Value v) {
  if (!v.hasOneUse())
    return false;
  OpOperand &use = *v.getUses().begin();
  auto generic = dyn_cast<linalg::GenericOp>(use.getOwner());
  return generic && generic.isDpsInput(&use) &&
         generic.getNumReductionLoops() == 0 &&
         generic.getMatchingIndexingMap(&use).isIdentity() &&
         isLinearIn(generic, generic.getMatchingBlockArgument(&use));
}

/// Moves a sum all-reduce used only by a reshape (tensor.expand_shape or
/// collapse_shape) after it, where that brings it to a scale (which it may
/// then move past) or it was moved here already (on its way to the sum of
/// which it is a term): the reshape of a sum over the ranks is the sum of
/// the reshapes. A gate of shape [tokens, 1] broadcast over a unit dim that
/// a reshape added, as a shared expert's is in a one-token decode step,
/// needs this. Returns the moved reduce, or null.
shard::AllReduceOp
sinkReduceThroughReshape(Operation *reshape,
                         const DenseSet<Operation *> &moved) {
  if (!isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(reshape))
    return {};
  auto reduce = getSoleReduce<shard::AllReduceOp>(reshape->getOperand(0));
  if (!reduce ||
      (!moved.contains(reduce) && !readByScale(reshape->getResult(0))))
    return {};
  OpBuilder b(reshape);
  IRMapping mapping;
  mapping.map(reduce.getResult(), reduce.getInput());
  Operation *partial = b.clone(*reshape, mapping);
  auto sum = createLike(b, reduce.getLoc(), partial->getResult(0), reduce);
  reshape->getResult(0).replaceAllUsesWith(sum.getResult());
  reshape->erase();
  reduce->erase();
  return sum;
}

} // namespace

void mlir::tp::sinkReducesThroughScales(func::FuncOp func) {
  DenseSet<Value> replicated = findReplicated(func);
  // In order, so that a reduce moved past a reshape meets the scale after
  // it, and one moved past the scale the reshape after that.
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().getOps())
    if (isa<linalg::GenericOp, tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
            op))
      ops.push_back(&op);
  SmallVector<Operation *> slicedReads;
  Unslicer::Cache cache;
  DenseSet<Operation *> moved;
  for (Operation *op : ops) {
    auto generic = dyn_cast<linalg::GenericOp>(op);
    if (!generic) {
      if (shard::AllReduceOp sum = sinkReduceThroughReshape(op, moved))
        moved.insert(sum);
      continue;
    }
    if (shard::AllReduceOp sum =
            sinkReduce<shard::AllReduceOp>(generic, replicated))
      moved.insert(sum);
    else
      sinkReduce<shard::ReduceScatterOp>(generic, replicated, &slicedReads,
                                         &cache);
  }
  // The slices read before, and what computed them, are dead now.
  SmallVector<Operation *> worklist(slicedReads.begin(), slicedReads.end());
  DenseSet<Operation *> erased;
  while (!worklist.empty()) {
    Operation *dead = worklist.pop_back_val();
    if (erased.contains(dead) || !isOpTriviallyDead(dead))
      continue;
    for (Value operand : dead->getOperands())
      if (Operation *def = operand.getDefiningOp())
        worklist.push_back(def);
    erased.insert(dead);
    dead->erase();
  }
}

shard::AllReduceOp mlir::tp::createLike(OpBuilder &b, Location loc,
                                        Value partial,
                                        shard::AllReduceOp like) {
  return shard::AllReduceOp::create(b, loc, partial, like.getGrid(),
                                    like.getGridAxes(), like.getReduction());
}
shard::ReduceScatterOp mlir::tp::createLike(OpBuilder &b, Location loc,
                                            Value partial,
                                            shard::ReduceScatterOp like) {
  return shard::ReduceScatterOp::create(
      b, loc, TypeRange{like.getResult().getType()}, like.getGridAttr(),
      like.getGridAxesAttr(), partial, like.getReductionAttr(),
      like.getScatterAxisAttr());
}
