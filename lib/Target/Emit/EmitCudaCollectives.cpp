//===- EmitCudaCollectives.cpp - shard collectives as NCCL calls ----------===//
//
// Each collective runs on its group's communicator (split from the world's
// when the rank is created) and on the rank's stream, so it is ordered with
// the kernels around it and the host never waits. NCCL gathers and scatters
// rank-major; an axis that is not the outermost takes a layout swap on the
// device (tp::cuda::swapOuter) through a temporary. Send/recv between
// pipeline stages use the world communicator and global ranks.
//
//===----------------------------------------------------------------------===//

#include "CudaEmitter.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace mlir::tp::emit;

static FailureOr<std::string> ncclType(Operation *op, Type type) {
  if (type.isF32())
    return std::string("ncclFloat32");
  if (type.isF64())
    return std::string("ncclFloat64");
  if (type.isF16())
    return std::string("ncclFloat16");
  if (type.isBF16())
    return std::string("ncclBfloat16");
  if (type.isInteger(64) || type.isIndex())
    return std::string("ncclInt64");
  if (type.isInteger(32))
    return std::string("ncclInt32");
  if (type.isInteger(8))
    return std::string("ncclInt8");
  if (type.isInteger(1))
    return std::string("ncclUint8");
  return op->emitError("NCCL reductions do not support element type ") << type;
}

static FailureOr<std::string> ncclReduction(Operation *op,
                                            shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Sum:
    return std::string("ncclSum");
  case shard::ReductionKind::Product:
    return std::string("ncclProd");
  case shard::ReductionKind::Max:
    return std::string("ncclMax");
  case shard::ReductionKind::Min:
    return std::string("ncclMin");
  default:
    return op->emitError("code generation does not support reduction ")
           << shard::stringifyReductionKind(kind);
  }
}

std::string CudaEmitter::groupLiteral(GroupSpec group) const {
  return "tp::cuda::Group{" + std::to_string(group.size) + ", " +
         std::to_string(group.stride) + "}";
}

LogicalResult CudaEmitter::emitCudaAllGather(shard::AllGatherOp allGather) {
  Operation *op = allGather;
  std::string stream = "context->stream), " + site + ");\n";
  auto group = groupOf(op, allGather.getGrid(), allGather.getGridAxes());
  auto type = elementTypeOf(allGather.getResult(), op);
  if (failed(group) || failed(type) ||
      failed(allocate(allGather.getResult(), op)))
    return failure();
  auto shape = cast<ShapedType>(allGather.getInput().getType()).getShape();
  auto [outer, chunk] =
      splitAtAxis(shape, allGather.getGatherAxis().getSExtValue());
  std::string chunkBytes = std::to_string(chunk) + " * sizeof(" + *type + ")";
  std::string comm = commFor(*group);
  if (outer == 1) {
    os << "TP_CUDA_CHECK(ncclAllGather(" << name(allGather.getInput()) << ", "
       << name(allGather.getResult()) << ", " << chunkBytes << ", ncclUint8, "
       << comm << ", " << stream;
    return success();
  }
  os << "{\n";
  os.indent();
  os << "// NCCL gathers rank-major: [" << group->size << ", " << outer
     << ", chunk] here, [" << outer << ", " << group->size
     << ", chunk] in the result.\n";
  os << "char *gathered = tp::cuda::allocate<char>(context, "
     << group->size * outer << "LL * " << chunkBytes << ", " << site << ");\n";
  os << "TP_CUDA_CHECK(ncclAllGather(" << name(allGather.getInput())
     << ", gathered, " << outer << "LL * " << chunkBytes << ", ncclUint8, "
     << comm << ", " << stream;
  os << "tp::cuda::swapOuter(context, " << name(allGather.getResult())
     << ", gathered, " << group->size << ", " << outer << ", " << chunkBytes
     << ", " << site << ");\n";
  os << "tp::cuda::release(context, gathered);\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult
CudaEmitter::emitCudaReduceScatter(shard::ReduceScatterOp reduceScatter) {
  Operation *op = reduceScatter;
  std::string stream = "context->stream), " + site + ");\n";
  auto group =
      groupOf(op, reduceScatter.getGrid(), reduceScatter.getGridAxes());
  Type elementType = getElementTypeOrSelf(reduceScatter.getResult());
  auto type = ncclType(op, elementType);
  auto cType = elementTypeOf(reduceScatter.getResult(), op);
  auto reduction = ncclReduction(op, reduceScatter.getReduction());
  if (failed(group) || failed(type) || failed(cType) || failed(reduction) ||
      failed(allocate(reduceScatter.getResult(), op)))
    return failure();
  auto shape = cast<ShapedType>(reduceScatter.getResult().getType()).getShape();
  auto [outer, chunk] =
      splitAtAxis(shape, reduceScatter.getScatterAxis().getSExtValue());
  std::string comm = commFor(*group);
  if (outer == 1) {
    os << "TP_CUDA_CHECK(ncclReduceScatter(" << name(reduceScatter.getInput())
       << ", " << name(reduceScatter.getResult()) << ", " << chunk << ", "
       << *type << ", " << *reduction << ", " << comm << ", " << stream;
    return success();
  }
  os << "{\n";
  os.indent();
  os << "// NCCL scatters rank-major: [" << outer << ", " << group->size
     << ", chunk] in the input, [" << group->size << ", " << outer
     << ", chunk] here.\n";
  os << *cType << " *staged = tp::cuda::allocate<" << *cType << ">(context, "
     << group->size * outer * chunk << ", " << site << ");\n";
  os << "tp::cuda::swapOuter(context, staged, "
     << name(reduceScatter.getInput()) << ", " << outer << ", " << group->size
     << ", " << chunk << " * sizeof(" << *cType << "), " << site << ");\n";
  os << "TP_CUDA_CHECK(ncclReduceScatter(staged, "
     << name(reduceScatter.getResult()) << ", " << outer * chunk << ", "
     << *type << ", " << *reduction << ", " << comm << ", " << stream;
  os << "tp::cuda::release(context, staged);\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CudaEmitter::emitCudaShardOp(Operation *op) {
  if (isa<shard::GridOp>(op))
    return success();
  std::string stream = "context->stream), " + site + ");\n";

  if (auto allReduce = dyn_cast<shard::AllReduceOp>(op)) {
    if (!isa<RankedTensorType>(allReduce.getInput().getType()) ||
        allReduce.getInput().getType() != allReduce.getResult().getType())
      return op->emitError("code generation needs a tensor all_reduce "
                           "without a type change");
    auto group = groupOf(op, allReduce.getGrid(), allReduce.getGridAxes());
    auto type =
        ncclType(op, getElementTypeOrSelf(allReduce.getResult().getType()));
    auto reduction = ncclReduction(op, allReduce.getReduction());
    if (failed(group) || failed(type) || failed(reduction))
      return failure();
    // In place when the input is this op's alone (the liveness analysis
    // treats the result as an alias then, see reducesInPlace).
    if (reducesInPlace(op))
      alias(allReduce.getResult(), allReduce.getInput());
    else if (failed(allocate(allReduce.getResult(), op)))
      return failure();
    os << "TP_CUDA_CHECK(ncclAllReduce(" << name(allReduce.getInput()) << ", "
       << name(allReduce.getResult()) << ", "
       << numElements(allReduce.getResult()) << ", " << *type << ", "
       << *reduction << ", " << commFor(*group) << ", " << stream;
    return success();
  }
  if (auto allGather = dyn_cast<shard::AllGatherOp>(op))
    return emitCudaAllGather(allGather);
  if (auto reduceScatter = dyn_cast<shard::ReduceScatterOp>(op))
    return emitCudaReduceScatter(reduceScatter);
  if (auto allSlice = dyn_cast<shard::AllSliceOp>(op)) {
    // No communication: this rank keeps its chunk of the slice axis.
    auto group = groupOf(op, allSlice.getGrid(), allSlice.getGridAxes());
    if (failed(group) || failed(allocate(allSlice.getResult(), op)))
      return failure();
    auto shape = cast<ShapedType>(allSlice.getResult().getType()).getShape();
    auto [outer, chunk] =
        splitAtAxis(shape, allSlice.getSliceAxis().getSExtValue());
    os << "{\n";
    os.indent();
    os << "const std::int64_t index = context->groupIndex("
       << groupLiteral(*group) << ");\n";
    os << "tp::cuda::copyBox(context, " << name(allSlice.getResult()) << ", "
       << name(allSlice.getInput()) << " + index * " << chunk
       << "LL, tp::cuda::Box{2, {" << outer << ", " << chunk << "}, {" << chunk
       << ", 1}, {" << group->size * chunk << ", 1}}, " << site << ");\n";
    os.unindent();
    os << "}\n";
    return success();
  }
  // Host-side scalars: the same as on the CPU, with this target's Group.
  if (isa<shard::ProcessMultiIndexOp, shard::ProcessLinearIndexOp>(op))
    return CppEmitter::emitShardOp(op);
  if (auto send = dyn_cast<shard::SendOp>(op)) {
    if (!send.getDestinationDynamic().empty() ||
        send.getDestination().size() != 1)
      return op->emitError("code generation needs one static destination");
    auto group = groupOf(op, send.getGrid(), send.getGridAxes());
    if (failed(group))
      return failure();
    os << "TP_CUDA_CHECK(ncclSend(" << name(send.getInput()) << ", "
       << byteCount(send.getInput()) << ", ncclUint8, context->groupPeer("
       << groupLiteral(*group) << ", " << send.getDestination()[0]
       << "), context->world, " << stream;
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
    os << "TP_CUDA_CHECK(ncclRecv(" << name(recv.getResult()) << ", "
       << byteCount(recv.getResult()) << ", ncclUint8, context->groupPeer("
       << groupLiteral(*group) << ", " << (*source)[0] << "), context->world, "
       << stream;
    return success();
  }
  return op->emitError("code generation does not support ") << op->getName();
}
