//===- DataMovementShardingModels.h - slice/concat/pad sharding*- C++ -*-===//
//
// Registration of the tensor.extract_slice / concat / pad sharding models.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_DIALECT_SHARD_DATAMOVEMENTSHARDINGMODELS_H
#define TP_LIB_DIALECT_SHARD_DATAMOVEMENTSHARDINGMODELS_H

namespace mlir {
class DialectRegistry;
namespace tp {
void registerDataMovementShardingModels(DialectRegistry &registry);
void registerReplicatedCallShardingModel(DialectRegistry &registry);
} // namespace tp
} // namespace mlir

#endif // TP_LIB_DIALECT_SHARD_DATAMOVEMENTSHARDINGMODELS_H
