//===- EmitShard.cpp - shard collectives as RankContext calls -------------===//
//
// After shard-partition the program is SPMD; each collective becomes one
// call on the rank's context over the group of ranks it spans.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace mlir::tp::emit;

FailureOr<GroupSpec> CppEmitter::groupOf(Operation *op, StringRef gridName,
                                         ArrayRef<int16_t> axes) {
  auto grid = module.lookupSymbol<shard::GridOp>(gridName);
  if (!grid)
    return op->emitError("no shard.grid @") << gridName;
  ArrayRef<int64_t> shape = grid.getShape();
  if (ShapedType::isDynamicShape(shape))
    return op->emitError("code generation needs a static grid shape");
  // The axes must be a contiguous run of the grid's row-major numbering.
  SmallVector<int16_t> sorted(axes);
  llvm::sort(sorted);
  if (sorted.empty())
    return GroupSpec{1, 1};
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i] != sorted[i - 1] + 1)
      return op->emitError("code generation needs collectives over adjacent "
                           "grid axes");
  GroupSpec group;
  group.stride = gridBaseStride.lookup(gridName);
  if (!group.stride)
    group.stride = 1;
  for (size_t axis = sorted.back() + 1; axis < shape.size(); ++axis)
    group.stride *= shape[axis];
  group.size = 1;
  for (int16_t axis : sorted)
    group.size *= shape[axis];
  return group;
}

std::string CppEmitter::groupLiteral(GroupSpec group) const {
  return "tp::rt::Group{" + std::to_string(group.size) + ", " +
         std::to_string(group.stride) + "}";
}

static FailureOr<std::string> dtypeLiteral(Operation *op, Type type) {
  StringRef name;
  if (type.isF32())
    name = "F32";
  else if (type.isF64())
    name = "F64";
  else if (type.isF16())
    name = "F16";
  else if (type.isBF16())
    name = "BF16";
  else if (type.isInteger(64) || type.isIndex())
    name = "I64";
  else if (type.isInteger(32))
    name = "I32";
  else if (type.isInteger(16))
    name = "I16";
  else if (type.isInteger(8))
    name = "I8";
  else if (type.isInteger(1))
    name = "Bool";
  else
    return op->emitError("collectives do not support element type ") << type;
  return ("tp::rt::DType::" + name).str();
}

static FailureOr<std::string> reductionLiteral(Operation *op,
                                               shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Sum:
    return std::string("tp::rt::Reduction::Sum");
  case shard::ReductionKind::Product:
    return std::string("tp::rt::Reduction::Product");
  case shard::ReductionKind::Max:
    return std::string("tp::rt::Reduction::Max");
  case shard::ReductionKind::Min:
    return std::string("tp::rt::Reduction::Min");
  default:
    return op->emitError("code generation does not support reduction ")
           << shard::stringifyReductionKind(kind);
  }
}

std::pair<int64_t, int64_t> mlir::tp::emit::splitAtAxis(ArrayRef<int64_t> shape,
                                                        int64_t axis) {
  int64_t outer = 1, chunk = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis)
      outer *= shape[i];
    else
      chunk *= shape[i];
  }
  return {outer, chunk};
}

LogicalResult CppEmitter::emitShardOp(Operation *op) {
  if (isa<shard::GridOp>(op))
    return success();
  Type elementType;
  if (op->getNumResults() == 1)
    if (auto shaped = dyn_cast<ShapedType>(op->getResult(0).getType()))
      elementType = shaped.getElementType();

  if (auto allReduce = dyn_cast<shard::AllReduceOp>(op)) {
    auto group = groupOf(op, allReduce.getGrid(), allReduce.getGridAxes());
    auto dtype = dtypeLiteral(op, elementType);
    auto reduction = reductionLiteral(op, allReduce.getReduction());
    if (failed(group) || failed(dtype) || failed(reduction))
      return failure();
    if (!isa<RankedTensorType>(allReduce.getInput().getType()))
      return op->emitError("code generation supports tensor all_reduce only");
    if (allReduce.getInput().getType() != allReduce.getResult().getType())
      return op->emitError("code generation needs all_reduce without a type "
                           "change");
    if (reducesInPlace(op)) {
      alias(allReduce.getResult(), allReduce.getInput());
    } else {
      if (failed(allocate(allReduce.getResult(), op)))
        return failure();
      copy(allReduce.getResult(), allReduce.getInput());
    }
    os << "context->allReduce(" << groupLiteral(*group) << ", "
       << name(allReduce.getResult()) << ", "
       << numElements(allReduce.getResult()) << ", " << *dtype << ", "
       << *reduction << ", " << siteLiteral(op, "all_reduce") << ");\n";
    return success();
  }
  if (auto allGather = dyn_cast<shard::AllGatherOp>(op)) {
    auto group = groupOf(op, allGather.getGrid(), allGather.getGridAxes());
    auto type = elementTypeOf(allGather.getResult(), op);
    if (failed(group) || failed(type) ||
        failed(allocate(allGather.getResult(), op)))
      return failure();
    auto shape = cast<ShapedType>(allGather.getInput().getType()).getShape();
    auto [outer, inner] =
        splitAtAxis(shape, allGather.getGatherAxis().getSExtValue());
    os << "context->allGather(" << groupLiteral(*group) << ", "
       << name(allGather.getInput()) << ", " << name(allGather.getResult())
       << ", " << outer << ", " << inner << " * sizeof(" << *type << "), "
       << siteLiteral(op, "all_gather") << ");\n";
    return success();
  }
  if (auto reduceScatter = dyn_cast<shard::ReduceScatterOp>(op)) {
    auto group =
        groupOf(op, reduceScatter.getGrid(), reduceScatter.getGridAxes());
    auto dtype = dtypeLiteral(op, elementType);
    auto reduction = reductionLiteral(op, reduceScatter.getReduction());
    if (failed(group) || failed(dtype) || failed(reduction) ||
        failed(allocate(reduceScatter.getResult(), op)))
      return failure();
    auto shape =
        cast<ShapedType>(reduceScatter.getResult().getType()).getShape();
    auto [outer, inner] =
        splitAtAxis(shape, reduceScatter.getScatterAxis().getSExtValue());
    os << "context->reduceScatter(" << groupLiteral(*group) << ", "
       << name(reduceScatter.getInput()) << ", "
       << name(reduceScatter.getResult()) << ", " << outer << ", " << inner
       << ", " << *dtype << ", " << *reduction << ", "
       << siteLiteral(op, "reduce_scatter") << ");\n";
    return success();
  }
  if (auto allSlice = dyn_cast<shard::AllSliceOp>(op)) {
    // No communication: this rank keeps its chunk of the slice axis.
    auto group = groupOf(op, allSlice.getGrid(), allSlice.getGridAxes());
    auto type = elementTypeOf(allSlice.getResult(), op);
    if (failed(group) || failed(type) ||
        failed(allocate(allSlice.getResult(), op)))
      return failure();
    auto shape = cast<ShapedType>(allSlice.getResult().getType()).getShape();
    auto [outer, inner] =
        splitAtAxis(shape, allSlice.getSliceAxis().getSExtValue());
    os << "{\n";
    os.indent();
    os << "const std::int64_t index = context->groupIndex("
       << groupLiteral(*group) << ");\n";
    os << "for (std::int64_t o = 0; o < " << outer << "; ++o)\n";
    os << "  std::memcpy(" << name(allSlice.getResult()) << " + o * " << inner
       << "LL, " << name(allSlice.getInput()) << " + (o * " << group->size
       << "LL + index) * " << inner << "LL, " << inner << " * sizeof(" << *type
       << "));\n";
    os.unindent();
    os << "}\n";
    return success();
  }
  if (auto multiIndex = dyn_cast<shard::ProcessMultiIndexOp>(op)) {
    ArrayRef<int16_t> axes = multiIndex.getAxes();
    auto grid = module.lookupSymbol<shard::GridOp>(multiIndex.getGrid());
    if (!grid)
      return op->emitError("no shard.grid @") << multiIndex.getGrid();
    for (auto [i, result] : llvm::enumerate(multiIndex.getResults())) {
      int16_t axis = axes.empty() ? static_cast<int16_t>(i) : axes[i];
      auto group = groupOf(op, multiIndex.getGrid(), {axis});
      if (failed(group))
        return failure();
      os << "const std::int64_t " << bind(result) << " = context->groupIndex("
         << groupLiteral(*group) << ");\n";
    }
    return success();
  }
  if (auto linearIndex = dyn_cast<shard::ProcessLinearIndexOp>(op)) {
    auto grid = module.lookupSymbol<shard::GridOp>(linearIndex.getGrid());
    if (!grid)
      return op->emitError("no shard.grid @") << linearIndex.getGrid();
    SmallVector<int16_t> all;
    for (size_t i = 0; i < grid.getShape().size(); ++i)
      all.push_back(i);
    auto group = groupOf(op, linearIndex.getGrid(), all);
    if (failed(group))
      return failure();
    os << "const std::int64_t " << bind(linearIndex.getResult())
       << " = context->groupIndex(" << groupLiteral(*group) << ");\n";
    return success();
  }
  if (auto send = dyn_cast<shard::SendOp>(op)) {
    if (!send.getDestinationDynamic().empty() ||
        send.getDestination().size() != 1)
      return op->emitError("code generation needs one static destination");
    auto group = groupOf(op, send.getGrid(), send.getGridAxes());
    if (failed(group))
      return failure();
    os << "context->send(context->groupPeer(" << groupLiteral(*group) << ", "
       << send.getDestination()[0] << "), " << name(send.getInput()) << ", "
       << byteCount(send.getInput()) << ", " << siteLiteral(op, "send")
       << ");\n";
    alias(send.getResult(), send.getInput());
    return success();
  }
  if (auto recv = dyn_cast<shard::RecvOp>(op)) {
    std::optional<ArrayRef<int64_t>> source = recv.getSource();
    if (!recv.getSourceDynamic().empty() || !source || source->size() != 1)
      return op->emitError("code generation needs one static source");
    auto group = groupOf(op, recv.getGrid(), recv.getGridAxes());
    if (failed(group) || failed(allocate(recv.getResult(), op)))
      return failure();
    os << "context->recv(context->groupPeer(" << groupLiteral(*group) << ", "
       << (*source)[0] << "), " << name(recv.getResult()) << ", "
       << byteCount(recv.getResult()) << ", " << siteLiteral(op, "recv")
       << ");\n";
    return success();
  }
  return op->emitError("code generation does not support ") << op->getName();
}
