//===- ReshapeShardingModel.h - sharding of tensor reshapes -----*- C++ -*-===//
//
// ShardingInterface models for tensor.expand_shape and tensor.collapse_shape,
// so that a head split survives the [B,S,H*D] <-> [B,S,H,D] reshapes of
// attention without communication.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_SHARD_RESHAPESHARDINGMODEL_H
#define TP_DIALECT_SHARD_RESHAPESHARDINGMODEL_H

namespace mlir {
class DialectRegistry;
namespace tp {

/// Attaches the ShardingInterface models of tensor.expand_shape and
/// tensor.collapse_shape.
void registerReshapeShardingModels(DialectRegistry &registry);

} // namespace tp
} // namespace mlir

#endif // TP_DIALECT_SHARD_RESHAPESHARDINGMODEL_H
