//===- Collectives.cpp - a shard collective as both targets see it --------===//
//
// What code generation needs of a collective, decided once for both
// targets: the group of ranks it spans, the tensor around its axis, its
// reduction and its peer, with the checks that refuse what neither target
// can run. EmitShard.cpp spells the result as RankContext calls,
// EmitCudaCollectives.cpp as NCCL calls.
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

/// `value`'s static shape as [outer, chunk] around `axis`.
static std::pair<int64_t, int64_t> splitValue(Value value, int64_t axis) {
  return splitAtAxis(cast<ShapedType>(value.getType()).getShape(), axis);
}

static LogicalResult checkReduction(Operation *op, shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Sum:
  case shard::ReductionKind::Product:
  case shard::ReductionKind::Max:
  case shard::ReductionKind::Min:
    return success();
  default:
    return op->emitError("code generation does not support reduction ")
           << shard::stringifyReductionKind(kind);
  }
}

StringRef mlir::tp::emit::spellReduction(shard::ReductionKind kind,
                                         std::array<StringRef, 4> names) {
  switch (kind) {
  case shard::ReductionKind::Product:
    return names[1];
  case shard::ReductionKind::Max:
    return names[2];
  case shard::ReductionKind::Min:
    return names[3];
  default: // Sum; checkReduction refused the others.
    return names[0];
  }
}

/// The one static peer of a send or recv.
static FailureOr<int64_t> staticPeer(Operation *op, ValueRange dynamic,
                                     std::optional<ArrayRef<int64_t>> peer,
                                     StringRef what) {
  if (!dynamic.empty() || !peer || peer->size() != 1)
    return op->emitError("code generation needs one static ") << what;
  return (*peer)[0];
}

FailureOr<Collective> CppEmitter::describeCollective(Operation *op) {
  Collective c;
  auto fill = [&](Collective::Kind kind, StringRef grid, ArrayRef<int16_t> axes,
                  Value input, Value result) -> LogicalResult {
    c.kind = kind;
    c.input = input;
    c.result = result;
    c.elementType = getElementTypeOrSelf(result ? result : input);
    FailureOr<GroupSpec> group = groupOf(op, grid, axes);
    if (failed(group))
      return failure();
    c.group = *group;
    return success();
  };
  if (auto allReduce = dyn_cast<shard::AllReduceOp>(op)) {
    if (!isa<RankedTensorType>(allReduce.getInput().getType()) ||
        allReduce.getInput().getType() != allReduce.getResult().getType())
      return op->emitError("code generation needs a tensor all_reduce "
                           "without a type change");
    c.reduction = allReduce.getReduction();
    if (failed(fill(Collective::Kind::AllReduce, allReduce.getGrid(),
                    allReduce.getGridAxes(), allReduce.getInput(),
                    allReduce.getResult())) ||
        failed(checkReduction(op, c.reduction)))
      return failure();
    return c;
  }
  if (auto allGather = dyn_cast<shard::AllGatherOp>(op)) {
    if (failed(fill(Collective::Kind::AllGather, allGather.getGrid(),
                    allGather.getGridAxes(), allGather.getInput(),
                    allGather.getResult())))
      return failure();
    std::tie(c.outer, c.chunk) = splitValue(
        allGather.getInput(), allGather.getGatherAxis().getSExtValue());
    return c;
  }
  if (auto reduceScatter = dyn_cast<shard::ReduceScatterOp>(op)) {
    c.reduction = reduceScatter.getReduction();
    if (failed(fill(Collective::Kind::ReduceScatter, reduceScatter.getGrid(),
                    reduceScatter.getGridAxes(), reduceScatter.getInput(),
                    reduceScatter.getResult())) ||
        failed(checkReduction(op, c.reduction)))
      return failure();
    std::tie(c.outer, c.chunk) =
        splitValue(reduceScatter.getResult(),
                   reduceScatter.getScatterAxis().getSExtValue());
    return c;
  }
  if (auto allSlice = dyn_cast<shard::AllSliceOp>(op)) {
    if (failed(fill(Collective::Kind::AllSlice, allSlice.getGrid(),
                    allSlice.getGridAxes(), allSlice.getInput(),
                    allSlice.getResult())))
      return failure();
    std::tie(c.outer, c.chunk) = splitValue(
        allSlice.getResult(), allSlice.getSliceAxis().getSExtValue());
    return c;
  }
  if (auto send = dyn_cast<shard::SendOp>(op)) {
    FailureOr<int64_t> peer = staticPeer(op, send.getDestinationDynamic(),
                                         send.getDestination(), "destination");
    if (failed(peer) ||
        failed(fill(Collective::Kind::Send, send.getGrid(), send.getGridAxes(),
                    send.getInput(), send.getResult())))
      return failure();
    c.peer = *peer;
    return c;
  }
  if (auto recv = dyn_cast<shard::RecvOp>(op)) {
    FailureOr<int64_t> peer =
        staticPeer(op, recv.getSourceDynamic(), recv.getSource(), "source");
    if (failed(peer) ||
        failed(fill(Collective::Kind::Recv, recv.getGrid(), recv.getGridAxes(),
                    Value(), recv.getResult())))
      return failure();
    c.peer = *peer;
    return c;
  }
  return op->emitError("code generation does not support ") << op->getName();
}
