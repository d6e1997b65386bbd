//===- EmitTensor.cpp - tensor dialect ops and tensor constants -----------===//
//
// Reshapes alias their source; slices, inserts, concats and pads copy into
// a fresh buffer with one loop per dim, the innermost contiguous run copied
// with memcpy.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

LogicalResult CppEmitter::emitConstant(Operation *op) {
  auto constant = cast<arith::ConstantOp>(op);
  auto tensor = dyn_cast<RankedTensorType>(constant.getType());
  if (!tensor)
    return emitScalarOp(op);
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
       << ", " << scalarLiteral(elements.getSplatValue<Attribute>())
       << ");\n";
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

/// Emits a copy of the box `sizes` (with `strides`) at `srcOffsets` of
/// `src` (shape `srcShape`) to `dstOffsets` of `dst` (shape `dstShape`).
/// Offsets are C++ expressions.
static void emitBoxCopy(raw_indented_ostream &os, StringRef dst,
                        ArrayRef<int64_t> dstShape,
                        ArrayRef<std::string> dstOffsets, StringRef src,
                        ArrayRef<int64_t> srcShape,
                        ArrayRef<std::string> srcOffsets,
                        ArrayRef<int64_t> sizes, ArrayRef<int64_t> srcSteps,
                        StringRef elementType, unsigned &counter) {
  unsigned rank = sizes.size();
  SmallVector<int64_t> dstStrides = CppEmitter::stridesOf(dstShape);
  SmallVector<int64_t> srcStrides = CppEmitter::stridesOf(srcShape);
  // The innermost dim is one memcpy when it is contiguous in both.
  bool innerRun = rank > 0 && srcSteps.back() == 1;
  unsigned loops = innerRun ? rank - 1 : rank;
  std::string prefix = "j" + std::to_string(counter++) + "_";
  os << "{\n";
  os.indent();
  for (unsigned d = 0; d < loops; ++d)
    os << "for (std::int64_t " << prefix << d << " = 0; " << prefix << d
       << " < " << sizes[d] << "; ++" << prefix << d << ")\n";
  std::string dstOffset = "0", srcOffset = "0";
  for (unsigned d = 0; d < rank; ++d) {
    std::string index = d < loops ? prefix + std::to_string(d) : "0";
    dstOffset += " + (" + dstOffsets[d] + " + " + index + ") * " +
                 std::to_string(dstStrides[d]) + "LL";
    srcOffset += " + (" + srcOffsets[d] + " + " + index + " * " +
                 std::to_string(srcSteps[d]) + "LL) * " +
                 std::to_string(srcStrides[d]) + "LL";
  }
  int64_t run = innerRun ? sizes.back() : 1;
  os << "  std::memcpy(" << dst << " + " << dstOffset << ", " << src << " + "
     << srcOffset << ", " << run << " * sizeof(" << elementType << "));\n";
  os.unindent();
  os << "}\n";
}

static SmallVector<std::string> constantOffsets(ArrayRef<int64_t> offsets) {
  SmallVector<std::string> text;
  for (int64_t offset : offsets)
    text.push_back(std::to_string(offset) + "LL");
  return text;
}

LogicalResult CppEmitter::emitTensorOp(Operation *op) {
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
          tensor::BitcastOp>(op)) {
    if (isa<tensor::BitcastOp>(op))
      return op->emitError("code generation does not support tensor.bitcast");
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
    os << "std::memset(" << name(empty.getResult()) << ", 0, "
       << byteCount(empty.getResult()) << ");\n";
    return success();
  }
  if (op->getNumResults() != 1 ||
      !isa<RankedTensorType>(op->getResult(0).getType()))
    return op->emitError("code generation does not support ")
           << op->getName();
  Value result = op->getResult(0);
  FailureOr<std::string> type = elementTypeOf(result, op);
  if (failed(type))
    return failure();
  auto resultShape = cast<RankedTensorType>(result.getType()).getShape();

  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    if (ShapedType::isDynamicShape(slice.getStaticStrides()) ||
        ShapedType::isDynamicShape(slice.getStaticOffsets()) ||
        ShapedType::isDynamicShape(slice.getStaticSizes()))
      return op->emitError("code generation needs static slice bounds");
    if (failed(allocate(result, op)))
      return failure();
    // Copy the unreduced box into the (possibly rank-reduced) result: the
    // result's memory is the box's, since dropped dims have size 1.
    SmallVector<int64_t> sizes(slice.getStaticSizes());
    emitBoxCopy(os, name(result), sizes, constantOffsets(SmallVector<int64_t>(
                                             sizes.size(), 0)),
                name(slice.getSource()), slice.getSourceType().getShape(),
                constantOffsets(slice.getStaticOffsets()), sizes,
                slice.getStaticStrides(), *type, nextId);
    return success();
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
    SmallVector<int64_t> sizes(insert.getStaticSizes());
    emitBoxCopy(os, name(result), resultShape,
                constantOffsets(insert.getStaticOffsets()),
                name(insert.getSource()), sizes,
                constantOffsets(SmallVector<int64_t>(sizes.size(), 0)), sizes,
                SmallVector<int64_t>(sizes.size(), 1), *type, nextId);
    return success();
  }
  if (auto concat = dyn_cast<tensor::ConcatOp>(op)) {
    if (failed(allocate(result, op)))
      return failure();
    int64_t dim = concat.getDim();
    int64_t offset = 0;
    for (Value input : concat.getInputs()) {
      auto shape = cast<RankedTensorType>(input.getType()).getShape();
      SmallVector<int64_t> dstOffsets(shape.size(), 0);
      dstOffsets[dim] = offset;
      emitBoxCopy(os, name(result), resultShape, constantOffsets(dstOffsets),
                  name(input), shape,
                  constantOffsets(SmallVector<int64_t>(shape.size(), 0)),
                  shape, SmallVector<int64_t>(shape.size(), 1), *type, nextId);
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
    if (failed(allocate(result, op)))
      return failure();
    std::string fillValue;
    Attribute constant;
    if (matchPattern(padValue, m_Constant(&constant)))
      fillValue = scalarLiteral(constant);
    else if (padValue.getParentRegion() != &pad.getRegion())
      fillValue = name(padValue);
    else
      return op->emitError("code generation needs a padding value defined "
                           "outside tensor.pad");
    os << "std::fill_n(" << name(result) << ", " << numElements(result)
       << ", " << fillValue << ");\n";
    auto shape = pad.getSourceType().getShape();
    emitBoxCopy(os, name(result), resultShape,
                constantOffsets(pad.getStaticLow()), name(pad.getSource()),
                shape, constantOffsets(SmallVector<int64_t>(shape.size(), 0)),
                shape, SmallVector<int64_t>(shape.size(), 1), *type, nextId);
    return success();
  }
  if (auto fromElements = dyn_cast<tensor::FromElementsOp>(op)) {
    if (failed(allocate(result, op)))
      return failure();
    for (auto [i, element] : llvm::enumerate(fromElements.getElements()))
      os << name(result) << "[" << i << "] = " << name(element) << ";\n";
    return success();
  }
  if (auto splat = dyn_cast<tensor::SplatOp>(op)) {
    if (failed(allocate(result, op)))
      return failure();
    os << "std::fill_n(" << name(result) << ", " << numElements(result)
       << ", " << name(splat.getInput()) << ");\n";
    return success();
  }
  return op->emitError("code generation does not support ") << op->getName();
}
