//===- EmitTensor.cpp - tensor dialect ops and tensor constants -----------===//
//
// Reshapes alias their source; slices, inserts, concats and pads copy into
// a fresh buffer with one loop per dim, the innermost contiguous run copied
// with memcpy.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"

#include "tp/Dialect/TP/TPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::emit;

LogicalResult CppEmitter::emitConstant(Operation *op) {
  auto constant = cast<arith::ConstantOp>(op);
  auto tensor = cast<RankedTensorType>(constant.getType());
  auto elements = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!elements)
    return op->emitError("code generation supports dense tensor constants "
                         "only");
  FailureOr<std::string> type = scalarTypeFor(tensor.getElementType(), op);
  if (failed(type))
    return failure();
  std::string text = bind(constant.getResult(), "c");
  std::string storage = text + "_data";
  if (elements.isSplat()) {
    // A splat is materialised once per call: constants are small here.
    os << *type << " " << storage << "[" << tensor.getNumElements()
       << "];\nstd::fill_n(" << storage << ", " << tensor.getNumElements()
       << ", " << scalarLiteral(elements.getSplatValue<Attribute>()) << ");\n";
    os << *type << " *" << text << " = " << storage << ";\n";
    return success();
  }
  llvm::raw_string_ostream globalOs(globals);
  globalOs << "// " << describe(op) << "\n";
  globalOs << *type << " " << storage << "[" << tensor.getNumElements()
           << "] = {";
  int64_t i = 0;
  for (Attribute value : elements.getValues<Attribute>())
    globalOs << (i++ % 8 ? ", " : (i == 1 ? "\n    " : ",\n    "))
             << scalarLiteral(value);
  globalOs << "};\n";
  os << *type << " *" << text << " = " << storage << ";\n";
  return success();
}

LogicalResult CppEmitter::emitBoxCopy(
    Operation *, Value dst, ArrayRef<int64_t> dstShape,
    ArrayRef<int64_t> dstOffsets, Value src, ArrayRef<int64_t> srcShape,
    ArrayRef<int64_t> srcOffsets, ArrayRef<int64_t> sizes,
    ArrayRef<int64_t> srcSteps, ArrayRef<int64_t> dstSteps) {
  std::string elementType =
      scalarType(cast<ShapedType>(dst.getType()).getElementType());
  unsigned rank = sizes.size();
  SmallVector<int64_t> dstStrides = stridesOf(dstShape);
  SmallVector<int64_t> srcStrides = stridesOf(srcShape);
  // The innermost dim is one memcpy when it is contiguous in both.
  bool innerRun = rank > 0 && srcSteps.back() == 1 && dstSteps.back() == 1;
  unsigned loops = innerRun ? rank - 1 : rank;
  std::string prefix = "j" + std::to_string(nextId++) + "_";
  os << "{\n";
  os.indent();
  for (unsigned d = 0; d < loops; ++d)
    os << "for (std::int64_t " << prefix << d << " = 0; " << prefix << d
       << " < " << sizes[d] << "; ++" << prefix << d << ")\n";
  std::string dstOffset = "0", srcOffset = "0";
  for (unsigned d = 0; d < rank; ++d) {
    std::string index = d < loops ? prefix + std::to_string(d) : "0";
    dstOffset += " + (" + std::to_string(dstOffsets[d]) + "LL + " + index +
                 " * " + std::to_string(dstSteps[d]) + "LL) * " +
                 std::to_string(dstStrides[d]) + "LL";
    srcOffset += " + (" + std::to_string(srcOffsets[d]) + "LL + " + index +
                 " * " + std::to_string(srcSteps[d]) + "LL) * " +
                 std::to_string(srcStrides[d]) + "LL";
  }
  int64_t run = innerRun ? sizes.back() : 1;
  os << "  std::memcpy(" << name(dst) << " + " << dstOffset << ", " << name(src)
     << " + " << srcOffset << ", " << run << " * sizeof(" << elementType
     << "));\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CppEmitter::emitFillBuffer(Operation *, Value result,
                                         StringRef value) {
  os << "std::fill_n(" << name(result) << ", " << numElements(result) << ", "
     << value << ");\n";
  return success();
}

void CppEmitter::emitZeroBuffer(Value result) {
  os << "std::memset(" << name(result) << ", 0, " << byteCount(result)
     << ");\n";
}

LogicalResult CppEmitter::emitFromElements(tensor::FromElementsOp op) {
  for (auto [i, element] : llvm::enumerate(op.getElements()))
    os << name(op.getResult()) << "[" << i << "] = " << name(element) << ";\n";
  return success();
}

LogicalResult CppEmitter::emitTensorOp(Operation *op) {
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
    emitZeroBuffer(empty.getResult());
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
    return emitBoxCopy(op, result, sizes, zeros(sizes.size()),
                       slice.getSource(), slice.getSourceType().getShape(),
                       slice.getStaticOffsets(), sizes,
                       slice.getStaticStrides(), ones(sizes.size()));
  }
  if (auto insert = dyn_cast<tensor::InsertSliceOp>(op)) {
    if (ShapedType::isDynamicShape(insert.getStaticOffsets()) ||
        ShapedType::isDynamicShape(insert.getStaticSizes()) ||
        ShapedType::isDynamicShape(insert.getStaticStrides()))
      return op->emitError("code generation needs static insert_slice "
                           "bounds");
    if (failed(allocate(result, op)))
      return failure();
    copy(result, insert.getDest());
    ArrayRef<int64_t> sizes = insert.getStaticSizes();
    return emitBoxCopy(op, result, resultShape, insert.getStaticOffsets(),
                       insert.getSource(), sizes, zeros(sizes.size()), sizes,
                       ones(sizes.size()), insert.getStaticStrides());
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
      if (failed(emitBoxCopy(op, result, resultShape, dstOffsets, input, shape,
                             zeros(shape.size()), shape, ones(shape.size()),
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
    if (failed(allocate(result, op)) ||
        failed(emitFillBuffer(op, result, fillValue)))
      return failure();
    auto shape = pad.getSourceType().getShape();
    return emitBoxCopy(op, result, resultShape, pad.getStaticLow(),
                       pad.getSource(), shape, zeros(shape.size()), shape,
                       ones(shape.size()), ones(shape.size()));
  }
  if (auto fromElements = dyn_cast<tensor::FromElementsOp>(op)) {
    if (failed(allocate(result, op)))
      return failure();
    return emitFromElements(fromElements);
  }
  if (auto splat = dyn_cast<tensor::SplatOp>(op)) {
    if (failed(allocate(result, op)))
      return failure();
    return emitFillBuffer(op, result, name(splat.getInput()));
  }
  return op->emitError("code generation does not support ") << op->getName();
}

LogicalResult CppEmitter::emitCacheUpdate(Operation *op) {
  auto update = cast<CacheUpdateOp>(op);
  // In place is only right when nothing else reads the cache: the
  // runtime's buffer, read by this op alone (tp-kv-cache makes it so).
  auto cache = dyn_cast<BlockArgument>(update.getCache());
  auto func = cache ? dyn_cast<func::FuncOp>(cache.getOwner()->getParentOp())
                    : func::FuncOp();
  if (!func ||
      !func.getArgAttr(cache.getArgNumber(), TPDialect::kCacheAttrName) ||
      !cache.hasOneUse())
    return op->emitError("code generation writes a KV cache in place: its "
                         "cache must be a 'tp.cache' argument that nothing "
                         "else reads");
  ArrayRef<int64_t> shape = update.getCache().getType().getShape();
  int64_t dim = update.getDim();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (int64_t d = dim + 1, e = shape.size(); d < e; ++d)
    inner *= shape[d];
  alias(update.getResult(), update.getCache());
  emitCacheWrite(update.getCache(), update.getUpdate(), update.getPosition(),
                 outer, shape[dim],
                 update.getUpdate().getType().getDimSize(dim), inner,
                 siteLiteral(op, "cache_update"));
  return success();
}

void CppEmitter::emitCacheWrite(Value cache, Value update, Value position,
                                int64_t outer, int64_t slots, int64_t count,
                                int64_t inner, StringRef site) {
  os << "tp::rt::writeCache(" << name(cache) << ", " << name(update) << ", "
     << name(position) << "[0], " << outer << "LL, " << slots << "LL, " << count
     << "LL, " << inner << "LL, " << site << ");\n";
}
