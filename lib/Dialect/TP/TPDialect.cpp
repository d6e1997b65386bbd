//===- TPDialect.cpp - the tp dialect -------------------------------------===//
//
// Verifies the `tp.*` attributes that the importer writes, so that a
// hand-edited module with a malformed weight or name tag fails early.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::tp;

#include "tp/Dialect/TP/TPDialect.cpp.inc"

void TPDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "tp/Dialect/TP/TPOps.cpp.inc"
      >();
}

/// Every tp name tag is a non-empty string.
static LogicalResult verifyNameTag(Operation *op, NamedAttribute attr) {
  auto str = dyn_cast<StringAttr>(attr.getValue());
  if (!str || str.getValue().empty())
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' must be a non-empty string";
  return success();
}

static LogicalResult verifyNonNegative(Operation *op, NamedAttribute attr) {
  auto block = dyn_cast<IntegerAttr>(attr.getValue());
  if (!block || block.getInt() < 0)
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' must be a non-negative integer";
  return success();
}

/// A `tp.layout` on argument `index` of `op`: on a weight, `dim` within
/// its rank, and its size on `dim` consistent with the range it holds.
static LogicalResult verifyArgLayout(Operation *op, unsigned index,
                                     NamedAttribute attr) {
  auto layout = dyn_cast<LayoutAttr>(attr.getValue());
  if (!layout)
    return op->emitOpError()
           << "'" << attr.getName().getValue() << "' must be a #tp.layout";
  // Only functions have argument attributes.
  auto func = cast<FunctionOpInterface>(op);
  if (!func.getArgAttr(index, TPDialect::kWeightAttrName))
    return op->emitOpError()
           << "argument " << index << " has a #tp.layout but no 'tp.weight'";
  auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[index]);
  if (!type || !type.hasStaticShape())
    return op->emitOpError() << "argument " << index
                             << " has a #tp.layout but no static tensor type";
  int64_t dim = layout.getDim();
  if (dim >= type.getRank())
    return op->emitOpError() << "argument " << index << " has a #tp.layout on "
                             << "dim " << dim << " but rank " << type.getRank();
  int64_t size = type.getDimSize(dim);
  // The argument holds the whole range, or (split) an even share of it,
  // after padding if padded, repeated if repeated.
  int64_t range = layout.isPadded()  ? layout.getPaddedSize()
                  : layout.isPiece() ? layout.getSliceSize()
                                     : 0;
  if (layout.isRepeated())
    range *= layout.getRepeatTimes();
  if (range == 0)
    return success();
  if (!layout.isSplit() ? size != range : size == 0 || range % size != 0)
    return op->emitOpError()
           << "argument " << index << " has " << size << " rows on dim " << dim
           << ", which is not " << (layout.isSplit() ? "a share" : "all")
           << " of the " << range << " rows its #tp.layout holds";
  return success();
}

LogicalResult TPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                  unsigned index,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kWeightAttrName || name == kInputAttrName ||
      name == kCacheAttrName)
    return verifyNameTag(op, attr);
  if (name == kLayoutAttrName)
    return verifyArgLayout(op, index, attr);
  if (name == kIndexBoundAttrName) {
    auto bound = dyn_cast<IntegerAttr>(attr.getValue());
    if (!bound || bound.getInt() < 1)
      return op->emitOpError() << "'" << name << "' must be a positive integer";
    return success();
  }
  return op->emitOpError() << "unknown argument attribute '" << name << "'";
}

LogicalResult TPDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                     unsigned index,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kOutputAttrName)
    return verifyNameTag(op, attr);
  if (name == kSplitOutputAttrName) {
    // A block of a dim of the result; the blocks of all ranks cover `size`.
    auto split = dyn_cast<SplitOutputAttr>(attr.getValue());
    auto func = cast<FunctionOpInterface>(op);
    auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[index]);
    if (!split || !type || !type.hasStaticShape() || split.getDim() < 0 ||
        split.getDim() >= type.getRank() || split.getSize() < 1 ||
        type.getDimSize(split.getDim()) < 1 ||
        !func.getResultAttr(index, kOutputAttrName))
      return op->emitOpError()
             << "result " << index << " has a '" << name
             << "' that is not a #tp.split_output of a dim of its static, "
                "non-empty tensor type, on a 'tp.output' result";
    return success();
  }
  return op->emitOpError() << "unknown result attribute '" << name << "'";
}

LogicalResult TPDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kModelAttrName || name == kReplicatedAttrName)
    return verifyNameTag(op, attr);
  if (name == kKernelAttrName) {
    if (!isa<KernelAttr>(attr.getValue()) ||
        !isa<linalg::LinalgOp, tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
            op))
      return op->emitOpError() << "'" << name
                               << "' must be a #tp.kernel on a linalg op or "
                                  "a reshape";
    return success();
  }
  if (name == kLayoutAttrName) {
    // The plan's layout of a pad or slice of a weight, before partition.
    auto layout = dyn_cast<LayoutAttr>(attr.getValue());
    auto type = op->getNumResults() == 1
                    ? dyn_cast<RankedTensorType>(op->getResult(0).getType())
                    : nullptr;
    if (!layout || !type || layout.getDim() >= type.getRank() ||
        layout.isPiece() || layout.isPadded() || layout.isRepeated())
      return op->emitOpError()
             << "'" << name
             << "' on an op must be a #tp.layout without "
                "slice, padding or repeat, on a dim of its one "
                "tensor result";
    return success();
  }
  if (name == kStageAttrName || name == kEmbeddingAttrName ||
      name == kPrefillStageAttrName || name == kPrefillChunkAttrName)
    return verifyNonNegative(op, attr);
  if (name == kGridRoleAttrName) {
    if (!isa<GridRoleAttr>(attr.getValue()) || !isa<shard::GridOp>(op))
      return op->emitOpError()
             << "'" << name << "' must be a #tp.grid_role on a shard.grid";
    return success();
  }
  if (name == kPipelineAttrName) {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict || !dict.getAs<IntegerAttr>("stages") ||
        !dict.getAs<IntegerAttr>("microbatches"))
      return op->emitOpError() << "'" << name
                               << "' must be a dictionary with integer "
                                  "'stages' and 'microbatches'";
    return success();
  }
  if (name == kLoopSizesAttrName) {
    auto sizes = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (!sizes || !linalgOp ||
        static_cast<int64_t>(linalgOp.getNumLoops()) != sizes.size() ||
        llvm::any_of(sizes.asArrayRef(), [](int64_t s) { return s < 0; }))
      return op->emitOpError() << "'" << name
                               << "' must be an array of one static size per "
                                  "loop of a linalg op";
    return success();
  }
  if (name == kSplitLoopAttrName) {
    auto loop = dyn_cast<IntegerAttr>(attr.getValue());
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (!loop || !linalgOp || loop.getInt() < 0 ||
        loop.getInt() >= static_cast<int64_t>(linalgOp.getNumLoops()))
      return op->emitOpError() << "'" << name
                               << "' must be the index of a loop of a linalg "
                                  "op";
    return success();
  }
  if (name == kLocalCalleeAttrName) {
    if (!isa<FlatSymbolRefAttr>(attr.getValue()) || !isa<CallOpInterface>(op))
      return op->emitOpError() << "'" << name << "' must be a symbol on a call";
    return success();
  }
  if (name == kBackwardAttrName || name == kRecomputedAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' must be a unit attribute";
    return success();
  }
  if (name == kStashWithoutRecomputeAttrName) {
    auto bytes = dyn_cast<IntegerAttr>(attr.getValue());
    if (!bytes || bytes.getInt() < 0 || !isa<FunctionOpInterface>(op))
      return op->emitOpError()
             << "'" << name << "' must be a byte count on a function";
    return success();
  }
  if (name == kTiedWeightsAttrName) {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!list || !isa<ModuleOp>(op) ||
        llvm::any_of(list, [](Attribute a) { return !isa<TiedWeightAttr>(a); }))
      return op->emitOpError() << "'" << name
                               << "' must be an array of #tp.tied_weight on "
                                  "a module";
    return success();
  }
  if (name == kMutableWeightsAttrName) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<ModuleOp>(op))
      return op->emitOpError()
             << "'" << name << "' must be a unit attribute on a module";
    return success();
  }
  if (name == kOpsetAttrName) {
    if (!isa<IntegerAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' must be an integer";
    return success();
  }
  if (name == kExternalDataAttrName) {
    auto files = dyn_cast<ArrayAttr>(attr.getValue());
    if (!files ||
        llvm::any_of(files, [](Attribute a) { return !isa<StringAttr>(a); }))
      return op->emitOpError()
             << "'" << name << "' must be an array of file names";
    return success();
  }
  return op->emitOpError() << "unknown attribute '" << name << "'";
}

//===----------------------------------------------------------------------===//
// tp.cache_update
//===----------------------------------------------------------------------===//

#define GET_OP_CLASSES
#include "tp/Dialect/TP/TPOps.cpp.inc"

LogicalResult CacheUpdateOp::verify() {
  RankedTensorType cache = getCache().getType();
  RankedTensorType update = getUpdate().getType();
  int64_t dim = getDim();
  if (dim < 0 || dim >= cache.getRank())
    return emitOpError() << "dim " << dim << " is outside the cache's rank "
                         << cache.getRank();
  if (update.getRank() != cache.getRank() ||
      update.getElementType() != cache.getElementType())
    return emitOpError() << "update " << update << " and cache " << cache
                         << " differ in rank or element type";
  for (int64_t d = 0; d < cache.getRank(); ++d) {
    if (d == dim ? update.getDimSize(d) > cache.getDimSize(d)
                 : update.getDimSize(d) != cache.getDimSize(d))
      return emitOpError() << "update " << update << " does not fit cache "
                           << cache << " on dim " << d;
  }
  return success();
}
