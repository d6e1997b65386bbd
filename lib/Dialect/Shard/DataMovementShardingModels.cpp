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

/// What every model here shares: a parallel loop per dim of the op's result
/// (Derived::rank), the operands and the result indexed by those loops
/// (Derived::indexingMaps: the identity for each, unless it says otherwise),
/// and upstream's default sharding option with the loops of the dims the op
/// cuts (Derived::cutDims) replicated. An op that Derived::isModelled
/// refuses gets no maps, and so is never split. Derived gives partition.
template <typename Derived, typename OpTy>
struct CutDimsShardingModel
    : public ShardingInterface::ExternalModel<Derived, OpTy> {
  static bool isModelled(OpTy) { return true; }

  static SmallVector<AffineMap> indexingMaps(OpTy op) {
    AffineMap id =
        AffineMap::getMultiDimIdentityMap(Derived::rank(op), op.getContext());
    return SmallVector<AffineMap>(op->getNumOperands() + 1, id);
  }

  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(Derived::rank(cast<OpTy>(op)),
                                            utils::IteratorType::parallel);
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto typed = cast<OpTy>(op);
    if (!Derived::isModelled(typed))
      return {};
    return Derived::indexingMaps(typed);
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto typed = cast<OpTy>(op);
    if (!Derived::isModelled(typed))
      return failure();
    return replicateCutLoops(shard::detail::defaultGetShardingOption(
                                 op, operandShardings, resultShardings),
                             Derived::cutDims(typed));
  }

  /// The op on each rank's shards (Derived::createLocal), keeping the
  /// original's discardable attributes.
  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    Operation *local = Derived::createLocal(cast<OpTy>(op), partitionedOperands,
                                            partitionMap, builder);
    return mapLocal(op, local, partitionMap);
  }
};

/// `rank` dims with only `dim` cut.
static SmallVector<bool> cutOnly(int64_t rank, int64_t dim) {
  SmallVector<bool> cut(rank, false);
  cut[dim] = true;
  return cut;
}

/// The dims of `shape` that a box at `offsets` with `sizes` and
/// `strides` does not cover whole.
static SmallVector<bool> boxCutDims(ArrayRef<int64_t> shape,
                                    ArrayRef<int64_t> offsets,
                                    ArrayRef<int64_t> sizes,
                                    ArrayRef<int64_t> strides) {
  SmallVector<bool> cut;
  for (auto [d, size] : llvm::enumerate(shape))
    cut.push_back(offsets[d] != 0 || strides[d] != 1 || sizes[d] != size);
  return cut;
}

struct ExtractSliceShardingModel
    : public CutDimsShardingModel<ExtractSliceShardingModel,
                                  tensor::ExtractSliceOp> {
  /// Only static, rank-preserving slices are modelled (what the importer
  /// writes).
  static bool isModelled(tensor::ExtractSliceOp slice) {
    return slice.getOperands().size() == 1 &&
           slice.getResultType().getRank() == slice.getSourceType().getRank();
  }
  static int64_t rank(tensor::ExtractSliceOp slice) {
    return slice.getResultType().getRank();
  }
  static SmallVector<bool> cutDims(tensor::ExtractSliceOp slice) {
    return boxCutDims(slice.getSourceType().getShape(),
                      slice.getStaticOffsets(), slice.getStaticSizes(),
                      slice.getStaticStrides());
  }

  static Operation *createLocal(tensor::ExtractSliceOp slice,
                                ArrayRef<Value> partitionedOperands,
                                IRMapping &partitionMap, OpBuilder &builder) {
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
    return tensor::ExtractSliceOp::create(
        builder, slice.getLoc(), type, partitionedOperands[0], ValueRange{},
        ValueRange{}, ValueRange{}, slice.getStaticOffsets(), sizes,
        slice.getStaticStrides());
  }
};

struct ConcatShardingModel
    : public CutDimsShardingModel<ConcatShardingModel, tensor::ConcatOp> {
  static int64_t rank(tensor::ConcatOp concat) {
    return concat.getResultType().getRank();
  }
  static SmallVector<bool> cutDims(tensor::ConcatOp concat) {
    return cutOnly(rank(concat), concat.getDim());
  }

  static Operation *createLocal(tensor::ConcatOp concat,
                                ArrayRef<Value> partitionedOperands,
                                IRMapping &partitionMap, OpBuilder &builder) {
    return tensor::ConcatOp::create(builder, concat.getLoc(), concat.getDim(),
                                    partitionedOperands);
  }
};

struct PadShardingModel
    : public CutDimsShardingModel<PadShardingModel, tensor::PadOp> {
  /// Static pads with a padding value defined outside the region only.
  static bool isModelled(tensor::PadOp pad) {
    return pad->getNumOperands() == 1 && pad.getConstantPaddingValue();
  }
  static int64_t rank(tensor::PadOp pad) {
    return pad.getResultType().getRank();
  }
  /// The padded dims.
  static SmallVector<bool> cutDims(tensor::PadOp pad) {
    SmallVector<bool> cut;
    for (auto [low, high] : llvm::zip(pad.getStaticLow(), pad.getStaticHigh()))
      cut.push_back(low != 0 || high != 0);
    return cut;
  }

  static Operation *createLocal(tensor::PadOp pad,
                                ArrayRef<Value> partitionedOperands,
                                IRMapping &partitionMap, OpBuilder &builder) {
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
    return tensor::PadOp::create(builder, pad.getLoc(), type,
                                 partitionedOperands[0], low, high, padValue);
  }
};

/// tensor.insert_slice of a box into a tensor (the importer's ScatterND of
/// a slice assignment). Dims the box covers whole can stay split; the others
/// are kept whole.
struct InsertSliceShardingModel
    : public CutDimsShardingModel<InsertSliceShardingModel,
                                  tensor::InsertSliceOp> {
  static bool isModelled(tensor::InsertSliceOp insert) {
    return insert->getNumOperands() == 2 &&
           insert.getSourceType().getRank() == insert.getDestType().getRank();
  }
  static int64_t rank(tensor::InsertSliceOp insert) {
    return insert.getDestType().getRank();
  }
  static SmallVector<bool> cutDims(tensor::InsertSliceOp insert) {
    return boxCutDims(insert.getDestType().getShape(),
                      insert.getStaticOffsets(), insert.getStaticSizes(),
                      insert.getStaticStrides());
  }

  static Operation *createLocal(tensor::InsertSliceOp insert,
                                ArrayRef<Value> partitionedOperands,
                                IRMapping &partitionMap, OpBuilder &builder) {
    auto localDest = cast<RankedTensorType>(partitionedOperands[1].getType());
    SmallVector<bool> cut = cutDims(insert);
    SmallVector<OpFoldResult> offsets, sizes, strides;
    for (int64_t d = 0, e = localDest.getRank(); d < e; ++d) {
      offsets.push_back(builder.getIndexAttr(insert.getStaticOffsets()[d]));
      sizes.push_back(builder.getIndexAttr(cut[d] ? insert.getStaticSizes()[d]
                                                  : localDest.getDimSize(d)));
      strides.push_back(builder.getIndexAttr(insert.getStaticStrides()[d]));
    }
    return tensor::InsertSliceOp::create(
        builder, insert.getLoc(), partitionedOperands[0],
        partitionedOperands[1], offsets, sizes, strides);
  }
};

/// tp.cache_update: the cache, the update and the result split alike on
/// every dim but the positions' (each rank keeps the K/V of its own heads);
/// the position is replicated.
struct CacheUpdateShardingModel
    : public CutDimsShardingModel<CacheUpdateShardingModel, tp::CacheUpdateOp> {
  static int64_t rank(tp::CacheUpdateOp update) {
    return update.getCache().getType().getRank();
  }
  static SmallVector<AffineMap> indexingMaps(tp::CacheUpdateOp update) {
    MLIRContext *ctx = update.getContext();
    AffineMap id = AffineMap::getMultiDimIdentityMap(rank(update), ctx);
    AffineMap scalar = AffineMap::get(rank(update), 0, ctx);
    return {id, id, scalar, id};
  }
  static SmallVector<bool> cutDims(tp::CacheUpdateOp update) {
    return cutOnly(rank(update), update.getDim());
  }

  static Operation *createLocal(tp::CacheUpdateOp update,
                                ArrayRef<Value> partitionedOperands,
                                IRMapping &partitionMap, OpBuilder &builder) {
    return tp::CacheUpdateOp::create(
        builder, update.getLoc(), partitionedOperands[1].getType(),
        partitionedOperands[0], partitionedOperands[1], partitionedOperands[2],
        update.getDimAttr());
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
