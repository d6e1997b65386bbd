//===- EmitCudaTensor.cpp - tensor ops and constants in device memory -----===//
//
// Reshapes alias their source, as on the CPU. Slices, inserts, concats and
// pads are box copies (tp::cuda::copyBox, one thread per element); tensor
// constants are file-scope __device__ arrays, so they reach the GPU with the
// library and cost no copy per forward.
//
//===----------------------------------------------------------------------===//

#include "CudaEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

/// The largest box rank tp::cuda::Box holds (kMaxBoxRank).
static constexpr size_t kMaxBoxRank = 8;

LogicalResult CudaEmitter::emitCudaConstant(Operation *op) {
  auto constant = cast<arith::ConstantOp>(op);
  auto tensor = cast<RankedTensorType>(constant.getType());
  auto elements = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!elements)
    return op->emitError("code generation supports dense tensor constants "
                         "only");
  FailureOr<std::string> type = scalarTypeFor(tensor.getElementType(), op);
  if (failed(type))
    return failure();
  if (elements.isSplat()) {
    if (failed(allocate(constant.getResult(), op, "c")))
      return failure();
    os << "tp::cuda::fill<" << *type << ">(context, "
       << name(constant.getResult()) << ", " << tensor.getNumElements()
       << "LL, " << scalarLiteral(elements.getSplatValue<Attribute>()) << ", "
       << site << ");\n";
    return success();
  }
  std::string text = bind(constant.getResult(), "c");
  std::string storage = text + "_data";
  llvm::raw_string_ostream globalOs(globals);
  globalOs << "// " << describe(op) << "\n";
  globalOs << "__device__ " << *type << " " << storage << "["
           << tensor.getNumElements() << "] = {";
  int64_t i = 0;
  for (Attribute value : elements.getValues<Attribute>())
    globalOs << (i++ % 8 ? ", " : (i == 1 ? "\n    " : ",\n    "))
             << scalarLiteral(value);
  globalOs << "};\n";
  os << *type << " *" << text << " = tp::cuda::deviceAddress(" << storage
     << ", " << site << ");\n";
  return success();
}

/// Emits a copy of the box `sizes` (walked with `srcSteps`) at `srcOffsets`
/// of `src` (shape `srcShape`) to `dstOffsets` of `dst` (shape `dstShape`).
static LogicalResult
emitBoxCopy(CudaEmitter &e, Operation *op, Value dst,
            ArrayRef<int64_t> dstShape, ArrayRef<int64_t> dstOffsets, Value src,
            ArrayRef<int64_t> srcShape, ArrayRef<int64_t> srcOffsets,
            ArrayRef<int64_t> sizes, ArrayRef<int64_t> srcSteps) {
  if (sizes.size() > kMaxBoxRank)
    return op->emitError("CUDA code generation supports copies of rank up "
                         "to ")
           << kMaxBoxRank;
  SmallVector<int64_t> dstStrides = CppEmitter::stridesOf(dstShape);
  SmallVector<int64_t> srcStrides = CppEmitter::stridesOf(srcShape);
  int64_t dstBase = 0, srcBase = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    dstBase += dstOffsets[d] * dstStrides[d];
    srcBase += srcOffsets[d] * srcStrides[d];
    srcStrides[d] *= srcSteps[d];
  }
  auto list = [&](ArrayRef<int64_t> values) {
    std::string text = "{";
    for (auto [i, value] : llvm::enumerate(values))
      text += (i ? ", " : "") + std::to_string(value);
    return text + "}";
  };
  e.os << "tp::cuda::copyBox(context, " << e.name(dst) << " + " << dstBase
       << "LL, " << e.name(src) << " + " << srcBase << "LL, tp::cuda::Box{"
       << sizes.size() << ", " << list(sizes) << ", " << list(dstStrides)
       << ", " << list(srcStrides) << "}, " << e.site << ");\n";
  return success();
}

LogicalResult CudaEmitter::emitCudaTensorOp(Operation *op) {
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(op)) {
    alias(op->getResult(0), op->getOperand(0));
    return success();
  }
  if (auto empty = dyn_cast<tensor::EmptyOp>(op)) {
    if (!needsBuffer(empty.getResult())) {
      // Only ever a shape for ops that overwrite it: no storage.
      bindTo(empty.getResult(), "nullptr");
      return success();
    }
    if (failed(allocate(empty.getResult(), op)))
      return failure();
    os << "TP_CUDA_CHECK(cudaMemsetAsync(" << name(empty.getResult()) << ", 0, "
       << byteCount(empty.getResult()) << ", context->stream), " << site
       << ");\n";
    return success();
  }
  if (op->getNumResults() != 1 ||
      !isa<RankedTensorType>(op->getResult(0).getType()))
    return op->emitError("code generation does not support ") << op->getName();
  Value result = op->getResult(0);
  auto resultShape = cast<RankedTensorType>(result.getType()).getShape();
  auto zeros = [](size_t rank) { return SmallVector<int64_t>(rank, 0); };
  auto ones = [](size_t rank) { return SmallVector<int64_t>(rank, 1); };

  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    if (ShapedType::isDynamicShape(slice.getStaticStrides()) ||
        ShapedType::isDynamicShape(slice.getStaticOffsets()) ||
        ShapedType::isDynamicShape(slice.getStaticSizes()))
      return op->emitError("code generation needs static slice bounds");
    if (failed(allocate(result, op)))
      return failure();
    // The unreduced box lands in the (possibly rank-reduced) result: the
    // memory is the same, since dropped dims have size 1.
    ArrayRef<int64_t> sizes = slice.getStaticSizes();
    return emitBoxCopy(*this, op, result, sizes, zeros(sizes.size()),
                       slice.getSource(), slice.getSourceType().getShape(),
                       slice.getStaticOffsets(), sizes,
                       slice.getStaticStrides());
  }
  if (auto insert = dyn_cast<tensor::InsertSliceOp>(op)) {
    if (ShapedType::isDynamicShape(insert.getStaticOffsets()) ||
        ShapedType::isDynamicShape(insert.getStaticSizes()) ||
        !insert.hasUnitStride())
      return op->emitError("code generation needs static unit-stride "
                           "insert_slice");
    if (failed(allocate(result, op)))
      return failure();
    copy(result, insert.getDest());
    ArrayRef<int64_t> sizes = insert.getStaticSizes();
    return emitBoxCopy(*this, op, result, resultShape,
                       insert.getStaticOffsets(), insert.getSource(), sizes,
                       zeros(sizes.size()), sizes, ones(sizes.size()));
  }
  if (auto concat = dyn_cast<tensor::ConcatOp>(op)) {
    if (failed(allocate(result, op)))
      return failure();
    int64_t dim = concat.getDim();
    int64_t offset = 0;
    for (Value input : concat.getInputs()) {
      auto shape = cast<RankedTensorType>(input.getType()).getShape();
      SmallVector<int64_t> dstOffsets = zeros(shape.size());
      dstOffsets[dim] = offset;
      if (failed(emitBoxCopy(*this, op, result, resultShape, dstOffsets, input,
                             shape, zeros(shape.size()), shape,
                             ones(shape.size()))))
        return failure();
      offset += shape[dim];
    }
    return success();
  }
  if (auto pad = dyn_cast<tensor::PadOp>(op)) {
    Value padValue = pad.getConstantPaddingValue();
    if (!padValue)
      return op->emitError("code generation supports tensor.pad with a "
                           "constant padding value only");
    if (ShapedType::isDynamicShape(pad.getStaticLow()))
      return op->emitError("code generation needs static padding");
    std::string fillValue;
    Attribute constant;
    if (matchPattern(padValue, m_Constant(&constant)))
      fillValue = scalarLiteral(constant);
    else if (padValue.getParentRegion() != &pad.getRegion())
      fillValue = name(padValue);
    else
      return op->emitError("code generation needs a padding value defined "
                           "outside tensor.pad");
    if (failed(allocate(result, op)))
      return failure();
    FailureOr<std::string> type = elementTypeOf(result, op);
    if (failed(type))
      return failure();
    os << "tp::cuda::fill<" << *type << ">(context, " << name(result) << ", "
       << numElements(result) << "LL, " << fillValue << ", " << site << ");\n";
    auto shape = pad.getSourceType().getShape();
    return emitBoxCopy(*this, op, result, resultShape, pad.getStaticLow(),
                       pad.getSource(), shape, zeros(shape.size()), shape,
                       ones(shape.size()));
  }
  if (auto fromElements = dyn_cast<tensor::FromElementsOp>(op)) {
    FailureOr<std::string> type = elementTypeOf(result, op);
    if (failed(type) || failed(allocate(result, op)))
      return failure();
    // A pageable source is staged before cudaMemcpyAsync returns, so the
    // host array may go out of scope right after.
    os << "{\n";
    os.indent();
    os << "const " << *type << " host[] = {";
    llvm::interleaveComma(fromElements.getElements(), os,
                          [&](Value element) { os << name(element); });
    os << "};\nTP_CUDA_CHECK(cudaMemcpyAsync(" << name(result)
       << ", host, sizeof(host), cudaMemcpyHostToDevice, context->stream), "
       << site << ");\n";
    os.unindent();
    os << "}\n";
    return success();
  }
  if (auto splat = dyn_cast<tensor::SplatOp>(op)) {
    FailureOr<std::string> type = elementTypeOf(result, op);
    if (failed(type) || failed(allocate(result, op)))
      return failure();
    os << "tp::cuda::fill<" << *type << ">(context, " << name(result) << ", "
       << numElements(result) << "LL, " << name(splat.getInput()) << ", "
       << site << ");\n";
    return success();
  }
  return op->emitError("code generation does not support ") << op->getName();
}
