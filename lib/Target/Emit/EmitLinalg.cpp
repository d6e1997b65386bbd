//===- EmitLinalg.cpp - linalg.generic as loops or BLAS calls -------------===//
//
// A generic becomes one of:
//  - a (batched) GEMM: a BLAS or packed-weight call (EmitGemm.cpp);
//  - a lookup: a sum over a dim in which only the element where an index
//    equals a loop-invariant key contributes (the one-hot form the importer
//    gives embedding Gathers), emitted as one guarded iteration;
//  - otherwise a loop nest over its iteration domain in the op's order; a
//    sum, max or min over the innermost dim into one f32 accumulator runs
//    in kReductionLanes partial results (a lane reduction), which the host
//    compiler vectorises.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"
#include "LinalgMatchers.h"
#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"

using namespace mlir;
using namespace mlir::tp::emit;

//===----------------------------------------------------------------------===//
// Index expressions
//===----------------------------------------------------------------------===//

std::string mlir::tp::emit::affineExprToCpp(AffineExpr expr,
                                            ArrayRef<std::string> dims,
                                            ArrayRef<std::string> symbols) {
  if (auto dim = dyn_cast<AffineDimExpr>(expr))
    return dims[dim.getPosition()];
  if (auto symbol = dyn_cast<AffineSymbolExpr>(expr))
    return symbols[symbol.getPosition()];
  if (auto constant = dyn_cast<AffineConstantExpr>(expr))
    return std::to_string(constant.getValue()) + "LL";
  auto binary = cast<AffineBinaryOpExpr>(expr);
  std::string lhs = affineExprToCpp(binary.getLHS(), dims, symbols);
  std::string rhs = affineExprToCpp(binary.getRHS(), dims, symbols);
  switch (expr.getKind()) {
  case AffineExprKind::Add:
    return "(" + lhs + " + " + rhs + ")";
  case AffineExprKind::Mul:
    return "(" + lhs + " * " + rhs + ")";
  case AffineExprKind::FloorDiv:
    return "floorDiv<std::int64_t>(" + lhs + ", " + rhs + ")";
  case AffineExprKind::CeilDiv:
    return "(-floorDiv<std::int64_t>(-" + lhs + ", " + rhs + "))";
  case AffineExprKind::Mod:
    return "(" + lhs + " - floorDiv<std::int64_t>(" + lhs + ", " + rhs +
           ") * " + rhs + ")";
  default:
    return "0";
  }
}

std::string CppEmitter::offsetExpr(AffineMap map, ArrayRef<int64_t> shape,
                                   ArrayRef<std::string> indices) {
  SmallVector<int64_t> strides = stridesOf(shape);
  std::string text;
  for (auto [i, expr] : llvm::enumerate(map.getResults())) {
    if (shape[i] == 1)
      continue;
    std::string term = affineExprToCpp(expr, indices);
    if (strides[i] != 1)
      term += " * " + std::to_string(strides[i]) + "LL";
    text += (text.empty() ? "" : " + ") + term;
  }
  return text.empty() ? "0" : text;
}

/// Lanes of a lane reduction: one AVX-512 vector of f32, two AVX2 ones.
static constexpr int64_t kReductionLanes = 16;

namespace mlir::tp::emit {
/// A reduction over the innermost loop into one f32 accumulator per output
/// element, by a combiner combineExpr knows (a norm's sums, a softmax's max
/// and sum outside fused attention). A C++ compiler must keep such a loop
/// scalar: it may not reorder float additions, and it does not see a
/// NaN-propagating max as a reduction. So it is emitted as
/// kReductionLanes partial results, each over every kReductionLanes-th
/// element from the combiner's identity, combined pairwise at the end and
/// then into the accumulator; the loop over the lanes vectorises. The
/// order of the additions is fixed by the code, the same on every run and
/// every rank; a max or min is exactly the sequential one.
struct LaneReduction {
  unsigned dim;
  Operation *combine;
  BlockArgument accumulator;
};

/// What emitGenericLoops' parts share: the generic, its loop ranges and
/// index names, and the restrict-qualified view of each operand ("" for a
/// scalar one).
struct LoopNest {
  linalg::GenericOp op;
  SmallVector<int64_t> ranges;
  SmallVector<std::string> indices;
  SmallVector<std::string> operandPtr;
};
} // namespace mlir::tp::emit

static std::optional<LaneReduction> matchLaneReduction(linalg::GenericOp op) {
  SmallVector<unsigned> reductions;
  op.getReductionDims(reductions);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (reductions.size() != 1 || op.getNumDpsInits() != 1 ||
      reductions.front() != ranges.size() - 1)
    return std::nullopt;
  unsigned dim = reductions.front();
  int64_t range = ranges[dim];
  if (ShapedType::isDynamic(range) || range < 2 * kReductionLanes ||
      range % kReductionLanes != 0)
    return std::nullopt;
  Block &body = op.getRegion().front();
  BlockArgument accumulator = body.getArguments().back();
  if (!accumulator.getType().isF32() || !accumulator.hasOneUse())
    return std::nullopt;
  Operation *combine = body.getTerminator()->getOperand(0).getDefiningOp();
  if (!combine || combine->getBlock() != &body ||
      combineExpr(combine, "", "").empty() ||
      (combine->getOperand(0) == accumulator) ==
          (combine->getOperand(1) == accumulator))
    return std::nullopt;
  return LaneReduction{dim, combine, accumulator};
}

//===----------------------------------------------------------------------===//
// Loop nests
//===----------------------------------------------------------------------===//

LogicalResult CppEmitter::emitGeneric(linalg::GenericOp op) {
  if (!op.hasPureTensorSemantics())
    return op.emitError("code generation expects linalg on tensors");
  if (fusedIntoAttention.contains(op)) {
    os << "// computed by the fused attention below, never stored\n";
    return success();
  }
  if (attentionAt.count(op))
    return emitFusedAttention(op);
  if (inGemmEpilogue.contains(op)) {
    os << "// computed in the epilogue of the product above\n";
    return success();
  }
  std::optional<Kernel> kernel = getKernel(op);
  if (!kernel)
    return op.emitError("code generation: no #tp.kernel (the module was "
                        "not prepared: tp-prepare-for-emission)");
  if (*kernel == Kernel::Gemm) {
    FailureOr<Gemm> gemm = matchGemm(op);
    if (failed(gemm))
      return op.emitError("code generation: #tp.kernel<gemm> on an op that "
                          "is not a GEMM");
    return emitGemm(*this, op, *gemm);
  }
  if (failed(prepareGenericResults(op)))
    return failure();
  os << "TP_LOOP_NEST {\n";
  os.indent();
  if (failed(emitGenericLoops(op, {})))
    return failure();
  os.unindent();
  os << "}();\n";
  return success();
}

LogicalResult CppEmitter::prepareGenericResults(linalg::GenericOp op) {
  // Results: the init's own buffer where it is free to take them, else
  // fresh buffers, holding the init where the payload reads it.
  for (OpOperand &init : op.getDpsInitsMutable()) {
    Value result = op.getTiedOpResult(&init);
    if (writesInitInPlace(op, init)) {
      os << "// accumulates in place into " << name(init.get()) << "\n";
      alias(result, init.get());
    } else {
      if (failed(allocate(result, op)))
        return failure();
      if (op.payloadUsesValueFromOperand(&init))
        copy(result, init.get());
    }
  }
  return success();
}

LogicalResult CppEmitter::emitGenericLoops(
    linalg::GenericOp op, ArrayRef<std::string> rows,
    std::optional<std::pair<std::string, std::string>> columns) {
  std::optional<Kernel> kernel = getKernel(op);
  std::optional<Lookup> lookup;
  if (kernel == Kernel::Lookup || kernel == Kernel::ScatterAdd) {
    lookup = matchLookup(op, /*allowScatter=*/true);
    if (!lookup || lookup->scatter != (kernel == Kernel::ScatterAdd))
      return op.emitError("code generation: #tp.kernel<")
             << stringifyKernel(*kernel) << "> on an op that is not one";
  }
  assert((!lookup || rows.empty()) && "a lookup is never row-fused");
  LoopNest nest{op, op.getStaticLoopRanges(), {}, {}};
  // The row loops of a row group are the group's (EmitRowGroups.cpp).
  nest.indices.assign(rows.begin(), rows.end());
  for (unsigned i = rows.size(); i < nest.ranges.size(); ++i)
    nest.indices.push_back("i" + std::to_string(nextId) + "_" +
                           std::to_string(i));
  ++nextId;

  // Restrict-qualified views tell the compiler outputs alias nothing.
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<RankedTensorType>(operand.get().getType())) {
      nest.operandPtr.push_back("");
      continue;
    }
    FailureOr<std::string> type = elementTypeOf(operand.get(), op);
    if (failed(type))
      return failure();
    std::string ptr = "p" + std::to_string(operand.getOperandNumber());
    if (op.isDpsInit(&operand)) {
      Value result = op.getTiedOpResult(&operand);
      os << *type << " *__restrict " << ptr << " = " << name(result) << ";\n";
    } else {
      os << "const " << *type << " *" << ptr << " = " << name(operand.get())
         << ";\n";
    }
    nest.operandPtr.push_back(ptr);
  }

  std::optional<LaneReduction> lanes;
  if (!lookup)
    lanes = matchLaneReduction(op);
  for (auto [i, range] : llvm::enumerate(nest.ranges)) {
    const std::string &index = nest.indices[i];
    if (i < rows.size() || (lookup && i == lookup->dim) ||
        (lanes && i == lanes->dim))
      continue;
    if (columns && i + 1 == nest.ranges.size()) {
      os << "for (std::int64_t " << index << " = " << columns->first << "; "
         << index << " < " << columns->first << " + " << columns->second
         << "; ++" << index << ")\n";
      continue;
    }
    os << "for (std::int64_t " << index << " = 0; " << index << " < " << range
       << "; ++" << index << ")\n";
  }
  os << "{\n";
  os.indent();
  LogicalResult emitted = success();
  if (lanes) {
    emitted = emitLaneReductionBody(nest, *lanes);
  } else if (lookup) {
    emitted = emitLookupBody(nest, *lookup);
  } else {
    Block &body = op.getRegion().front();
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty() && failed(emitLoopLoad(nest, arg)))
        return failure();
    for (Operation &inner : body.without_terminator())
      if (failed(emitLoopBodyOp(nest, inner)))
        return failure();
    emitLoopStores(nest);
  }
  if (failed(emitted))
    return failure();
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CppEmitter::emitLoopLoad(const LoopNest &nest,
                                       BlockArgument arg) {
  linalg::GenericOp op = nest.op; // nest is const, the handle is not
  // A block argument's load, bound as a scalar.
  OpOperand *operand = op.getMatchingOpOperand(arg);
  Value value = operand->get();
  FailureOr<std::string> type = scalarTypeFor(arg.getType(), op);
  if (failed(type))
    return failure();
  std::string text = bind(arg, "s");
  if (!isa<RankedTensorType>(value.getType())) {
    os << "const " << *type << " " << text << " = " << name(value) << ";\n";
    return success();
  }
  auto shape = cast<RankedTensorType>(value.getType()).getShape();
  os << "const " << *type << " " << text << " = "
     << nest.operandPtr[operand->getOperandNumber()] << "["
     << offsetExpr(op.getMatchingIndexingMap(operand), shape, nest.indices)
     << "];\n";
  return success();
}

LogicalResult CppEmitter::emitLoopBodyOp(const LoopNest &nest,
                                         Operation &inner) {
  if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
    bindTo(index.getResult(), nest.indices[index.getDim()]);
    return success();
  }
  return emitScalarOp(&inner);
}

void CppEmitter::emitLoopStores(const LoopNest &nest) {
  linalg::GenericOp op = nest.op; // nest is const, the handle is not
  auto yield = cast<linalg::YieldOp>(op.getRegion().front().getTerminator());
  for (auto [i, value] : llvm::enumerate(yield.getValues())) {
    OpOperand *init = op.getDpsInitOperand(i);
    auto shape = cast<RankedTensorType>(init->get().getType()).getShape();
    os << nest.operandPtr[init->getOperandNumber()] << "["
       << offsetExpr(op.getMatchingIndexingMap(init), shape, nest.indices)
       << "] = " << name(value) << ";\n";
  }
}

LogicalResult CppEmitter::emitLaneReductionBody(const LoopNest &nest,
                                                const LaneReduction &lanes) {
  linalg::GenericOp op = nest.op; // nest is const, the handle is not
  // The partial results, the element loop in blocks of kReductionLanes
  // with the body once per lane, then the lanes pairwise.
  Block &body = op.getRegion().front();
  const std::string &index = nest.indices[lanes.dim];
  std::string partial = index + "_lanes", block = index + "_block",
              lane = index + "_lane";
  os << "float " << partial << "[" << kReductionLanes << "];\n";
  os << "std::fill_n(" << partial << ", " << kReductionLanes << ", "
     << identityExpr(lanes.combine, "float") << ");\n";
  os << "for (std::int64_t " << block << " = 0; " << block << " < "
     << nest.ranges[lanes.dim] << "; " << block << " += " << kReductionLanes
     << ")\n";
  os << "for (std::int64_t " << lane << " = 0; " << lane << " < "
     << kReductionLanes << "; ++" << lane << ") {\n";
  os.indent();
  os << "const std::int64_t " << index << " = " << block << " + " << lane
     << ";\n";
  std::string slot = partial + "[" + lane + "]";
  bindTo(lanes.accumulator, slot);
  for (BlockArgument arg : body.getArguments())
    if (!arg.use_empty() && arg != lanes.accumulator)
      if (failed(emitLoopLoad(nest, arg)))
        return failure();
  for (Operation &inner : body.without_terminator())
    if (failed(emitLoopBodyOp(nest, inner)))
      return failure();
  os << slot << " = " << name(lanes.combine->getResult(0)) << ";\n";
  os.unindent();
  os << "}\n";
  os << "for (std::int64_t " << lane << " = " << kReductionLanes / 2 << "; "
     << lane << " > 0; " << lane << " /= 2)\n";
  os << "  for (std::int64_t l = 0; l < " << lane << "; ++l)\n";
  os << "    " << partial << "[l] = "
     << combineExpr(lanes.combine, partial + "[l]",
                    partial + "[l + " + lane + "]")
     << ";\n";
  // Into the accumulator, which holds the init.
  OpOperand *init = op.getDpsInitOperand(0);
  auto shape = cast<RankedTensorType>(init->get().getType()).getShape();
  std::string element =
      nest.operandPtr[init->getOperandNumber()] + "[" +
      offsetExpr(op.getMatchingIndexingMap(init), shape, nest.indices) + "]";
  os << element << " = " << combineExpr(lanes.combine, element, partial + "[0]")
     << ";\n";
  return success();
}

LogicalResult CppEmitter::emitLookupBody(const LoopNest &nest,
                                         const Lookup &lookup) {
  // Everything the key needs, then the one iteration that contributes.
  linalg::GenericOp op = nest.op;
  Block &body = op.getRegion().front();
  auto usesLookupDim = [&](BlockArgument arg) {
    OpOperand *operand = op.getMatchingOpOperand(arg);
    return isa<RankedTensorType>(operand->get().getType()) &&
           op.getMatchingIndexingMap(operand).isFunctionOfDim(lookup.dim);
  };
  for (BlockArgument arg : body.getArguments())
    if (!arg.use_empty() && !usesLookupDim(arg) &&
        !op.isDpsInit(op.getMatchingOpOperand(arg)))
      if (failed(emitLoopLoad(nest, arg)))
        return failure();
  for (Operation *inner : lookup.keyOps)
    if (failed(emitLoopBodyOp(nest, *inner)))
      return failure();
  const std::string &index = nest.indices[lookup.dim];
  os << "const std::int64_t " << index << " = " << name(lookup.key);
  if (lookup.offset)
    os << " - " << name(lookup.offset);
  os << ";\nif (" << index << " >= 0 && " << index << " < "
     << nest.ranges[lookup.dim] << ") {\n";
  os.indent();
  for (BlockArgument arg : body.getArguments())
    if (!arg.use_empty() && !names.count(arg))
      if (failed(emitLoopLoad(nest, arg)))
        return failure();
  for (Operation &inner : body.without_terminator())
    if (!lookup.keyOps.contains(&inner))
      if (failed(emitLoopBodyOp(nest, inner)))
        return failure();
  emitLoopStores(nest);
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CppEmitter::emitFill(linalg::FillOp op) {
  if (!op.hasPureTensorSemantics())
    return op.emitError("code generation expects linalg on tensors");
  Value result = op.getResult(0);
  bool unread = llvm::all_of(op->getUsers(), [&](Operation *user) {
    return fusedIntoAttention.contains(user) || attentionAt.count(user);
  });
  if (unread && !op->use_empty()) {
    os << "// only the init of ops that fused attention replaces: no buffer\n";
    bindTo(result, "nullptr");
    return success();
  }
  if (onlyFeedsGemms(op)) {
    os << "// zeros for BLAS's beta = 0: nothing to store\n";
    bindTo(result, "nullptr");
    return success();
  }
  if (failed(allocate(result, op)))
    return failure();
  os << "std::fill_n(" << name(result) << ", " << numElements(result) << ", "
     << name(op.getInputs()[0]) << ");\n";
  return success();
}
