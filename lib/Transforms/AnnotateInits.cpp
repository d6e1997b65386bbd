//===- AnnotateInits.cpp - tp-annotate-inits ------------------------------===//
//
// After sharding propagation: a tensor.empty that its users read through
// agreeing annotate_for_users shard.shard ops, but whose own result has no
// shard.shard, gets that sharding (partition needs both).
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::tp {
#define GEN_PASS_DEF_ANNOTATEINITS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The sharding every user of `empty` reads it with, if they all read it
/// through annotate_for_users shard.shard ops that agree.
Value getReadSharding(tensor::EmptyOp empty) {
  Value sharding;
  for (Operation *user : empty->getUsers()) {
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

struct AnnotateInits : tp::impl::AnnotateInitsBase<AnnotateInits> {
  void runOnOperation() override {
    getOperation().walk([](tensor::EmptyOp empty) {
      if (empty->use_empty())
        return;
      Value sharding = getReadSharding(empty);
      if (!sharding)
        return;
      OpBuilder b(empty->getContext());
      b.setInsertionPointAfter(empty);
      if (sharding.getParentBlock() == empty->getBlock() &&
          empty->isBeforeInBlock(sharding.getDefiningOp()))
        b.setInsertionPointAfterValue(sharding);
      auto shardOp = shard::ShardOp::create(b, empty.getLoc(), empty, sharding,
                                            /*annotate_for_users=*/false);
      empty.getResult().replaceAllUsesExcept(shardOp.getResult(), shardOp);
    });
  }
};

} // namespace
