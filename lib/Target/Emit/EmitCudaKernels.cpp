//===- EmitCudaKernels.cpp - linalg.generic as cuBLAS calls or kernels ----===//
//
// A generic becomes one of:
//  - a (batched) GEMM: a cuBLAS call (EmitCudaGemm.cpp);
//  - a kernel with one thread per point of the parallel iteration space
//    (grid-stride), looping over the reduction dims inside the thread with
//    the accumulators in registers; a lookup (one-hot sum) runs only its one
//    contributing iteration;
//  - for a reduction of at least a warp's worth of elements that folds each
//    into one accumulator with an associative op (a sum, a product, a max or
//    a min: norms, softmax), a kernel with one warp per point: the lanes
//    stride over the reduced elements together (coalesced) and combine
//    their partial results with warp shuffles;
//  - when some output element is not owned by exactly one parallel point
//    (an output map that drops a parallel dim, or uses a reduction dim), a
//    kernel of one thread that runs the C++ emitter's loop nest: correct,
//    and rare enough not to matter.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelWriter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tp::emit;

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

bool KernelWriter::pointsOwnOutputs() {
  for (OpOperand &init : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&init);
    llvm::SmallBitVector seen(ranges.size());
    for (AffineExpr expr : map.getResults()) {
      auto dim = dyn_cast<AffineDimExpr>(expr);
      if (!dim || seen.test(dim.getPosition()) ||
          !llvm::is_contained(pointDims, dim.getPosition()))
        return false;
      seen.set(dim.getPosition());
    }
    for (unsigned d : pointDims)
      if (!seen.test(d) && ranges[d] != 1)
        return false;
  }
  return true;
}

bool KernelWriter::argUsesDim(BlockArgument arg, unsigned dim) {
  OpOperand *operand = op.getMatchingOpOperand(arg);
  return isa<RankedTensorType>(operand->get().getType()) &&
         op.getMatchingIndexingMap(operand).isFunctionOfDim(dim);
}

bool KernelWriter::dimIsRead(unsigned dim) {
  for (OpOperand &operand : op->getOpOperands()) {
    auto tensor = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!tensor)
      continue;
    for (auto [i, expr] :
         llvm::enumerate(op.getMatchingIndexingMap(&operand).getResults()))
      if (tensor.getDimSize(i) != 1 && expr.isFunctionOfDim(dim))
        return true;
  }
  return llvm::any_of(
      body.getOps<linalg::IndexOp>(),
      [&](linalg::IndexOp index) { return index.getDim() == dim; });
}

LogicalResult KernelWriter::collectParams() {
  // Inputs the payload reads.
  for (OpOperand *input : op.getDpsInputOperands()) {
    BlockArgument arg = op.getMatchingBlockArgument(input);
    if (arg.use_empty())
      continue;
    FailureOr<std::string> type = e.scalarTypeFor(arg.getType(), op);
    if (failed(type))
      return failure();
    std::string paramName =
        prefix + "p" + std::to_string(input->getOperandNumber());
    if (isa<RankedTensorType>(input->get().getType()))
      addParam(input->get(), inputPointer(input->get(), *type), paramName);
    else
      addParam(input->get(), "const " + *type, paramName);
    operandParam[input->getOperandNumber()] = paramName;
  }
  // Owned mode reads an init from its own buffer and writes a fresh result;
  // serial mode works in place on the result, which holds a copy of it.
  for (OpOperand &init : op.getDpsInitsMutable()) {
    BlockArgument arg = op.getMatchingBlockArgument(&init);
    FailureOr<std::string> type = e.scalarTypeFor(arg.getType(), op);
    if (failed(type))
      return failure();
    if (owned && !arg.use_empty()) {
      std::string paramName =
          prefix + "p" + std::to_string(init.getOperandNumber());
      addParam(init.get(), inputPointer(init.get(), *type), paramName);
      operandParam[init.getOperandNumber()] = paramName;
    }
    std::string paramName = prefix + "r" + std::to_string(resultParam.size());
    Value result = op.getTiedOpResult(&init);
    addParam(result,
             *type + (shared->contains(result) ? " *" : " *__restrict__"),
             paramName);
    resultParam.push_back(paramName);
  }
  // Values from outside the op: host scalars, and tensors read through
  // tensor.extract.
  WalkResult walk = op.getRegion().walk([&](Operation *inner) {
    for (Value operand : inner->getOperands()) {
      if (op.getRegion().isAncestor(operand.getParentRegion()) ||
          captured.count(operand))
        continue;
      std::string paramName = prefix + "q" + std::to_string(captured.size());
      auto tensor = dyn_cast<RankedTensorType>(operand.getType());
      FailureOr<std::string> type = e.scalarTypeFor(
          tensor ? tensor.getElementType() : operand.getType(), op);
      if (failed(type))
        return WalkResult::interrupt();
      addParam(operand,
               tensor ? inputPointer(operand, *type) : "const " + *type,
               paramName);
      captured.insert({operand, paramName});
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

std::string KernelWriter::inputPointer(Value value, StringRef type) const {
  return "const " + type.str() +
         (shared->contains(value) ? " *" : " *__restrict__");
}

LogicalResult KernelWriter::emitLoad(CppEmitter &k, BlockArgument arg) {
  if (loaded.contains(arg))
    return success();
  loaded.insert(arg);
  OpOperand *operand = op.getMatchingOpOperand(arg);
  FailureOr<std::string> type = e.scalarTypeFor(arg.getType(), op);
  if (failed(type))
    return failure();
  std::string param = operandParam.lookup(operand->getOperandNumber());
  if (op.isDpsInit(operand) && !owned)
    param = resultParam[operand->getOperandNumber() - op.getNumDpsInputs()];
  std::string text = k.bind(arg, "s");
  k.os << "const " << *type << " " << text << " = " << param;
  if (isa<RankedTensorType>(operand->get().getType()))
    k.os << "[" << offsetOf(operand) << "]";
  k.os << ";\n";
  return success();
}

LogicalResult KernelWriter::emitBodyOp(CppEmitter &k, Operation &inner) {
  if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
    k.bindTo(index.getResult(), indices[index.getDim()]);
    return success();
  }
  return k.emitScalarOp(&inner);
}

void KernelWriter::emitIndices(raw_indented_ostream &os,
                               ArrayRef<unsigned> dims, StringRef flat,
                               int64_t count) {
  int64_t inner = 1;
  for (unsigned d : llvm::reverse(dims)) {
    if (ranges[d] == 1) {
      if (dimIsRead(d))
        os << "const std::int64_t " << indices[d] << " = 0;\n";
      continue;
    }
    os << "const std::int64_t " << indices[d] << " = ";
    os << (inner == 1 ? flat.str()
                      : flat.str() + " / " + std::to_string(inner) + "LL");
    if (inner * ranges[d] < count)
      os << " % " << ranges[d] << "LL";
    os << ";\n";
    inner *= ranges[d];
  }
}

void KernelWriter::bindCaptured(CppEmitter &k) {
  for (auto &[value, paramName] : captured)
    k.bindTo(value, paramName);
}

void KernelWriter::beginKernel(raw_indented_ostream &os, CppEmitter &k,
                               StringRef kernel, StringRef mode) {
  // Body ops are emitted by a C++ emitter of their own: the kernel is a
  // scope of its own, where only parameters and indices are bound.
  bindCaptured(k);
  std::string where = CppEmitter::describe(op);
  os << "// " << op->getName() << (where.empty() ? "" : " (" + where + ")")
     << mode << "\n";
  os << "__global__ void " << kernel << "(";
  llvm::interleaveComma(params, os);
  os << ") {\n";
  os.indent();
}

LogicalResult KernelWriter::writeKernel(raw_indented_ostream &os,
                                        StringRef kernel) {
  if (warp)
    return writeWarpKernel(os, kernel);
  CppEmitter k(op->getParentOfType<ModuleOp>(), os);
  beginKernel(os, k, kernel,
              owned ? "" : ": one thread, its outputs are shared by points");
  os << "for (std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + "
        "threadIdx.x; t < "
     << points << "; t += std::int64_t(gridDim.x) * blockDim.x) {\n";
  os.indent();
  // The point's indices, its innermost dim fastest so that neighbouring
  // threads touch neighbouring elements.
  emitIndices(os, pointDims, "t", points);
  if (failed(emitPoint(os, k)))
    return failure();
  os.unindent();
  os << "}\n";
  os.unindent();
  os << "}\n\n";
  return success();
}

LogicalResult KernelWriter::emitPoint(raw_indented_ostream &os, CppEmitter &k) {
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  bool reduces = owned && (!loopDims.empty() || lookup);
  // Accumulators: a reduction's running value lives in a register.
  SmallVector<std::string> accumulators;
  if (reduces) {
    for (OpOperand &init : op.getDpsInitsMutable()) {
      BlockArgument arg = op.getMatchingBlockArgument(&init);
      std::string acc = "acc" + std::to_string(accumulators.size());
      FailureOr<std::string> type = e.scalarTypeFor(arg.getType(), op);
      if (failed(type))
        return failure();
      os << *type << " " << acc;
      if (!arg.use_empty())
        os << " = " << operandParam.lookup(init.getOperandNumber()) << "["
           << offsetOf(&init) << "]";
      else
        os << "{}";
      os << ";\n";
      k.bindTo(arg, acc);
      loaded.insert(arg);
      accumulators.push_back(acc);
    }
    // What the point alone decides is loaded once, before the loops.
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty() && !isInit(arg) &&
          llvm::none_of(loopDims,
                        [&](unsigned d) { return argUsesDim(arg, d); }) &&
          !(lookup && argUsesDim(arg, lookup->dim)))
        if (failed(emitLoad(k, arg)))
          return failure();
  }

  for (unsigned d : loopDims)
    os << "for (std::int64_t " << indices[d] << " = 0; " << indices[d] << " < "
       << ranges[d] << "; ++" << indices[d] << ")\n";
  os << "{\n";
  os.indent();
  if (lookup) {
    // Everything the key needs, then the one iteration that contributes.
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty() && !argUsesDim(arg, lookup->dim) && !isInit(arg))
        if (failed(emitLoad(k, arg)))
          return failure();
    for (Operation *keyOp : lookup->keyOps)
      if (failed(emitBodyOp(k, *keyOp)))
        return failure();
    std::string index = indices[lookup->dim];
    os << "const std::int64_t " << index << " = " << k.name(lookup->key);
    if (lookup->offset)
      os << " - " << k.name(lookup->offset);
    os << ";\nif (" << index << " >= 0 && " << index << " < "
       << ranges[lookup->dim] << ") {\n";
    os.indent();
  }
  for (BlockArgument arg : body.getArguments())
    if (!arg.use_empty())
      if (failed(emitLoad(k, arg)))
        return failure();
  for (Operation &bodyOp : body.without_terminator())
    if (!lookup || !lookup->keyOps.contains(&bodyOp))
      if (failed(emitBodyOp(k, bodyOp)))
        return failure();

  // Yielded values are all read before any accumulator changes: a payload
  // may yield one accumulator into another.
  SmallVector<std::string> yielded;
  for (Value value : yield.getValues())
    yielded.push_back(k.name(value));
  if (reduces) {
    bool yieldsAccumulator = llvm::any_of(yield.getValues(), [&](Value v) {
      auto arg = dyn_cast<BlockArgument>(v);
      return arg && arg.getOwner() == &body && isInit(arg);
    });
    if (yieldsAccumulator && accumulators.size() > 1)
      for (auto [i, value] : llvm::enumerate(yield.getValues())) {
        std::string temp = "y" + std::to_string(i);
        os << "const auto " << temp << " = " << yielded[i] << ";\n";
        yielded[i] = temp;
      }
    for (auto [acc, value] : llvm::zip(accumulators, yielded))
      os << acc << " = " << value << ";\n";
  } else {
    for (auto [i, value] : llvm::enumerate(yielded))
      os << resultParam[i] << "[" << offsetOf(op.getDpsInitOperand(i))
         << "] = " << value << ";\n";
  }
  if (lookup) {
    os.unindent();
    os << "}\n";
  }
  os.unindent();
  os << "}\n";
  if (reduces)
    for (auto [i, acc] : llvm::enumerate(accumulators))
      os << resultParam[i] << "[" << offsetOf(op.getDpsInitOperand(i))
         << "] = " << acc << ";\n";
  return success();
}

std::optional<WarpReduction> KernelWriter::matchWarpReduction() {
  if (!owned || lookup || loopDims.empty() || op.getNumDpsInits() != 1)
    return std::nullopt;
  int64_t size = 1;
  for (unsigned d : loopDims)
    size *= ranges[d];
  if (size < kWarpSize)
    return std::nullopt;
  BlockArgument acc = op.getMatchingBlockArgument(op.getDpsInitOperand(0));
  if (!acc.getType().isF32() && !acc.getType().isF64())
    return std::nullopt;
  Value folded = cast<linalg::YieldOp>(body.getTerminator()).getValues()[0];
  Operation *combiner = folded.getDefiningOp();
  if (!combiner || !acc.hasOneUse() || *acc.getUsers().begin() != combiner ||
      !folded.hasOneUse() || combineExpr(combiner, "", "").empty())
    return std::nullopt;
  return WarpReduction{combiner, size};
}

LogicalResult KernelWriter::writeWarpKernel(raw_indented_ostream &os,
                                            StringRef kernel) {
  CppEmitter k(op->getParentOfType<ModuleOp>(), os);
  beginKernel(os, k, kernel,
              ": one warp per point, its lanes share the " +
                  std::to_string(warp->size) + " reduced elements");
  os << "const int lane = threadIdx.x % tp::cuda::kWarpSize;\n";
  os << "for (std::int64_t t = (std::int64_t(blockIdx.x) * blockDim.x + "
        "threadIdx.x) / tp::cuda::kWarpSize; t < "
     << points
     << "; t += std::int64_t(gridDim.x) * blockDim.x / tp::cuda::kWarpSize) "
        "{\n";
  os.indent();
  emitIndices(os, pointDims, "t", points);
  if (failed(emitWarpPoint(os, k)))
    return failure();
  os.unindent();
  os << "}\n";
  os.unindent();
  os << "}\n\n";
  return success();
}

LogicalResult KernelWriter::emitWarpPoint(raw_indented_ostream &os,
                                          CppEmitter &k) {
  OpOperand *init = op.getDpsInitOperand(0);
  BlockArgument acc = op.getMatchingBlockArgument(init);
  FailureOr<std::string> type = e.scalarTypeFor(acc.getType(), op);
  if (failed(type))
    return failure();
  os << *type << " part = " << identityExpr(warp->combiner, *type) << ";\n";
  k.bindTo(acc, "part");
  loaded.insert(acc);
  // What the point alone decides is loaded once, before the loop.
  for (BlockArgument arg : body.getArguments())
    if (!arg.use_empty() && !loaded.contains(arg) &&
        llvm::none_of(loopDims, [&](unsigned d) { return argUsesDim(arg, d); }))
      if (failed(emitLoad(k, arg)))
        return failure();
  // Lane l folds elements l, l + 32, ...: neighbouring lanes read
  // neighbouring elements of the innermost reduced dim.
  os << "for (std::int64_t r = lane; r < " << warp->size
     << "; r += tp::cuda::kWarpSize) {\n";
  os.indent();
  emitIndices(os, loopDims, "r", warp->size);
  for (BlockArgument arg : body.getArguments())
    if (!arg.use_empty())
      if (failed(emitLoad(k, arg)))
        return failure();
  for (Operation &bodyOp : body.without_terminator())
    if (failed(emitBodyOp(k, bodyOp)))
      return failure();
  os << "part = " << k.name(warp->combiner->getResult(0)) << ";\n";
  os.unindent();
  os << "}\n";
  os << "for (int offset = tp::cuda::kWarpSize / 2; offset > 0; offset /= 2)\n";
  os.indent();
  os << "part = "
     << combineExpr(warp->combiner, "part",
                    "__shfl_xor_sync(0xffffffffu, part, offset)")
     << ";\n";
  os.unindent();
  std::string initValue = operandParam.lookup(init->getOperandNumber()) + "[" +
                          offsetOf(init) + "]";
  os << "if (lane == 0)\n";
  os.indent();
  os << resultParam[0] << "[" << offsetOf(init)
     << "] = " << combineExpr(warp->combiner, initValue, "part") << ";\n";
  os.unindent();
  return success();
}

bool KernelWriter::analyse() {
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  for (auto [d, iterator] : llvm::enumerate(iterators))
    if (iterator == utils::IteratorType::parallel)
      pointDims.push_back(d);
  owned = pointsOwnOutputs();
  if (!owned)
    pointDims.clear();
  // A row group's kernel binds the row dims (the leading parallel ones).
  llvm::erase_if(pointDims, [&](unsigned d) { return d < rowDims; });
  for (unsigned d = rowDims; d < ranges.size(); ++d)
    if (!llvm::is_contained(pointDims, d) && !(lookup && d == lookup->dim))
      loopDims.push_back(d);
  for (unsigned d : pointDims)
    points *= ranges[d];
  warp = matchWarpReduction();
  for (unsigned d = 0; d < ranges.size(); ++d)
    indices.push_back("i" + std::to_string(d));
  return owned;
}

LogicalResult
KernelWriter::prepare(const llvm::DenseSet<Value> &sharedInKernel) {
  shared = &sharedInKernel;
  // Results: fresh buffers; in serial mode, holding the init where the
  // payload reads it.
  for (OpOperand &init : op.getDpsInitsMutable()) {
    Value result = op.getTiedOpResult(&init);
    if (failed(e.allocate(result, op)))
      return failure();
    if (!owned && op.payloadUsesValueFromOperand(&init))
      e.copy(result, init.get());
  }
  return collectParams();
}

LogicalResult KernelWriter::write() {
  analyse();
  std::string kernel = e.kernelName();
  llvm::DenseSet<Value> none;
  if (failed(prepare(none)))
    return failure();

  std::string text;
  llvm::raw_string_ostream textStream(text);
  raw_indented_ostream kernelOs(textStream);
  if (failed(writeKernel(kernelOs, kernel)))
    return failure();
  e.kernels += text;

  if (warp)
    e.os << kernel << "<<<tp::cuda::blocksForWarps(" << points
         << "), tp::cuda::threadsForWarps(" << points
         << "), 0, context->stream>>>(";
  else
    e.os << kernel << "<<<tp::cuda::blocksFor(" << points
         << "), tp::cuda::kThreads, 0, context->stream>>>(";
  llvm::interleaveComma(args, e.os);
  e.os << ");\nTP_CUDA_CHECK_LAUNCH(" << e.site << ");\n";
  return success();
}

LogicalResult CudaEmitter::emitGeneric(linalg::GenericOp op) {
  if (!op.hasPureTensorSemantics())
    return op.emitError("code generation expects linalg on tensors");
  if (fusedIntoAttention.contains(op)) {
    os << "// computed by the attention kernel below, never stored\n";
    return success();
  }
  if (attentionAt.count(op))
    return emitFusedAttention(op);
  if (roundedByCublas.contains(op)) {
    os << "// written in bf16 by cuBLAS above\n";
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
    return emitCublasGemm(*this, op, *gemm);
  }
  if (*kernel == Kernel::ScatterAdd)
    return op.emitError("code generation: the CUDA target runs no "
                        "#tp.kernel<scatter_add> (tp-select-kernels "
                        "target=cuda makes it a loop nest)");
  std::optional<Lookup> lookup;
  if (*kernel == Kernel::Lookup) {
    lookup = matchLookup(op);
    if (!lookup)
      return op.emitError("code generation: #tp.kernel<lookup> on an op "
                          "that is not one");
  }
  KernelWriter writer(*this, op, lookup);
  return writer.write();
}

LogicalResult CudaEmitter::emitFill(linalg::FillOp op) {
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
    os << "// only ever overwritten by cuBLAS (beta = 0): no buffer\n";
    bindTo(result, "nullptr");
    return success();
  }
  FailureOr<std::string> type = elementTypeOf(result, op);
  if (failed(type) || failed(allocate(result, op)))
    return failure();
  os << "tp::cuda::fill<" << *type << ">(context, " << name(result) << ", "
     << numElements(result) << "LL, " << name(op.getInputs()[0]) << ", " << site
     << ");\n";
  return success();
}
