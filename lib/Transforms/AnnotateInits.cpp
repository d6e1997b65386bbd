//===- AnnotateInits.cpp - tp-annotate-inits ------------------------------===//
//
// After sharding propagation: a tensor.empty that its users read through
// agreeing annotate_for_users shard.shard ops, but whose own result has no
// shard.shard, gets that sharding (partition needs both); so does a fill of
// one, and the empty it fills.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::tp {
#define GEN_PASS_DEF_ANNOTATEINITS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The sharding every user of `value` reads it with, if they all read it
/// through annotate_for_users shard.shard ops that agree.
Value getReadSharding(Value value) {
  Value sharding;
  for (Operation *user : value.getUsers()) {
    auto shardOp = dyn_cast<shard::ShardOp>(user);
    if (!shardOp || !shardOp.getAnnotateForUsers())
      return {};
    if (!sharding) {
      sharding = shardOp.getSharding();
      continue;
    }
    if (shard::Sharding(sharding) != shard::Sharding(shardOp.getSharding()))
      return {};
  }
  return sharding;
}

/// Gives `value`, an op's only result, its own shard.shard to `sharding`
/// (after both are defined).
void annotateResult(Value value, Value sharding) {
  Operation *def = value.getDefiningOp();
  OpBuilder b(def->getContext());
  b.setInsertionPointAfter(def);
  if (sharding.getParentBlock() == def->getBlock() &&
      def->isBeforeInBlock(sharding.getDefiningOp()))
    b.setInsertionPointAfterValue(sharding);
  auto shardOp = shard::ShardOp::create(b, value.getLoc(), value, sharding,
                                        /*annotate_for_users=*/false);
  value.replaceAllUsesExcept(shardOp.getResult(), shardOp);
}

struct AnnotateInits : tp::impl::AnnotateInitsBase<AnnotateInits> {
  void runOnOperation() override {
    // A fill of an empty tensor whose result its users read through
    // agreeing shardings (a reduction's init that propagation passed by):
    // the fill's result gets it, and the fill reads its init with it.
    getOperation().walk([](linalg::FillOp fill) {
      if (!fill.hasPureTensorSemantics() || fill->getNumResults() != 1)
        return;
      Value result = fill->getResult(0);
      auto empty = fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>();
      if (result.use_empty() || !empty || !empty->hasOneUse())
        return;
      Value sharding = getReadSharding(result);
      Operation *def = sharding ? sharding.getDefiningOp() : nullptr;
      if (!def || def->getNumOperands() != 0)
        return;
      annotateResult(result, sharding);
      // The users' sharding is defined after them: the fill and its init
      // read a copy made before the empty.
      OpBuilder b(empty);
      Value before = b.clone(*def)->getResult(0);
      b.setInsertionPoint(fill);
      auto read = shard::ShardOp::create(b, fill.getLoc(), empty.getResult(),
                                         before, /*annotate_for_users=*/true);
      fill.getOutputsMutable()[0].set(read.getResult());
    });
    getOperation().walk([](tensor::EmptyOp empty) {
      if (empty->use_empty())
        return;
      if (Value sharding = getReadSharding(empty.getResult()))
        annotateResult(empty.getResult(), sharding);
    });
  }
};

} // namespace
