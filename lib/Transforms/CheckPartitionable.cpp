//===- CheckPartitionable.cpp - tp-check-partitionable --------------------===//
//
// Guards upstream shard-partition: it dereferences annotations it never
// checks (LLVM 22), so a missing one is a segfault. Checking the same rules
// first turns that into a diagnostic that names the op.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::tp {
#define GEN_PASS_DEF_CHECKPARTITIONABLE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

bool needsAnnotation(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() > 0;
}

/// Whether an operand's sharding splits a reduction loop of `op`. Partition
/// rebuilds such an op through its own operand mapping (LLVM 22,
/// `partitionLinalgOpWithShardedReduction`), which knows nothing of values
/// the body reads from outside.
bool splitsReduction(linalg::LinalgOp op) {
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  for (OpOperand &operand : op->getOpOperands()) {
    auto shardOp = operand.get().getDefiningOp<shard::ShardOp>();
    if (!shardOp)
      continue;
    shard::Sharding sharding(shardOp.getSharding());
    AffineMap map = op.getMatchingIndexingMap(&operand);
    for (auto [dim, axes] : llvm::enumerate(sharding.getSplitAxes())) {
      if (axes.empty() || dim >= map.getNumResults())
        continue;
      auto loop = dyn_cast<AffineDimExpr>(map.getResult(dim));
      if (loop &&
          iterators[loop.getPosition()] == utils::IteratorType::reduction)
        return true;
    }
  }
  return false;
}

LogicalResult checkOp(Operation *op) {
  if (isa<shard::ShardOp, shard::ShardingOp, shard::GridOp>(op) ||
      op->hasTrait<OpTrait::ConstantLike>())
    return success();
  for (OpOperand &operand : op->getOpOperands()) {
    if (!needsAnnotation(operand.get().getType()))
      continue;
    auto shardOp = operand.get().getDefiningOp<shard::ShardOp>();
    if (!shardOp || !shardOp.getAnnotateForUsers())
      return op->emitError()
             << "cannot partition: tensor operand "
             << operand.getOperandNumber()
             << " has no sharding (no annotate_for_users shard.shard)";
  }
  for (OpResult result : op->getResults()) {
    if (!needsAnnotation(result.getType()))
      continue;
    if (!result.hasOneUse())
      return op->emitError()
             << "cannot partition: result " << result.getResultNumber()
             << " has " << std::distance(result.use_begin(), result.use_end())
             << " uses; expected one shard.shard";
    auto shardOp = dyn_cast<shard::ShardOp>(*result.getUsers().begin());
    if (!shardOp || shardOp.getAnnotateForUsers())
      return op->emitError()
             << "cannot partition: result " << result.getResultNumber()
             << " has no sharding (no shard.shard)";
  }
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
    SetVector<Value> captured;
    getUsedValuesDefinedAbove(op->getRegions(), captured);
    if (!captured.empty() && splitsReduction(linalgOp)) {
      InFlightDiagnostic diag = op->emitError()
                                << "cannot partition: the body of this split "
                                   "reduction reads a value defined outside it";
      diag.attachNote(captured.front().getLoc()) << "value defined here";
      return diag;
    }
  }
  return success();
}

struct CheckPartitionable
    : tp::impl::CheckPartitionableBase<CheckPartitionable> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    // Partition, like this check, only touches functions with annotations.
    if (func.isExternal() || func.getBody().getOps<shard::ShardOp>().empty())
      return;
    for (BlockArgument arg : func.getArguments()) {
      if (!needsAnnotation(arg.getType()))
        continue;
      if (!arg.hasOneUse() || !isa<shard::ShardOp>(*arg.getUsers().begin())) {
        func.emitError() << "cannot partition: argument " << arg.getArgNumber()
                         << " must be read by exactly one shard.shard";
        return signalPassFailure();
      }
    }
    for (Operation &op : func.getBody().front())
      if (failed(checkOp(&op)))
        return signalPassFailure();
  }
};

} // namespace
