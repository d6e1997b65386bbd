//===- ReplicatedCallShardingModel.cpp - sharding of func.call ------------===//
//
// A func.call runs whole on every rank: its model has no loops, so every
// operand and result is replicated and partition copies the call. This is
// what lets tp-outline-unpartitionable park ops that upstream partition
// rejects (convolutions) behind a call. A call it gives a per-rank callee
// (tp.local_callee) reads and writes the split it annotated instead, and
// partition calls that callee.
//
//===----------------------------------------------------------------------===//

#include "DataMovementShardingModels.h"
#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::shard;

namespace {

FlatSymbolRefAttr getLocalCallee(Operation *op) {
  return op->getAttrOfType<FlatSymbolRefAttr>(
      tp::TPDialect::kLocalCalleeAttrName);
}

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

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    // tp-outline-unpartitionable annotated every operand and result of a
    // call with a per-rank callee: there is nothing to propagate.
    if (getLocalCallee(op))
      return ShardingOption::makeEmpty();
    return shard::detail::defaultGetShardingOption(op, operandShardings,
                                                   resultShardings);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto isSplit = [](const Sharding &s) { return s && !isFullReplication(s); };
    FlatSymbolRefAttr local = getLocalCallee(op);
    if (!local || (llvm::none_of(operandShardings, isSplit) &&
                   llvm::none_of(resultShardings, isSplit))) {
      builder.clone(*op, partitionMap);
      return success();
    }
    SmallVector<Type> resultTypes;
    for (auto [result, sharding] :
         llvm::zip_equal(op->getResults(), resultShardings)) {
      resultTypes.push_back(
          sharding ? shardType(
                         result.getType(),
                         getGridOrNull(op, sharding.getGridAttr(), symbolTable),
                         sharding)
                   : result.getType());
    }
    auto call = func::CallOp::create(builder, op->getLoc(), local, resultTypes,
                                     partitionedOperands);
    partitionMap.map(op->getResults(), call.getResults());
    partitionMap.map(op, call.getOperation());
    return success();
  }
};

} // namespace

void mlir::tp::registerReplicatedCallShardingModel(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    func::CallOp::attachInterface<ReplicatedCallShardingModel>(*ctx);
  });
}
