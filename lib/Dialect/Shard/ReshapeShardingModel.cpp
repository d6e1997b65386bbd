//===- ReshapeShardingModel.cpp - sharding of tensor reshapes -------------===//
//
// ShardingInterface models for tensor.expand_shape and tensor.collapse_shape.
// A split of a collapsed dim lays the data out exactly like a split of the
// outermost (non-unit) dim of its reassociation group, provided that dim
// divides evenly; then the reshape partitions into the same reshape on the
// local shards, with no communication. Every other split is refused.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/Shard/ReshapeShardingModel.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

#include <type_traits>

using namespace mlir;
using namespace mlir::shard;

namespace {

/// The two sides of a reshape. The "fine" side (expand's result, collapse's
/// source) has one dim per loop; the "coarse" side one dim per group.
struct ReshapeGeometry {
  SmallVector<int64_t> fineShape;
  SmallVector<ReassociationIndices> groups;
  /// Group of each fine dim; -1 for unit dims that belong to no group (a
  /// reshape to or from a 0-d tensor).
  SmallVector<int64_t> groupOf;

  ReshapeGeometry(ArrayRef<int64_t> shape,
                  SmallVector<ReassociationIndices> reassociation)
      : fineShape(shape), groups(std::move(reassociation)),
        groupOf(shape.size(), -1) {
    for (auto [group, dims] : llvm::enumerate(groups))
      for (int64_t dim : dims)
        groupOf[dim] = group;
  }

  /// The fine dim that carries a split of coarse dim `group`. Leading unit
  /// dims are skipped: they hold no data to split.
  int64_t leadDim(int64_t group) const {
    for (int64_t dim : groups[group])
      if (fineShape[dim] != 1)
        return dim;
    return groups[group].front();
  }
};

/// Whether the shard shape of fine dim `dim` split on `axes` is the same data
/// as the coarse dim split on `axes`, and exact (upstream's shardDimension
/// silently rounds down in release builds, so an uneven split would produce
/// wrong local types rather than an error).
bool canCarrySplit(const ReshapeGeometry &geo, int64_t dim,
                   ArrayRef<GridAxis> axes, GridOp grid) {
  int64_t group = geo.groupOf[dim];
  if (group < 0 || geo.leadDim(group) != dim)
    return false;
  ArrayRef<int64_t> gridShape = grid.getShape();
  if (llvm::any_of(axes, [&](GridAxis axis) {
        return axis < 0 || axis >= static_cast<int64_t>(gridShape.size());
      }))
    return false;
  int64_t size = geo.fineShape[dim];
  int64_t devices = collectiveProcessGroupSize(axes, gridShape);
  if (ShapedType::isDynamic(size) || ShapedType::isDynamic(devices))
    // Only an untouched dim keeps its (unknown) shard size across the
    // reshape; inside a real group we cannot prove the split is even.
    return geo.groups[group].size() == 1;
  return size % devices == 0;
}

bool hasHalosOrOffsets(const Sharding &sharding) {
  return !sharding.getStaticHaloSizes().empty() ||
         !sharding.getStaticShardedDimsOffsets().empty() ||
         !sharding.getDynamicHaloSizes().empty() ||
         !sharding.getDynamicShardedDimsOffsets().empty();
}

/// Called with (fine dim, grid axes) for each split dropped in relaxed mode.
using DropFn = function_ref<void(int64_t, ArrayRef<GridAxis>)>;

/// The split axes of each loop (fine dim) that realise `coarse` and `fine`
/// together. Fails when a split cannot pass through the reshape, unless
/// `onDrop` is given: then that split is dropped (replicated) and reported.
FailureOr<ShardingArray> mapToLoops(const ReshapeGeometry &geo, Sharding coarse,
                                    Sharding fine, GridOp grid,
                                    std::optional<DropFn> onDrop = {}) {
  ShardingArray loops(geo.fineShape.size());
  auto place = [&](int64_t dim, ArrayRef<GridAxis> axes) -> LogicalResult {
    if (axes.empty())
      return success();
    bool ok = canCarrySplit(geo, dim, axes, grid) &&
              (loops[dim].empty() || llvm::equal(loops[dim], axes));
    for (auto [other, otherAxes] : llvm::enumerate(loops))
      if (ok && static_cast<int64_t>(other) != dim)
        ok = llvm::none_of(axes, [&](GridAxis axis) {
          return llvm::is_contained(otherAxes, axis);
        });
    if (ok) {
      loops[dim].assign(axes.begin(), axes.end());
      return success();
    }
    if (!onDrop)
      return failure();
    (*onDrop)(dim, axes);
    return success();
  };

  for (auto [sharding, isFine] : {std::pair(fine, true), {coarse, false}}) {
    if (!sharding)
      continue;
    if (sharding.getGrid() != grid.getSymName() ||
        hasHalosOrOffsets(sharding)) {
      if (!onDrop)
        return failure();
      continue;
    }
    for (auto [dim, axes] : llvm::enumerate(sharding.getSplitAxes())) {
      int64_t rank = isFine ? geo.fineShape.size() : geo.groups.size();
      if (static_cast<int64_t>(dim) >= rank) {
        // More split entries than dims: only replicated ones are harmless.
        if (!axes.empty() && !onDrop)
          return failure();
        continue;
      }
      int64_t loop = isFine ? dim : geo.leadDim(dim);
      if (failed(place(loop, axes.asArrayRef())))
        return failure();
    }
  }
  return loops;
}

GridAxesAttr axesAttr(MLIRContext *ctx, ArrayRef<GridAxis> axes) {
  return GridAxesAttr::get(ctx, axes);
}

/// The (coarse, fine) annotations that a loop sharding implies.
FailureOr<std::pair<Sharding, Sharding>>
annotationsFor(const ReshapeGeometry &geo, const ShardingOption &option,
               MLIRContext *ctx) {
  if (!option.grid)
    return failure();
  ShardingArray loops = option.shardingArray;
  loops.resize(geo.fineShape.size());

  ShardingArray coarse(std::max<size_t>(geo.groups.size(), 1));
  for (auto [dim, axes] : llvm::enumerate(loops)) {
    if (axes.empty())
      continue;
    int64_t group = geo.groupOf[dim];
    // Only the lead dim of a group can carry a split.
    if (group < 0 || geo.leadDim(group) != static_cast<int64_t>(dim))
      return failure();
    coarse[group] = axes;
  }
  removeTrailingEmptySubArray(coarse);
  removeTrailingEmptySubArray(loops);
  if (loops.empty())
    loops.emplace_back();

  auto toSharding = [&](const ShardingArray &splits) {
    SmallVector<GridAxesAttr> attrs;
    for (const SmallVector<GridAxis> &axes : splits)
      attrs.push_back(axesAttr(ctx, axes));
    return Sharding::get(option.grid, attrs);
  };
  return std::make_pair(toSharding(coarse), toSharding(loops));
}

/// Split axes equality that ignores trailing replicated dims.
bool sameSplits(const Sharding &lhs, const Sharding &rhs) {
  auto trimmed = [](ArrayRef<GridAxesAttr> axes) {
    while (!axes.empty() && axes.back().empty())
      axes = axes.drop_back();
    return axes;
  };
  return llvm::equal(trimmed(lhs.getSplitAxes()), trimmed(rhs.getSplitAxes()));
}

template <typename OpTy>
struct ReshapeShardingModel
    : public ShardingInterface::ExternalModel<ReshapeShardingModel<OpTy>,
                                              OpTy> {
  static constexpr bool isExpand = std::is_same_v<OpTy, tensor::ExpandShapeOp>;

  static ReshapeGeometry geometry(Operation *op) {
    auto reshape = cast<OpTy>(op);
    RankedTensorType fineType =
        isExpand ? reshape.getResultType() : reshape.getSrcType();
    return ReshapeGeometry(fineType.getShape(),
                           llvm::to_vector(reshape.getReassociationIndices()));
  }

  /// (coarse, fine) out of (source, result).
  static std::pair<Sharding, Sharding> coarseAndFine(Sharding src,
                                                     Sharding result) {
    if (isExpand)
      return {src, result};
    return {result, src};
  }

  static GridOp lookupGrid(Operation *op, FlatSymbolRefAttr gridAttr) {
    if (!gridAttr)
      return nullptr;
    return SymbolTable::lookupNearestSymbolFrom<GridOp>(op, gridAttr);
  }

  /// Whether propagation can find a sharding for this op among the
  /// annotations already in the IR, trying the same combinations it does
  /// (explicit annotations are kept, the others may be dropped).
  static bool anyCombinationCarriable(Operation *op,
                                      const ReshapeGeometry &geo) {
    auto choices = [](FailureOr<std::pair<bool, Sharding>> found,
                      bool mustIfForUsers) -> SmallVector<Sharding, 2> {
      if (failed(found))
        return {Sharding()};
      if (found->first == mustIfForUsers)
        return {found->second};
      return {found->second, Sharding()};
    };
    SmallVector<Sharding, 2> srcChoices =
        choices(shard::getSharding(op->getOpOperand(0)), true);
    SmallVector<Sharding, 2> resultChoices =
        choices(shard::getSharding(op->getOpResult(0)), false);
    for (Sharding src : srcChoices) {
      for (Sharding result : resultChoices) {
        auto [coarse, fine] = coarseAndFine(src, result);
        Sharding any = coarse ? coarse : fine;
        if (!any)
          continue;
        GridOp grid = lookupGrid(op, any.getGridAttr());
        if (grid && succeeded(mapToLoops(geo, coarse, fine, grid)))
          return true;
      }
    }
    return false;
  }

  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(geometry(op).fineShape.size(),
                                            utils::IteratorType::parallel);
  }

  /// The true access maps: the coarse dim is the row-major linearisation of
  /// its group. Only informative; the sharding methods below do not rely on
  /// them because they are not projected permutations.
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    ReshapeGeometry geo = geometry(op);
    unsigned numLoops = geo.fineShape.size();
    unsigned numSymbols = 0;
    SmallVector<AffineExpr> coarseExprs;
    for (const ReassociationIndices &group : geo.groups) {
      AffineExpr expr = getAffineConstantExpr(0, ctx);
      for (int64_t dim : group) {
        int64_t size = geo.fineShape[dim];
        AffineExpr stride = ShapedType::isDynamic(size)
                                ? getAffineSymbolExpr(numSymbols++, ctx)
                                : getAffineConstantExpr(size, ctx);
        expr = expr * stride + getAffineDimExpr(dim, ctx);
      }
      coarseExprs.push_back(expr);
    }
    AffineMap coarseMap =
        AffineMap::get(numLoops, numSymbols, coarseExprs, ctx);
    AffineMap fineMap = AffineMap::getMultiDimIdentityMap(numLoops, ctx);
    if (!isExpand)
      return {fineMap, coarseMap};
    // The dynamic output_shape operands are scalars: no dims.
    SmallVector<AffineMap> maps = {coarseMap};
    maps.append(op->getNumOperands() - 1, AffineMap::get(numLoops, 0, ctx));
    maps.push_back(fineMap);
    return maps;
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    auto [coarse, fine] =
        coarseAndFine(operandShardings.front(), resultShardings.front());
    Sharding any = coarse ? coarse : fine;
    if (!any)
      return ShardingOption::makeEmpty();
    GridOp grid = lookupGrid(op, any.getGridAttr());
    if (!grid)
      return failure();

    ReshapeGeometry geo = geometry(op);
    FailureOr<ShardingArray> loops = mapToLoops(geo, coarse, fine, grid);
    if (failed(loops)) {
      // Refusing lets propagation pick another combination. When there is
      // none, the op would stay unannotated, which shard-partition cannot
      // handle; keep the splits that fit and replicate the rest instead.
      if (anyCombinationCarriable(op, geo))
        return failure();
      auto warnDropped = [&](int64_t dim, ArrayRef<GridAxis> axes) {
        InFlightDiagnostic diag = emitWarning(op->getLoc());
        diag << "split of " << (isExpand ? "result" : "source") << " dim "
             << dim << " (size " << geo.fineShape[dim] << ") on grid axes [";
        llvm::interleaveComma(axes, diag,
                              [&](GridAxis axis) { diag << int64_t(axis); });
        diag << "] cannot pass through this reshape; the value is "
                "replicated around it";
      };
      loops = mapToLoops(geo, coarse, fine, grid, DropFn(warnDropped));
      if (failed(loops))
        return failure();
    }
    removeTrailingEmptySubArray(*loops);
    return ShardingOption(std::move(*loops), any.getGridAttr());
  }

  FailureOr<std::vector<Sharding>>
  getShardingAnnotations(Operation *op,
                         const ShardingOption &shardingOption) const {
    FailureOr<std::pair<Sharding, Sharding>> annotations =
        annotationsFor(geometry(op), shardingOption, op->getContext());
    if (failed(annotations))
      return failure();
    auto [coarse, fine] = *annotations;
    std::vector<Sharding> res = {isExpand ? coarse : fine};
    // expand_shape's dynamic output_shape operands are scalars.
    res.resize(op->getNumOperands());
    res.push_back(isExpand ? fine : coarse);
    return res;
  }

  LogicalResult addShardingAnnotations(Operation *op, OpBuilder &b,
                                       const ShardingOption &option) const {
    FailureOr<std::vector<Sharding>> annotations =
        getShardingAnnotations(op, option);
    if (failed(annotations))
      return failure();
    maybeInsertTargetShardingAnnotation(annotations->back(), op->getResult(0),
                                        b);
    OpBuilder::InsertionGuard guard(b);
    maybeInsertSourceShardingAnnotation(annotations->front(),
                                        op->getOpOperand(0), b);
    return success();
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto reshape = cast<OpTy>(op);
    Sharding srcSharding = operandShardings.front();
    Sharding resultSharding = resultShardings.front();
    // Partition passes no sharding for a 0-d tensor: it is replicated.
    if (!srcSharding && reshape.getSrcType().getRank() == 0)
      srcSharding = Sharding::get(resultSharding.getGridAttr(), {});
    if (!resultSharding && reshape.getResultType().getRank() == 0)
      resultSharding = Sharding::get(srcSharding.getGridAttr(), {});
    if (!srcSharding || !resultSharding)
      return op->emitOpError("expected sharding annotations on the source "
                             "and the result");
    GridOp grid = getGridOrNull(op, srcSharding.getGridAttr(), symbolTable);
    if (!grid)
      return op->emitOpError("sharding refers to an unknown grid");

    // The annotations may come from elsewhere than our propagation: only a
    // pair that describes the same data layout partitions without
    // communication.
    ReshapeGeometry geo = geometry(op);
    auto [coarse, fine] = coarseAndFine(srcSharding, resultSharding);
    FailureOr<ShardingArray> loops = mapToLoops(geo, coarse, fine, grid);
    FailureOr<std::pair<Sharding, Sharding>> expected;
    if (succeeded(loops))
      expected =
          annotationsFor(geo, ShardingOption(*loops, srcSharding.getGridAttr()),
                         op->getContext());
    if (failed(expected) || !sameSplits(expected->first, coarse) ||
        !sameSplits(expected->second, fine))
      return op->emitOpError("source and result shardings do not describe "
                             "the same layout across the reshape");

    Value src = partitionedOperands.front();
    auto localSrcType = cast<RankedTensorType>(
        shardShapedType(reshape.getSrcType(), grid, srcSharding));
    auto localResultType = cast<RankedTensorType>(
        shardShapedType(reshape.getResultType(), grid, resultSharding));
    // Upstream resharding returns a null value for layouts it cannot
    // convert (e.g. away from halos) instead of failing.
    if (!src)
      return op->emitOpError("source could not be resharded to ")
             << localSrcType;
    if (src.getType() != localSrcType)
      return op->emitOpError("partitioned source has type ")
             << src.getType() << ", expected " << localSrcType;

    Location loc = op->getLoc();
    Value local;
    if constexpr (isExpand) {
      SmallVector<OpFoldResult> outputShape;
      for (auto [dim, size] : llvm::enumerate(reshape.getMixedOutputShape())) {
        int64_t group = geo.groupOf[dim];
        if (!localResultType.isDynamicDim(dim))
          outputShape.push_back(
              builder.getIndexAttr(localResultType.getDimSize(dim)));
        else if (geo.groups[group].size() == 1)
          // The dim is the source dim itself; its local size may differ
          // from the global output_shape value.
          outputShape.push_back(
              tensor::DimOp::create(builder, loc, src, group).getResult());
        else if (auto value = dyn_cast<Value>(size))
          // Unsplit inner dims keep their global size.
          outputShape.push_back(partitionMap.lookupOrDefault(value));
        else
          outputShape.push_back(size);
      }
      local = tensor::ExpandShapeOp::create(builder, loc, localResultType, src,
                                            reshape.getReassociationIndices(),
                                            outputShape);
    } else {
      local =
          tensor::CollapseShapeOp::create(builder, loc, localResultType, src,
                                          reshape.getReassociationIndices());
    }
    partitionMap.map(op->getResult(0), local);
    return success();
  }
};

} // namespace

void mlir::tp::registerReshapeShardingModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    tensor::ExpandShapeOp::attachInterface<
        ReshapeShardingModel<tensor::ExpandShapeOp>>(*ctx);
    tensor::CollapseShapeOp::attachInterface<
        ReshapeShardingModel<tensor::CollapseShapeOp>>(*ctx);
  });
}
