//===- ShardingExtensions.cpp - register tp-mlir's sharding models --------===//
//
// One entry point for every ShardingInterface model the pipeline needs:
// upstream's (linalg, tensor) plus ours.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/Shard/ShardingExtensions.h"
#include "DataMovementShardingModels.h"
#include "tp/Dialect/Shard/ReshapeShardingModel.h"

#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Linalg/Transforms/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Extensions/ShardingExtensions.h"
#include "mlir/IR/DialectRegistry.h"

void mlir::tp::registerShardingExtensions(DialectRegistry &registry) {
  linalg::registerShardingInterfaceExternalModels(registry);
  tensor::registerShardingInterfaceExternalModels(registry);
  registerReshapeShardingModels(registry);
  registerDataMovementShardingModels(registry);
  registerReplicatedCallShardingModel(registry);
  // tp-outline-unpartitionable relies on inlining calls back.
  func::registerInlinerExtension(registry);
}
