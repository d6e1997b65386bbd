//===- SliceConcatShardingModel.h - slice/concat sharding -------*- C++ -*-===//
//
// Registration of the tensor.extract_slice / tensor.concat sharding models.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_DIALECT_SHARD_SLICECONCATSHARDINGMODEL_H
#define TP_LIB_DIALECT_SHARD_SLICECONCATSHARDINGMODEL_H

namespace mlir {
class DialectRegistry;
namespace tp {
void registerSliceConcatShardingModels(DialectRegistry &registry);
} // namespace tp
} // namespace mlir

#endif // TP_LIB_DIALECT_SHARD_SLICECONCATSHARDINGMODEL_H
