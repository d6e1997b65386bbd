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

static StringRef ncclReduction(shard::ReductionKind kind) {
  return spellReduction(kind, {"ncclSum", "ncclProd", "ncclMax", "ncclMin"});
}

std::string CudaEmitter::groupLiteral(GroupSpec group) const {
  return "tp::cuda::Group{" + std::to_string(group.size) + ", " +
         std::to_string(group.stride) + "}";
}

LogicalResult CudaEmitter::emitCudaAllGather(Operation *op,
                                             const Collective &c) {
  std::string stream = "context->stream), " + site + ");\n";
  auto type = elementTypeOf(c.result, op);
  if (failed(type) || failed(allocate(c.result, op)))
    return failure();
  std::string chunkBytes = std::to_string(c.chunk) + " * sizeof(" + *type + ")";
  std::string comm = commFor(c.group);
  if (c.outer == 1) {
    os << "TP_CUDA_CHECK(ncclAllGather(" << name(c.input) << ", "
       << name(c.result) << ", " << chunkBytes << ", ncclUint8, " << comm
       << ", " << stream;
    return success();
  }
  os << "{\n";
  os.indent();
  os << "// NCCL gathers rank-major: [" << c.group.size << ", " << c.outer
     << ", chunk] here, [" << c.outer << ", " << c.group.size
     << ", chunk] in the result.\n";
  os << "char *gathered = tp::cuda::allocate<char>(context, "
     << c.group.size * c.outer << "LL * " << chunkBytes << ", " << site
     << ");\n";
  os << "TP_CUDA_CHECK(ncclAllGather(" << name(c.input) << ", gathered, "
     << c.outer << "LL * " << chunkBytes << ", ncclUint8, " << comm << ", "
     << stream;
  os << "tp::cuda::swapOuter(context, " << name(c.result) << ", gathered, "
     << c.group.size << ", " << c.outer << ", " << chunkBytes << ", " << site
     << ");\n";
  os << "tp::cuda::release(context, gathered);\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CudaEmitter::emitCudaReduceScatter(Operation *op,
                                                 const Collective &c) {
  std::string stream = "context->stream), " + site + ");\n";
  auto type = ncclType(op, c.elementType);
  auto cType = elementTypeOf(c.result, op);
  if (failed(type) || failed(cType) || failed(allocate(c.result, op)))
    return failure();
  std::string comm = commFor(c.group);
  StringRef reduction = ncclReduction(c.reduction);
  if (c.outer == 1) {
    os << "TP_CUDA_CHECK(ncclReduceScatter(" << name(c.input) << ", "
       << name(c.result) << ", " << c.chunk << ", " << *type << ", "
       << reduction << ", " << comm << ", " << stream;
    return success();
  }
  os << "{\n";
  os.indent();
  os << "// NCCL scatters rank-major: [" << c.outer << ", " << c.group.size
     << ", chunk] in the input, [" << c.group.size << ", " << c.outer
     << ", chunk] here.\n";
  os << *cType << " *staged = tp::cuda::allocate<" << *cType << ">(context, "
     << c.group.size * c.outer * c.chunk << ", " << site << ");\n";
  os << "tp::cuda::swapOuter(context, staged, " << name(c.input) << ", "
     << c.outer << ", " << c.group.size << ", " << c.chunk << " * sizeof("
     << *cType << "), " << site << ");\n";
  os << "TP_CUDA_CHECK(ncclReduceScatter(staged, " << name(c.result) << ", "
     << c.outer * c.chunk << ", " << *type << ", " << reduction << ", " << comm
     << ", " << stream;
  os << "tp::cuda::release(context, staged);\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CudaEmitter::emitShardOp(Operation *op) {
  if (isa<shard::GridOp>(op))
    return success();
  // Host-side scalars: the same as on the CPU, with this target's Group.
  if (isa<shard::ProcessMultiIndexOp, shard::ProcessLinearIndexOp>(op))
    return emitProcessIndex(op);
  FailureOr<Collective> c = describeCollective(op);
  if (failed(c))
    return failure();
  std::string stream = "context->stream), " + site + ");\n";
  switch (c->kind) {
  case Collective::Kind::AllReduce: {
    auto type = ncclType(op, c->elementType);
    if (failed(type))
      return failure();
    // In place when the input is this op's alone (the liveness analysis
    // treats the result as an alias then, see reducesInPlace).
    if (reducesInPlace(op))
      alias(c->result, c->input);
    else if (failed(allocate(c->result, op)))
      return failure();
    os << "TP_CUDA_CHECK(ncclAllReduce(" << name(c->input) << ", "
       << name(c->result) << ", " << numElements(c->result) << ", " << *type
       << ", " << ncclReduction(c->reduction) << ", " << commFor(c->group)
       << ", " << stream;
    return success();
  }
  case Collective::Kind::AllGather:
    return emitCudaAllGather(op, *c);
  case Collective::Kind::ReduceScatter:
    return emitCudaReduceScatter(op, *c);
  case Collective::Kind::AllSlice:
    // No communication: this rank keeps its chunk of the slice axis.
    if (failed(allocate(c->result, op)))
      return failure();
    os << "{\n";
    os.indent();
    os << "const std::int64_t index = context->groupIndex("
       << groupLiteral(c->group) << ");\n";
    os << "tp::cuda::copyBox(context, " << name(c->result) << ", "
       << name(c->input) << " + index * " << c->chunk
       << "LL, tp::cuda::Box{2, {" << c->outer << ", " << c->chunk << "}, {"
       << c->chunk << ", 1}, {" << c->group.size * c->chunk << ", 1}}, " << site
       << ");\n";
    os.unindent();
    os << "}\n";
    return success();
  case Collective::Kind::Send:
    os << "TP_CUDA_CHECK(ncclSend(" << name(c->input) << ", "
       << byteCount(c->input) << ", ncclUint8, context->groupPeer("
       << groupLiteral(c->group) << ", " << c->peer << "), context->world, "
       << stream;
    alias(c->result, c->input);
    return success();
  case Collective::Kind::Recv:
    if (failed(allocate(c->result, op)))
      return failure();
    os << "TP_CUDA_CHECK(ncclRecv(" << name(c->result) << ", "
       << byteCount(c->result) << ", ncclUint8, context->groupPeer("
       << groupLiteral(c->group) << ", " << c->peer << "), context->world, "
       << stream;
    return success();
  }
  llvm_unreachable("every collective kind is printed");
}
