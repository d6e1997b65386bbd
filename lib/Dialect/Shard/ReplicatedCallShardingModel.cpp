//===- ReplicatedCallShardingModel.cpp - sharding of func.call ------------===//
//
// A func.call runs whole on every rank: its model has no loops, so every
// operand and result is replicated and partition copies the call. This is
// what lets tp-outline-unpartitionable park ops that upstream partition
// rejects (convolutions) behind a call.
//
//===----------------------------------------------------------------------===//

#include "DataMovementShardingModels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::shard;

namespace {

struct ReplicatedCallShardingModel
    : public ShardingInterface::ExternalModel<ReplicatedCallShardingModel,
                                              func::CallOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    return {};
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    return SmallVector<AffineMap>(op->getNumOperands() + op->getNumResults(),
                                  AffineMap::get(op->getContext()));
  }
};

} // namespace

void mlir::tp::registerReplicatedCallShardingModel(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    func::CallOp::attachInterface<ReplicatedCallShardingModel>(*ctx);
  });
}
