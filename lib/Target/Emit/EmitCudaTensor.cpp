//===- EmitCudaTensor.cpp - tensor ops and constants in device memory -----===//
//
// CppEmitter::emitTensorOp walks the tensor ops for both targets; here are
// the CUDA halves of its hooks: box copies (tp::cuda::copyBox, one thread
// per element), fills, zeroing, and from_elements staged from the host.
// Tensor constants are file-scope __device__ arrays, so they reach the GPU
// with the library and cost no copy per forward.
//
//===----------------------------------------------------------------------===//

#include "CudaEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

/// The largest box rank tp::cuda::Box holds (kMaxBoxRank).
static constexpr size_t kMaxBoxRank = 8;

LogicalResult CudaEmitter::emitConstant(Operation *op) {
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

LogicalResult CudaEmitter::emitBoxCopy(
    Operation *op, Value dst, ArrayRef<int64_t> dstShape,
    ArrayRef<int64_t> dstOffsets, Value src, ArrayRef<int64_t> srcShape,
    ArrayRef<int64_t> srcOffsets, ArrayRef<int64_t> sizes,
    ArrayRef<int64_t> srcSteps, ArrayRef<int64_t> dstSteps) {
  if (sizes.size() > kMaxBoxRank)
    return op->emitError("CUDA code generation supports copies of rank up "
                         "to ")
           << kMaxBoxRank;
  SmallVector<int64_t> dstStrides = stridesOf(dstShape);
  SmallVector<int64_t> srcStrides = stridesOf(srcShape);
  int64_t dstBase = 0, srcBase = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    dstBase += dstOffsets[d] * dstStrides[d];
    srcBase += srcOffsets[d] * srcStrides[d];
    srcStrides[d] *= srcSteps[d];
    dstStrides[d] *= dstSteps[d];
  }
  auto list = [&](ArrayRef<int64_t> values) {
    std::string text = "{";
    for (auto [i, value] : llvm::enumerate(values))
      text += (i ? ", " : "") + std::to_string(value);
    return text + "}";
  };
  os << "tp::cuda::copyBox(context, " << name(dst) << " + " << dstBase << "LL, "
     << name(src) << " + " << srcBase << "LL, tp::cuda::Box{" << sizes.size()
     << ", " << list(sizes) << ", " << list(dstStrides) << ", "
     << list(srcStrides) << "}, " << site << ");\n";
  return success();
}

LogicalResult CudaEmitter::emitFillBuffer(Operation *op, Value result,
                                          StringRef value) {
  FailureOr<std::string> type = elementTypeOf(result, op);
  if (failed(type))
    return failure();
  os << "tp::cuda::fill<" << *type << ">(context, " << name(result) << ", "
     << numElements(result) << "LL, " << value << ", " << site << ");\n";
  return success();
}

void CudaEmitter::emitZeroBuffer(Value result) {
  os << "TP_CUDA_CHECK(cudaMemsetAsync(" << name(result) << ", 0, "
     << byteCount(result) << ", context->stream), " << site << ");\n";
}

LogicalResult CudaEmitter::emitFromElements(tensor::FromElementsOp op) {
  FailureOr<std::string> type = elementTypeOf(op.getResult(), op);
  if (failed(type))
    return failure();
  // A pageable source is staged before cudaMemcpyAsync returns, so the
  // host array may go out of scope right after.
  os << "{\n";
  os.indent();
  os << "const " << *type << " host[] = {";
  llvm::interleaveComma(op.getElements(), os,
                        [&](Value element) { os << name(element); });
  os << "};\nTP_CUDA_CHECK(cudaMemcpyAsync(" << name(op.getResult())
     << ", host, sizeof(host), cudaMemcpyHostToDevice, context->stream), "
     << site << ");\n";
  os.unindent();
  os << "}\n";
  return success();
}

void CudaEmitter::emitCacheWrite(Value cache, Value update, Value position,
                                 int64_t outer, int64_t slots, int64_t count,
                                 int64_t inner, StringRef site) {
  // The position stays in device memory: a captured decode step replays
  // with the position of each token.
  os << "tp::cuda::writeCache(context, " << name(cache) << ", " << name(update)
     << ", " << name(position) << ", " << outer << "LL, " << slots << "LL, "
     << count << "LL, " << inner << "LL, " << site << ");\n";
}
