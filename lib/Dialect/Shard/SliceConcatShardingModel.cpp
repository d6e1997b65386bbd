//===- SliceConcatShardingModel.cpp - sharding of slices and concats ------===//
//
// ShardingInterface models for tensor.extract_slice and tensor.concat. A
// dim that the op does not cut (a slice that keeps the whole dim, a concat
// along another dim) can stay split: every rank slices or concatenates its
// own shard, with no communication. A split of the cut dim is refused, so
// propagation replicates it instead.
//
//===----------------------------------------------------------------------===//

#include "SliceConcatShardingModel.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::shard;

namespace {

/// Fails if the option splits any loop in `cut`.
LogicalResult refuseCutLoops(FailureOr<ShardingOption> option,
                             ArrayRef<bool> cut) {
  if (failed(option))
    return failure();
  for (auto [loop, axes] : llvm::enumerate(option->shardingArray))
    if (!axes.empty() && loop < cut.size() && cut[loop])
      return failure();
  return success();
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
    FailureOr<ShardingOption> option = shard::detail::defaultGetShardingOption(
        op, operandShardings, resultShardings);
    if (failed(refuseCutLoops(option, cutDims(slice))))
      return failure();
    return option;
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
    partitionMap.map(op->getResult(0), local.getResult());
    partitionMap.map(op, local.getOperation());
    return success();
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
    FailureOr<ShardingOption> option = shard::detail::defaultGetShardingOption(
        op, operandShardings, resultShardings);
    if (failed(refuseCutLoops(option, cut)))
      return failure();
    return option;
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
    partitionMap.map(op->getResult(0), local.getResult());
    partitionMap.map(op, local.getOperation());
    return success();
  }
};

} // namespace

void mlir::tp::registerSliceConcatShardingModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    tensor::ExtractSliceOp::attachInterface<ExtractSliceShardingModel>(*ctx);
    tensor::ConcatOp::attachInterface<ConcatShardingModel>(*ctx);
  });
}
