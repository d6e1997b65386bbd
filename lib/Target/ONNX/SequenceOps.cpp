//===- SequenceOps.cpp - ONNX sequences, resolved at import ---------------===//
//
// Sequences (SplitToSequence, SequenceEmpty/Construct/Insert/At/Erase/
// Length, ConcatFromSequence) are lists of values the importer holds; only
// their tensor elements reach the IR.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;
using onnx::TensorProto;

namespace {

ImportedValue makeConst(ConstTensor c) {
  ImportedValue v;
  v.dtype = c.dtype;
  v.shape = c.shape;
  v.constant = std::move(c);
  return v;
}

ImportedValue makeSSA(Value value, DType dtype) {
  ImportedValue v;
  v.dtype = dtype;
  v.shape = llvm::to_vector(getTensorType(value).getShape());
  v.value = value;
  return v;
}

ImportedValue makeScalar(DType dtype, int64_t x) {
  ConstTensor c;
  c.dtype = dtype;
  c.ints = {x};
  return makeConst(std::move(c));
}

ImportedValue makeSequence(DType dtype, std::vector<ImportedValue> elements) {
  ImportedValue v;
  v.dtype = dtype;
  v.sequence = std::move(elements);
  return v;
}

Value materializeValue(NodeContext &ctx, const ImportedValue &v) {
  return v.value ? v.value : materializeConstant(ctx.b, ctx.loc, *v.constant);
}

/// The elements of sequence input `i`; an error if it is a tensor.
const std::vector<ImportedValue> *getSequence(NodeContext &ctx, unsigned i) {
  const ImportedValue &v = ctx.input(i);
  if (!v.isSequence()) {
    ctx.emitError() << "input " << i << " must be a sequence, not a tensor";
    return nullptr;
  }
  return &*v.sequence;
}

/// Reads constant scalar position input `i` against a sequence of `size`
/// elements, allowing [-size, size + (insert ? 0 : -1)], and normalizes it.
std::optional<int64_t> getPosition(NodeContext &ctx, unsigned i, int64_t size,
                                   bool insert) {
  auto pos = ctx.constInts(i, "position");
  if (!pos)
    return std::nullopt;
  if (pos->size() != 1) {
    ctx.emitError() << "position must be a scalar, got "
                    << formatShape(ctx.input(i).shape);
    return std::nullopt;
  }
  int64_t p = pos->front(), hi = insert ? size : size - 1;
  if (p < -size || p > hi) {
    ctx.emitError() << "position " << p << " is out of range for a sequence "
                    << "of " << size << " elements";
    return std::nullopt;
  }
  return p < 0 ? p + size : p;
}

/// `x` with the same elements in `shape`.
ImportedValue reshapeValue(NodeContext &ctx, const ImportedValue &x,
                           ArrayRef<int64_t> shape) {
  if (x.constant) {
    ConstTensor c = *x.constant;
    c.shape.assign(shape.begin(), shape.end());
    return makeConst(std::move(c));
  }
  return makeSSA(buildReshape(ctx.b, ctx.loc, x.value, shape), x.dtype);
}

/// Elements [offset, offset + size) of `x` along `axis`.
ImportedValue sliceValue(NodeContext &ctx, const ImportedValue &x, int64_t axis,
                         int64_t offset, int64_t size) {
  int64_t rank = x.shape.size();
  SmallVector<int64_t> offsets(rank, 0), sizes(x.shape), strides(rank, 1);
  offsets[axis] = offset;
  sizes[axis] = size;
  if (x.constant && x.constant->numel() <= maxFoldedElements()) {
    SmallVector<int64_t> inStrides = getStrides(x.shape);
    return makeConst(
        foldByIndex(*x.constant, sizes, [&](ArrayRef<int64_t> idx) {
          int64_t flat = 0;
          for (int64_t d = 0; d < rank; ++d)
            flat += (offsets[d] + idx[d]) * inStrides[d];
          return flat;
        }));
  }
  Value input = materializeValue(ctx, x);
  Type elementType = getTensorType(input).getElementType();
  if (size == 0)
    return makeSSA(createEmpty(ctx.b, ctx.loc, sizes, elementType), x.dtype);
  auto type = RankedTensorType::get(sizes, elementType);
  Value slice = tensor::ExtractSliceOp::create(
      ctx.b, ctx.loc, type, input, ValueRange{}, ValueRange{}, ValueRange{},
      offsets, sizes, strides);
  return makeSSA(slice, x.dtype);
}

} // namespace

FailureOr<ImportedValue>
mlir::tp::onnx_import::concatValues(NodeContext &ctx,
                                    ArrayRef<ImportedValue> parts, int64_t axis,
                                    bool newAxis) {
  if (parts.empty())
    return ctx.emitError() << "cannot concatenate an empty sequence";
  const ImportedValue &first = parts.front();
  int64_t rank = first.shape.size() + (newAxis ? 1 : 0);
  auto a = ctx.normalizeAxis(axis, rank);
  if (!a)
    return failure();
  SmallVector<ImportedValue> inputs;
  bool allConstant = true;
  for (auto [i, part] : llvm::enumerate(parts)) {
    bool same =
        part.shape.size() == first.shape.size() && part.dtype == first.dtype;
    for (size_t d = 0; same && d < first.shape.size(); ++d)
      same = (!newAxis && static_cast<int64_t>(d) == *a) ||
             part.shape[d] == first.shape[d];
    if (!same)
      return ctx.emitError()
             << "element " << i << " " << dtypeName(part.dtype)
             << formatShape(part.shape) << " does not match element 0 "
             << dtypeName(first.dtype) << formatShape(first.shape);
    if (!newAxis) {
      inputs.push_back(part);
    } else {
      SmallVector<int64_t> shape(part.shape);
      shape.insert(shape.begin() + *a, 1);
      inputs.push_back(reshapeValue(ctx, part, shape));
    }
    allConstant &= inputs.back().constant.has_value();
  }
  SmallVector<int64_t> shape(inputs.front().shape);
  shape[*a] = 0;
  for (const ImportedValue &in : inputs)
    shape[*a] += in.shape[*a];
  if (allConstant && getNumElements(shape) <= maxFoldedElements()) {
    // Row-major: each outer index takes one contiguous block per part.
    ConstTensor r;
    r.dtype = first.dtype;
    r.shape = shape;
    r.allocate();
    int64_t outer = getNumElements(ArrayRef(shape).take_front(*a));
    int64_t inner = getNumElements(ArrayRef(shape).drop_front(*a + 1));
    int64_t dst = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (const ImportedValue &in : inputs) {
        const ConstTensor &c = *in.constant;
        int64_t block = in.shape[*a] * inner;
        for (int64_t k = 0; k < block; ++k, ++dst) {
          if (r.isFloat())
            r.floats[dst] = c.floats[o * block + k];
          else
            r.ints[dst] = c.ints[o * block + k];
        }
      }
    }
    return makeConst(std::move(r));
  }
  SmallVector<Value> operands;
  for (const ImportedValue &in : inputs)
    if (in.shape[*a] != 0)
      operands.push_back(materializeValue(ctx, in));
  if (operands.empty())
    return makeSSA(createEmpty(ctx.b, ctx.loc, shape,
                               getElementType(ctx.b.getContext(), first.dtype)),
                   first.dtype);
  if (operands.size() == 1)
    return makeSSA(operands.front(), first.dtype);
  return makeSSA(tensor::ConcatOp::create(ctx.b, ctx.loc, *a, operands),
                 first.dtype);
}

namespace {

LogicalResult convertSplitToSequence(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  int64_t dim = x.shape[*axis];
  SmallVector<int64_t> sizes;
  bool keepDims = true;
  // Sequences are unrolled at import: one value per element.
  auto tooLong = [&](int64_t elements) {
    return ctx.emitError() << "splitting dim " << *axis << " of "
                           << formatShape(x.shape) << " makes a sequence of "
                           << elements << " tensors; sequences are unrolled "
                           << "at import, up to " << kMaxSequenceLength;
  };
  if (!ctx.hasInput(1)) {
    if (dim > kMaxSequenceLength)
      return tooLong(dim);
    sizes.assign(dim, 1);
    keepDims = ctx.attrInt("keepdims", 1) != 0;
  } else {
    auto split = ctx.constInts(1, "split");
    if (!split)
      return failure();
    if (ctx.input(1).shape.empty()) {
      int64_t chunk = split->front();
      if (chunk <= 0)
        return ctx.emitError() << "split " << chunk << " is not positive";
      int64_t pieces = dim / chunk + (dim % chunk != 0);
      if (pieces > kMaxSequenceLength)
        return tooLong(pieces);
      for (int64_t offset = 0; offset < dim; offset += chunk)
        sizes.push_back(std::min(chunk, dim - offset));
    } else {
      sizes = *split;
      if (static_cast<int64_t>(sizes.size()) > kMaxSequenceLength)
        return tooLong(sizes.size());
      int64_t total = 0;
      bool bad = false;
      for (int64_t s : sizes)
        bad |= s < 0 || llvm::AddOverflow(total, s, total);
      if (bad || total != dim)
        return ctx.emitError()
               << "split " << formatShape(sizes) << " does not add up to dim "
               << *axis << " of " << formatShape(x.shape);
    }
  }
  std::vector<ImportedValue> elements;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    elements.push_back(sliceValue(ctx, x, *axis, offset, s));
    offset += s;
    if (!keepDims) {
      SmallVector<int64_t> shape(x.shape);
      shape.erase(shape.begin() + *axis);
      elements.back() = reshapeValue(ctx, elements.back(), shape);
    }
  }
  ctx.setValue(0, makeSequence(x.dtype, std::move(elements)));
  return success();
}

LogicalResult convertSequenceEmpty(NodeContext &ctx) {
  DType dtype = ctx.attrInt("dtype", TensorProto::FLOAT);
  if (!getElementType(ctx.b.getContext(), dtype))
    return ctx.emitError() << "unsupported element type " << dtypeName(dtype);
  ctx.setValue(0, makeSequence(dtype, {}));
  return success();
}

LogicalResult convertSequenceConstruct(NodeContext &ctx) {
  std::vector<ImportedValue> elements;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
    if (ctx.input(i).dtype != ctx.input(0).dtype)
      return ctx.emitError()
             << "input " << i << " is " << dtypeName(ctx.input(i).dtype)
             << ", input 0 is " << dtypeName(ctx.input(0).dtype);
    elements.push_back(ctx.input(i));
  }
  ctx.setValue(0, makeSequence(ctx.input(0).dtype, std::move(elements)));
  return success();
}

LogicalResult convertSequenceInsert(NodeContext &ctx) {
  const auto *seq = getSequence(ctx, 0);
  if (!seq)
    return failure();
  const ImportedValue &x = ctx.input(1);
  if (x.isSequence())
    return ctx.emitError() << "input 1 must be a tensor, not a sequence";
  DType dtype = ctx.input(0).dtype;
  if (x.dtype != dtype)
    return ctx.emitError() << "cannot insert a " << dtypeName(x.dtype)
                           << " tensor into a sequence of " << dtypeName(dtype);
  int64_t size = seq->size(), pos = size;
  if (ctx.hasInput(2)) {
    auto p = getPosition(ctx, 2, size, /*insert=*/true);
    if (!p)
      return failure();
    pos = *p;
  }
  std::vector<ImportedValue> elements(*seq);
  elements.insert(elements.begin() + pos, x);
  ctx.setValue(0, makeSequence(dtype, std::move(elements)));
  return success();
}

LogicalResult convertSequenceAt(NodeContext &ctx) {
  const auto *seq = getSequence(ctx, 0);
  if (!seq)
    return failure();
  auto pos = getPosition(ctx, 1, seq->size(), /*insert=*/false);
  if (!pos)
    return failure();
  ctx.setValue(0, (*seq)[*pos]);
  return success();
}

LogicalResult convertSequenceErase(NodeContext &ctx) {
  const auto *seq = getSequence(ctx, 0);
  if (!seq)
    return failure();
  int64_t size = seq->size(), pos = size - 1;
  if (ctx.hasInput(1)) {
    auto p = getPosition(ctx, 1, size, /*insert=*/false);
    if (!p)
      return failure();
    pos = *p;
  } else if (size == 0) {
    return ctx.emitError() << "cannot erase from an empty sequence";
  }
  std::vector<ImportedValue> elements(*seq);
  elements.erase(elements.begin() + pos);
  ctx.setValue(0, makeSequence(ctx.input(0).dtype, std::move(elements)));
  return success();
}

LogicalResult convertSequenceLength(NodeContext &ctx) {
  const auto *seq = getSequence(ctx, 0);
  if (!seq)
    return failure();
  ctx.setValue(0, makeScalar(TensorProto::INT64, seq->size()));
  return success();
}

LogicalResult convertConcatFromSequence(NodeContext &ctx) {
  const auto *seq = getSequence(ctx, 0);
  if (!seq)
    return failure();
  if (!ctx.attr("axis"))
    return ctx.emitError() << "needs an axis";
  FailureOr<ImportedValue> result = concatValues(
      ctx, *seq, ctx.attrInt("axis", 0), ctx.attrInt("new_axis", 0) != 0);
  if (failed(result))
    return failure();
  ctx.setValue(0, std::move(*result));
  return success();
}

} // namespace

bool mlir::tp::onnx_import::acceptsSequences(StringRef opType) {
  static const llvm::StringSet<> ops = {"SequenceInsert",     "SequenceAt",
                                        "SequenceErase",      "SequenceLength",
                                        "ConcatFromSequence", "Loop"};
  return ops.contains(opType);
}

void mlir::tp::onnx_import::populateSequenceConverters(ConverterMap &map) {
  map["SplitToSequence"] = convertSplitToSequence;
  map["SequenceEmpty"] = convertSequenceEmpty;
  map["SequenceConstruct"] = convertSequenceConstruct;
  map["SequenceInsert"] = convertSequenceInsert;
  map["SequenceAt"] = convertSequenceAt;
  map["SequenceErase"] = convertSequenceErase;
  map["SequenceLength"] = convertSequenceLength;
  map["ConcatFromSequence"] = convertConcatFromSequence;
}
