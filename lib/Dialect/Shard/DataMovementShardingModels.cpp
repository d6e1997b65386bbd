//===- DataMovementShardingModels.cpp - slices, concats, pads -------------===//
//
// ShardingInterface models for tensor.extract_slice, insert_slice, concat
// and pad, and tp.cache_update. A dim that the op does not cut (a slice that
// keeps the whole dim, a concat along another dim, a dim without padding) can
// stay split: every rank slices or concatenates its own shard, with no
// communication. The cut dim is kept whole: a split asked of it is replicated,
// and partition gathers around the op.
//
//===----------------------------------------------------------------------===//

#include "DataMovementShardingModels.h"
#include "tp/Dialect/TP/TPOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::shard;

namespace {

/// Records `local` as the partition of `op`, keeping the discardable
/// attributes (a planned weight's tp.layout) that later stages read.
LogicalResult mapLocal(Operation *op, Operation *local, IRMapping &map) {
  for (NamedAttribute attr : op->getDiscardableAttrs())
    local->setAttr(attr.getName(), attr.getValue());
  map.map(op->getResult(0), local->getResult(0));
  map.map(op, local);
  return success();
}

/// Replicates every loop in `cut` that the option would split. Failing
/// instead would leave the op unannotated, which upstream partition cannot
/// handle; replicating makes partition gather or slice around the op.
FailureOr<ShardingOption> replicateCutLoops(FailureOr<ShardingOption> option,
                                            ArrayRef<bool> cut) {
  if (failed(option))
    return failure();
  for (auto [loop, axes] : llvm::enumerate(option->shardingArray))
    if (loop < cut.size() && cut[loop])
      axes.clear();
  removeTrailingEmptySubArray(option->shardingArray);
  return option;
}

struct ExtractSliceShardingModel
    : public ShardingInterface::ExternalModel<ExtractSliceShardingModel,
                                              tensor::ExtractSliceOp> {
  /// Only static, rank-preserving slices are modelled (what the importer
  /// writes); anything else gets no maps and so is never split.
  static bool isModelled(tensor::ExtractSliceOp slice) {
    return slice.getOperands().size() == 1 &&
           slice.getResultType().getRank() == slice.getSourceType().getRank();
  }

  /// Dims that the slice cuts.
  static SmallVector<bool> cutDims(tensor::ExtractSliceOp slice) {
    SmallVector<bool> cut;
    for (int64_t d = 0, e = slice.getSourceType().getRank(); d < e; ++d)
      cut.push_back(slice.getStaticOffsets()[d] != 0 ||
                    slice.getStaticStrides()[d] != 1 ||
                    slice.getStaticSizes()[d] !=
                        slice.getSourceType().getDimSize(d));
    return cut;
  }

  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(
        cast<tensor::ExtractSliceOp>(op).getResultType().getRank(),
        utils::IteratorType::parallel);
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    if (!isModelled(slice))
      return {};
    AffineMap id = AffineMap::getMultiDimIdentityMap(
        slice.getResultType().getRank(), op->getContext());
    return {id, id};
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    if (!isModelled(slice))
      return failure();
    return replicateCutLoops(shard::detail::defaultGetShardingOption(
                                 op, operandShardings, resultShardings),
                             cutDims(slice));
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    auto localSource = cast<RankedTensorType>(partitionedOperands[0].getType());
    SmallVector<bool> cut = cutDims(slice);
    SmallVector<int64_t> sizes(slice.getStaticSizes());
    SmallVector<int64_t> shape;
    for (auto [d, size] : llvm::enumerate(sizes)) {
      // A dim the slice keeps whole is whatever the local shard holds.
      if (!cut[d])
        size = localSource.getDimSize(d);
      shape.push_back(size);
    }
    auto type = RankedTensorType::get(shape, localSource.getElementType());
    auto local = tensor::ExtractSliceOp::create(
        builder, op->getLoc(), type, partitionedOperands[0], ValueRange{},
        ValueRange{}, ValueRange{}, slice.getStaticOffsets(), sizes,
        slice.getStaticStrides());
    return mapLocal(op, local, partitionMap);
  }
};

struct ConcatShardingModel
    : public ShardingInterface::ExternalModel<ConcatShardingModel,
                                              tensor::ConcatOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(
        cast<tensor::ConcatOp>(op).getResultType().getRank(),
        utils::IteratorType::parallel);
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto concat = cast<tensor::ConcatOp>(op);
    AffineMap id = AffineMap::getMultiDimIdentityMap(
        concat.getResultType().getRank(), op->getContext());
    return SmallVector<AffineMap>(op->getNumOperands() + 1, id);
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto concat = cast<tensor::ConcatOp>(op);
    SmallVector<bool> cut(concat.getResultType().getRank(), false);
    cut[concat.getDim()] = true;
    return replicateCutLoops(shard::detail::defaultGetShardingOption(
                                 op, operandShardings, resultShardings),
                             cut);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto concat = cast<tensor::ConcatOp>(op);
    auto local = tensor::ConcatOp::create(builder, op->getLoc(),
                                          concat.getDim(), partitionedOperands);
    return mapLocal(op, local, partitionMap);
  }
};

struct PadShardingModel
    : public ShardingInterface::ExternalModel<PadShardingModel, tensor::PadOp> {
  /// Static pads with a padding value defined outside the region only.
  static bool isModelled(tensor::PadOp pad) {
    return pad->getNumOperands() == 1 && pad.getConstantPaddingValue();
  }

  static SmallVector<bool> paddedDims(tensor::PadOp pad) {
    SmallVector<bool> cut;
    for (auto [low, high] : llvm::zip(pad.getStaticLow(), pad.getStaticHigh()))
      cut.push_back(low != 0 || high != 0);
    return cut;
  }

  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(
        cast<tensor::PadOp>(op).getResultType().getRank(),
        utils::IteratorType::parallel);
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto pad = cast<tensor::PadOp>(op);
    if (!isModelled(pad))
      return {};
    AffineMap id = AffineMap::getMultiDimIdentityMap(
        pad.getResultType().getRank(), op->getContext());
    return {id, id};
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto pad = cast<tensor::PadOp>(op);
    if (!isModelled(pad))
      return failure();
    return replicateCutLoops(shard::detail::defaultGetShardingOption(
                                 op, operandShardings, resultShardings),
                             paddedDims(pad));
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto pad = cast<tensor::PadOp>(op);
    auto localSource = cast<RankedTensorType>(partitionedOperands[0].getType());
    SmallVector<int64_t> shape;
    SmallVector<OpFoldResult> low, high;
    for (auto [d, lo, hi] :
         llvm::enumerate(pad.getStaticLow(), pad.getStaticHigh())) {
      shape.push_back(localSource.getDimSize(d) + lo + hi);
      low.push_back(builder.getIndexAttr(lo));
      high.push_back(builder.getIndexAttr(hi));
    }
    Value padValue = pad.getConstantPaddingValue();
    padValue = partitionMap.lookupOrDefault(padValue);
    auto type = RankedTensorType::get(shape, localSource.getElementType());
    auto local =
        tensor::PadOp::create(builder, op->getLoc(), type,
                              partitionedOperands[0], low, high, padValue);
    return mapLocal(op, local, partitionMap);
  }
};

/// tensor.insert_slice of a box into a tensor (the importer's ScatterND of
/// a slice assignment). Dims the box covers whole can stay split; the others
/// are kept whole.
struct InsertSliceShardingModel
    : public ShardingInterface::ExternalModel<InsertSliceShardingModel,
                                              tensor::InsertSliceOp> {
  static bool isModelled(tensor::InsertSliceOp insert) {
    return insert->getNumOperands() == 2 &&
           insert.getSourceType().getRank() == insert.getDestType().getRank();
  }

  static SmallVector<bool> cutDims(tensor::InsertSliceOp insert) {
    SmallVector<bool> cut;
    for (int64_t d = 0, e = insert.getDestType().getRank(); d < e; ++d)
      cut.push_back(insert.getStaticOffsets()[d] != 0 ||
                    insert.getStaticStrides()[d] != 1 ||
                    insert.getStaticSizes()[d] !=
                        insert.getDestType().getDimSize(d));
    return cut;
  }

  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(
        cast<tensor::InsertSliceOp>(op).getDestType().getRank(),
        utils::IteratorType::parallel);
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    if (!isModelled(insert))
      return {};
    AffineMap id = AffineMap::getMultiDimIdentityMap(
        insert.getDestType().getRank(), op->getContext());
    return {id, id, id};
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    if (!isModelled(insert))
      return failure();
    return replicateCutLoops(shard::detail::defaultGetShardingOption(
                                 op, operandShardings, resultShardings),
                             cutDims(insert));
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    auto localDest = cast<RankedTensorType>(partitionedOperands[1].getType());
    SmallVector<bool> cut = cutDims(insert);
    SmallVector<OpFoldResult> offsets, sizes, strides;
    for (int64_t d = 0, e = localDest.getRank(); d < e; ++d) {
      offsets.push_back(builder.getIndexAttr(insert.getStaticOffsets()[d]));
      sizes.push_back(builder.getIndexAttr(cut[d] ? insert.getStaticSizes()[d]
                                                  : localDest.getDimSize(d)));
      strides.push_back(builder.getIndexAttr(insert.getStaticStrides()[d]));
    }
    auto local = tensor::InsertSliceOp::create(
        builder, op->getLoc(), partitionedOperands[0], partitionedOperands[1],
        offsets, sizes, strides);
    return mapLocal(op, local, partitionMap);
  }
};

/// tp.cache_update: the cache, the update and the result split alike on
/// every dim but the positions' (each rank keeps the K/V of its own heads);
/// the position is replicated.
struct CacheUpdateShardingModel
    : public ShardingInterface::ExternalModel<CacheUpdateShardingModel,
                                              tp::CacheUpdateOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(
        cast<tp::CacheUpdateOp>(op).getCache().getType().getRank(),
        utils::IteratorType::parallel);
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto update = cast<tp::CacheUpdateOp>(op);
    int64_t rank = update.getCache().getType().getRank();
    AffineMap id = AffineMap::getMultiDimIdentityMap(rank, op->getContext());
    AffineMap scalar = AffineMap::get(rank, 0, op->getContext());
    return {id, id, scalar, id};
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto update = cast<tp::CacheUpdateOp>(op);
    SmallVector<bool> cut(update.getCache().getType().getRank(), false);
    cut[update.getDim()] = true;
    return replicateCutLoops(shard::detail::defaultGetShardingOption(
                                 op, operandShardings, resultShardings),
                             cut);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto update = cast<tp::CacheUpdateOp>(op);
    auto local = tp::CacheUpdateOp::create(
        builder, op->getLoc(), partitionedOperands[1].getType(),
        partitionedOperands[0], partitionedOperands[1], partitionedOperands[2],
        update.getDimAttr());
    return mapLocal(op, local, partitionMap);
  }
};

} // namespace

void mlir::tp::registerDataMovementShardingModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    tensor::ExtractSliceOp::attachInterface<ExtractSliceShardingModel>(*ctx);
    tensor::ConcatOp::attachInterface<ConcatShardingModel>(*ctx);
    tensor::PadOp::attachInterface<PadShardingModel>(*ctx);
    tensor::InsertSliceOp::attachInterface<InsertSliceShardingModel>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, tp::TPDialect *) {
    tp::CacheUpdateOp::attachInterface<CacheUpdateShardingModel>(*ctx);
  });
}
