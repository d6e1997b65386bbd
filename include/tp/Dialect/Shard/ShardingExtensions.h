//===- ShardingExtensions.h - sharding models upstream lacks ----*- C++ -*-===//
//
// ShardingInterface external models that tp-mlir adds to upstream ops so
// that sharding propagation and partition work on imported models:
// reshapes (tensor.expand_shape / collapse_shape) and friends.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_SHARD_SHARDINGEXTENSIONS_H
#define TP_DIALECT_SHARD_SHARDINGEXTENSIONS_H

namespace mlir {
class DialectRegistry;
namespace tp {

/// Registers tp-mlir's ShardingInterface models (in addition to upstream's
/// linalg and tensor models, which this also registers).
void registerShardingExtensions(DialectRegistry &registry);

} // namespace tp
} // namespace mlir

#endif // TP_DIALECT_SHARD_SHARDINGEXTENSIONS_H
