//===- RecomputeLayers.cpp - tp-recompute-layers --------------------------===//
//
// Activation recomputation on the per-rank program. The forward is cut into
// segments at its residual adds; a segment that both starts and ends at one
// is a layer's block (attention or MLP). Whatever such a segment computes
// and the backward reads is computed again by copies of the segment's ops,
// placed before the backward's first read of the segment, so that the
// forward's values die at their last forward use; only the segments' inputs
// (the residual stream, and what the segment reads from before it) stay
// stashed. Segments are handled from the last to the first, so a copy that
// reads an earlier segment's value counts as a backward read of it.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tp {
#define GEN_PASS_DEF_RECOMPUTELAYERS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The first op of the backward: tp-differentiate appends it after the
/// forward; constants may have been hoisted or shared.
Operation *getBackwardStart(Block &block) {
  for (Operation &op : block)
    if (op.hasAttr(TPDialect::kBackwardAttrName) &&
        !op.hasTrait<OpTrait::ConstantLike>())
      return &op;
  return nullptr;
}

int64_t getBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements() * ((tensor.getElementTypeBitWidth() + 7) / 8);
}

/// What the backward reads from the forward, in bytes (as tp-explain
/// counts the stash).
int64_t getStashBytes(Block &block, Operation *start) {
  llvm::DenseSet<Value> stash;
  int64_t bytes = 0;
  for (Operation *op = start; op; op = op->getNextNode())
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || def->getBlock() != &block || !def->isBeforeInBlock(start) ||
          def->hasTrait<OpTrait::ConstantLike>())
        continue;
      if (stash.insert(operand).second)
        bytes += getBytes(operand.getType());
    }
  return bytes;
}

/// An init made from nothing: a tensor.empty, or a fill of one with a
/// constant. A copy makes its own rather than keep the forward's alive.
bool isFreshInit(Operation *op) {
  if (isa<tensor::EmptyOp>(op))
    return true;
  auto fill = dyn_cast<linalg::FillOp>(op);
  if (!fill)
    return false;
  Operation *value = fill.getInputs()[0].getDefiningOp();
  Operation *init = fill.getOutputs()[0].getDefiningOp();
  return value && value->hasTrait<OpTrait::ConstantLike>() && init &&
         isa<tensor::EmptyOp>(init);
}

/// The candidate residual add that `stream` is, or that it is computed
/// from through ops on values of its shape (a post-norm model's layer
/// norm after the add), within `depth` ops.
Operation *findStreamAdd(Value stream,
                         const llvm::DenseSet<Operation *> &candidates,
                         llvm::DenseSet<Operation *> &seen, unsigned depth) {
  Operation *def = stream ? stream.getDefiningOp() : nullptr;
  if (!def || !seen.insert(def).second)
    return nullptr;
  if (candidates.contains(def))
    return def;
  auto op = dyn_cast<linalg::LinalgOp>(def);
  if (!op || depth == 0)
    return nullptr;
  for (Value input : op.getDpsInputs())
    if (input.getType() == stream.getType())
      if (Operation *add = findStreamAdd(input, candidates, seen, depth - 1))
        return add;
  return nullptr;
}

struct RecomputeLayers : tp::impl::RecomputeLayersBase<RecomputeLayers> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    Block &block = func.getBody().front();
    Operation *start = getBackwardStart(block);
    if (!start)
      return;
    func->setAttr(TPDialect::kStashWithoutRecomputeAttrName,
                  IntegerAttr::get(IntegerType::get(&getContext(), 64),
                                   getStashBytes(block, start)));
    // The residual adds: through views of the blocks' products (one rank
    // keeps GPT-2's [batch·seq, hidden] products), so only those that form
    // the stream, where one's result is, or makes (through a post-norm),
    // another's stream operand (not a rotary embedding's sum, whose
    // product is a reshaped projection too).
    llvm::DenseSet<Operation *> candidates, adds;
    for (Operation &op : block) {
      if (&op == start)
        break;
      if (isResidualAdd(&op, /*throughViews=*/true))
        candidates.insert(&op);
    }
    for (Operation *op : candidates) {
      llvm::DenseSet<Operation *> seen;
      if (Operation *previous = findStreamAdd(
              getResidualStream(op, /*throughViews=*/true), candidates, seen,
              /*depth=*/12)) {
        adds.insert(op);
        adds.insert(previous);
      }
    }
    // Segment s holds the forward's ops after its s-th residual add, up to
    // and including the next; the adds' results are the stream.
    llvm::DenseMap<Operation *, int64_t> segmentOf;
    SmallVector<SmallVector<Operation *>> segments(1);
    for (Operation &op : block) {
      if (&op == start)
        break;
      segmentOf[&op] = segments.size() - 1;
      if (adds.contains(&op)) {
        segments.push_back({});
        continue;
      }
      if (!op.hasTrait<OpTrait::ConstantLike>())
        segments.back().push_back(&op);
    }
    // Segments 1 .. n-2 lie between two adds (the last one, after the last
    // add, is the head and the loss).
    for (int64_t s = static_cast<int64_t>(segments.size()) - 2; s >= 1; --s)
      recompute(block, start, segments[s], s, segmentOf, adds);
  }

  /// Copies the ops of segment `s` whose results the backward reads (with
  /// what they need from the segment) before the first such read, and
  /// points the backward's reads at the copies.
  /// `start` moves to the first copy when the copies go before it.
  void recompute(Block &block, Operation *&start, ArrayRef<Operation *> ops,
                 int64_t s,
                 const llvm::DenseMap<Operation *, int64_t> &segmentOf,
                 const llvm::DenseSet<Operation *> &adds) {
    auto inSegment = [&](Operation *op) {
      auto it = segmentOf.find(op);
      return it != segmentOf.end() && it->second == s && !adds.contains(op) &&
             !op->hasTrait<OpTrait::ConstantLike>();
    };
    // The backward's reads of the segment, as (the top-level op, the
    // operand), and the first of those ops.
    SmallVector<OpOperand *> reads;
    Operation *first = nullptr;
    for (Operation *op : ops)
      for (Value result : op->getResults())
        for (OpOperand &use : result.getUses()) {
          Operation *user = block.findAncestorOpInBlock(*use.getOwner());
          if (!user || (user != start && user->isBeforeInBlock(start)))
            continue;
          reads.push_back(&use);
          if (!first || user->isBeforeInBlock(first))
            first = user;
        }
    if (reads.empty())
      return;
    // What the reads need, in forward order.
    llvm::SetVector<Operation *> needed;
    SmallVector<Operation *> worklist;
    for (OpOperand *read : reads)
      worklist.push_back(read->get().getDefiningOp());
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (!needed.insert(op))
        continue;
      op->walk([&](Operation *nested) {
        for (Value operand : nested->getOperands())
          if (Operation *def = operand.getDefiningOp();
              def && def->getBlock() == &block &&
              (inSegment(def) || isFreshInit(def)) && !needed.contains(def))
            worklist.push_back(def);
      });
    }
    SmallVector<Operation *> order(needed.begin(), needed.end());
    llvm::sort(order, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    // The copies are the backward's (tp.backward), run again
    // (tp.recomputed).
    OpBuilder builder(first);
    IRMapping mapping;
    Operation *firstCopy = nullptr;
    for (Operation *op : order) {
      Operation *copy = builder.clone(*op, mapping);
      copy->setAttr(TPDialect::kBackwardAttrName, builder.getUnitAttr());
      copy->setAttr(TPDialect::kRecomputedAttrName, builder.getUnitAttr());
      if (!firstCopy)
        firstCopy = copy;
    }
    if (first == start)
      start = firstCopy;
    for (OpOperand *read : reads)
      read->set(mapping.lookup(read->get()));
  }
};

} // namespace
