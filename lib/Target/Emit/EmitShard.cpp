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

static StringRef reductionLiteral(shard::ReductionKind kind) {
  return spellReduction(kind,
                        {"tp::rt::Reduction::Sum", "tp::rt::Reduction::Product",
                         "tp::rt::Reduction::Max", "tp::rt::Reduction::Min"});
}

LogicalResult CppEmitter::emitShardOp(Operation *op) {
  if (isa<shard::GridOp>(op))
    return success();
  if (isa<shard::ProcessMultiIndexOp, shard::ProcessLinearIndexOp>(op))
    return emitProcessIndex(op);
  FailureOr<Collective> c = describeCollective(op);
  if (failed(c))
    return failure();
  std::string group = groupLiteral(c->group);
  switch (c->kind) {
  case Collective::Kind::AllReduce: {
    auto dtype = dtypeLiteral(op, c->elementType);
    if (failed(dtype))
      return failure();
    if (reducesInPlace(op)) {
      alias(c->result, c->input);
    } else {
      if (failed(allocate(c->result, op)))
        return failure();
      copy(c->result, c->input);
    }
    os << "context->allReduce(" << group << ", " << name(c->result) << ", "
       << numElements(c->result) << ", " << *dtype << ", "
       << reductionLiteral(c->reduction) << ", "
       << siteLiteral(op, "all_reduce") << ");\n";
    return success();
  }
  case Collective::Kind::AllGather: {
    auto type = elementTypeOf(c->result, op);
    if (failed(type) || failed(allocate(c->result, op)))
      return failure();
    os << "context->allGather(" << group << ", " << name(c->input) << ", "
       << name(c->result) << ", " << c->outer << ", " << c->chunk
       << " * sizeof(" << *type << "), " << siteLiteral(op, "all_gather")
       << ");\n";
    return success();
  }
  case Collective::Kind::ReduceScatter: {
    auto dtype = dtypeLiteral(op, c->elementType);
    if (failed(dtype) || failed(allocate(c->result, op)))
      return failure();
    os << "context->reduceScatter(" << group << ", " << name(c->input) << ", "
       << name(c->result) << ", " << c->outer << ", " << c->chunk << ", "
       << *dtype << ", " << reductionLiteral(c->reduction) << ", "
       << siteLiteral(op, "reduce_scatter") << ");\n";
    return success();
  }
  case Collective::Kind::AllSlice: {
    // No communication: this rank keeps its chunk of the slice axis.
    auto type = elementTypeOf(c->result, op);
    if (failed(type) || failed(allocate(c->result, op)))
      return failure();
    os << "{\n";
    os.indent();
    os << "const std::int64_t index = context->groupIndex(" << group << ");\n";
    os << "for (std::int64_t o = 0; o < " << c->outer << "; ++o)\n";
    os << "  std::memcpy(" << name(c->result) << " + o * " << c->chunk << "LL, "
       << name(c->input) << " + (o * " << c->group.size << "LL + index) * "
       << c->chunk << "LL, " << c->chunk << " * sizeof(" << *type << "));\n";
    os.unindent();
    os << "}\n";
    return success();
  }
  case Collective::Kind::Send:
    os << "context->send(context->groupPeer(" << group << ", " << c->peer
       << "), " << name(c->input) << ", " << byteCount(c->input) << ", "
       << siteLiteral(op, "send") << ");\n";
    alias(c->result, c->input);
    return success();
  case Collective::Kind::Recv:
    if (failed(allocate(c->result, op)))
      return failure();
    os << "context->recv(context->groupPeer(" << group << ", " << c->peer
       << "), " << name(c->result) << ", " << byteCount(c->result) << ", "
       << siteLiteral(op, "recv") << ");\n";
    return success();
  }
  llvm_unreachable("every collective kind is printed");
}

LogicalResult CppEmitter::emitProcessIndex(Operation *op) {
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
  llvm_unreachable("emitProcessIndex takes a process index op");
}
