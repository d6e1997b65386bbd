//===- ShapeOps.cpp - ONNX shape and constant ops -------------------------===//
//
// Shape, Size, Constant, ConstantOfShape, Range, Identity, Dropout and the
// pure reshapes (Reshape, Flatten, Squeeze, Unsqueeze, Expand, Transpose).
// Shape sub-graphs fold here: on constants every op computes its result at
// import, so that Reshape targets and masks come out static.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;
using onnx::TensorProto;

namespace {

LogicalResult convertIdentity(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  if (x.constant) {
    ctx.setConstResult(0, *x.constant);
    return success();
  }
  ctx.setResult(0, ctx.operand(0), x.dtype);
  return success();
}

/// Inference-mode Dropout is the identity; its mask is all true.
LogicalResult convertDropout(NodeContext &ctx) {
  bool training = false;
  if (ctx.hasInput(2)) {
    const ConstTensor *mode = ctx.constInput(2);
    if (!mode)
      return ctx.emitError() << "training_mode must be known at import "
                                "time; only inference (false) is supported";
    if (mode->numel() != 1)
      return ctx.emitError() << "training_mode must be a scalar";
    training = mode->getAsInt(0) != 0;
  }
  if (training)
    return ctx.emitError() << "training-mode Dropout is not supported; "
                              "export the model in eval mode";
  if (failed(convertIdentity(ctx)))
    return failure();
  if (!ctx.hasOutput(1))
    return success();
  const ImportedValue &x = ctx.input(0);
  if (getNumElements(x.shape) <= maxFoldedElements()) {
    ConstTensor mask;
    mask.dtype = TensorProto::BOOL;
    mask.shape = x.shape;
    mask.allocate();
    llvm::fill(mask.ints, 1);
    ctx.setConstResult(1, mask);
  } else {
    ctx.setResult(1,
                  createFilled(ctx.b, ctx.loc, x.shape, ctx.b.getI1Type(), 1),
                  TensorProto::BOOL);
  }
  return success();
}

ConstTensor makeInts(ArrayRef<int64_t> values, bool scalar = false) {
  ConstTensor c;
  c.dtype = TensorProto::INT64;
  if (!scalar)
    c.shape = {static_cast<int64_t>(values.size())};
  c.ints.assign(values.begin(), values.end());
  return c;
}

LogicalResult convertShape(NodeContext &ctx) {
  ArrayRef<int64_t> shape = ctx.input(0).shape;
  int64_t rank = shape.size();
  int64_t start = ctx.attrInt("start", 0), end = ctx.attrInt("end", rank);
  auto clampAxis = [&](int64_t a) {
    if (a < 0)
      a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  start = clampAxis(start);
  end = std::max(clampAxis(end), start);
  ctx.setConstResult(0, makeInts(shape.slice(start, end - start)));
  return success();
}

LogicalResult convertSize(NodeContext &ctx) {
  ctx.setConstResult(0, makeInts({getNumElements(ctx.input(0).shape)},
                                 /*scalar=*/true));
  return success();
}

ConstTensor floatsToConst(ArrayRef<float> values, bool scalar) {
  ConstTensor c;
  c.dtype = TensorProto::FLOAT;
  if (!scalar)
    c.shape = {static_cast<int64_t>(values.size())};
  c.floats.assign(values.begin(), values.end());
  return c;
}

LogicalResult convertConstant(NodeContext &ctx) {
  if (const auto *a = ctx.attr("value")) {
    std::string error;
    FailureOr<ConstTensor> c = readTensorProto(a->t(), error);
    if (failed(c))
      return ctx.emitError() << "its value " << error;
    if (!getElementType(ctx.b.getContext(), c->dtype))
      return ctx.emitError()
             << "unsupported element type " << dtypeName(c->dtype);
    ctx.setConstResult(0, std::move(*c));
    return success();
  }
  if (const auto *a = ctx.attr("value_float")) {
    ctx.setConstResult(0, floatsToConst({a->f()}, true));
    return success();
  }
  if (const auto *a = ctx.attr("value_floats")) {
    SmallVector<float> v(a->floats().begin(), a->floats().end());
    ctx.setConstResult(0, floatsToConst(v, false));
    return success();
  }
  if (const auto *a = ctx.attr("value_int")) {
    ctx.setConstResult(0, makeInts({a->i()}, true));
    return success();
  }
  if (auto ints = ctx.attrInts("value_ints")) {
    ctx.setConstResult(0, makeInts(*ints));
    return success();
  }
  return ctx.emitError()
         << "only dense numeric values are supported (value, value_float(s), "
            "value_int(s)); sparse and string constants are not";
}

/// Checks that a shape from a constant input is all non-negative.
LogicalResult checkShape(NodeContext &ctx, ArrayRef<int64_t> shape) {
  if (llvm::any_of(shape, [](int64_t d) { return d < 0; }))
    return ctx.emitError() << "shape " << formatShape(shape)
                           << " has a negative dim";
  if (!getCheckedNumElements(shape))
    return ctx.emitError() << "shape " << formatShape(shape)
                           << " has more elements than fit in 64 bits";
  return success();
}

LogicalResult convertConstantOfShape(NodeContext &ctx) {
  auto shape = ctx.constInts(0, "shape");
  if (!shape || failed(checkShape(ctx, *shape)))
    return failure();
  ConstTensor fill;
  fill.dtype = TensorProto::FLOAT;
  fill.floats = {0.0};
  if (const auto *a = ctx.attr("value")) {
    std::string error;
    FailureOr<ConstTensor> c = readTensorProto(a->t(), error);
    if (failed(c) || c->numel() != 1)
      return ctx.emitError() << "value must hold exactly one element";
    fill = std::move(*c);
  }
  int64_t n = getNumElements(*shape);
  if (n <= maxFoldedElements()) {
    ConstTensor r;
    r.dtype = fill.dtype;
    r.shape = *shape;
    r.allocate();
    if (r.isFloat())
      llvm::fill(r.floats, fill.floats[0]);
    else
      llvm::fill(r.ints, fill.ints[0]);
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  Type elementType = getElementType(ctx.b.getContext(), fill.dtype);
  ctx.setResult(
      0, createFilled(ctx.b, ctx.loc, *shape, elementType, fill.getAsDouble(0)),
      fill.dtype);
  return success();
}

/// EyeLike: a matrix of the input's shape with ones on diagonal `k` (j - i
/// == k), of type `dtype` (default the input's). Shapes are static, so it
/// is a constant, or a loop nest over the indices where too large to fold.
LogicalResult convertEyeLike(NodeContext &ctx) {
  const ImportedValue &in = ctx.input(0);
  if (in.shape.size() != 2)
    return ctx.emitError() << "input must be 2-D, got shape "
                           << formatShape(in.shape);
  DType dtype = ctx.attrInt("dtype", in.dtype);
  Type elementType = getElementType(ctx.b.getContext(), dtype);
  if (!elementType)
    return ctx.emitError() << "unsupported dtype " << dtypeName(dtype);
  int64_t k = ctx.attrInt("k", 0);
  int64_t rows = in.shape[0], cols = in.shape[1];
  if (rows * cols <= maxFoldedElements()) {
    ConstTensor r;
    r.dtype = dtype;
    r.shape = {rows, cols};
    r.allocate();
    for (int64_t i = 0; i < rows; ++i)
      if (int64_t j = i + k; j >= 0 && j < cols) {
        if (r.isFloat())
          r.floats[i * cols + j] = 1.0;
        else
          r.ints[i * cols + j] = 1;
      }
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  auto type = RankedTensorType::get({rows, cols}, elementType);
  Value init = tensor::EmptyOp::create(b, loc, type.getShape(), elementType);
  AffineMap id = b.getMultiDimIdentityMap(2);
  SmallVector<utils::IteratorType> iterators(2, utils::IteratorType::parallel);
  auto eye = linalg::GenericOp::create(
      b, loc, type, ValueRange{}, ValueRange{init}, ArrayRef<AffineMap>{id},
      iterators, [&](OpBuilder &nb, Location nl, ValueRange) {
        Value i = linalg::IndexOp::create(nb, nl, 0);
        Value j = linalg::IndexOp::create(nb, nl, 1);
        Value shifted = arith::AddIOp::create(
            nb, nl, i, arith::ConstantIndexOp::create(nb, nl, k));
        Value onDiagonal =
            arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::eq, j, shifted);
        Value one =
            arith::ConstantOp::create(nb, nl, nb.getOneAttr(elementType));
        Value zero =
            arith::ConstantOp::create(nb, nl, nb.getZeroAttr(elementType));
        linalg::YieldOp::create(
            nb, nl,
            ValueRange{arith::SelectOp::create(nb, nl, onDiagonal, one, zero)});
      });
  ctx.setResult(0, eye.getResult(0), dtype);
  return success();
}

LogicalResult convertRange(NodeContext &ctx) {
  const ConstTensor *start = ctx.constInput(0), *limit = ctx.constInput(1),
                    *delta = ctx.constInput(2);
  if (!start || !limit || !delta)
    return ctx.emitError() << "start, limit and delta must be known at "
                              "import time (the result shape depends on them)";
  if (start->numel() != 1 || limit->numel() != 1 || delta->numel() != 1)
    return ctx.emitError() << "start, limit and delta must be scalars";
  if (start->dtype != limit->dtype || start->dtype != delta->dtype)
    return ctx.emitError() << "start, limit and delta differ in type: "
                           << dtypeName(start->dtype) << ", "
                           << dtypeName(limit->dtype) << ", "
                           << dtypeName(delta->dtype);
  double s = start->getAsDouble(0), l = limit->getAsDouble(0),
         d = delta->getAsDouble(0);
  if (d == 0)
    return ctx.emitError() << "delta is zero";
  // Integer ranges are counted and filled in 128 bits: start + i * delta
  // can overflow 64 bits before the element it names exceeds the limit
  // (start = -2^63, delta = 2^62 + 1), and the count in doubles rounds.
  bool isFloat = start->isFloat();
  __int128 s128 = isFloat ? 0 : start->ints[0],
           d128 = isFloat ? 1 : delta->ints[0];
  double count;
  if (isFloat) {
    count = std::ceil((l - s) / d);
  } else {
    __int128 span = __int128(limit->ints[0]) - s128;
    __int128 steps = span / d128;
    if (steps * d128 != span && (span < 0) == (d128 < 0))
      ++steps;
    count = static_cast<double>(steps);
  }
  if (!(count <= static_cast<double>(maxFoldedElements())))
    return ctx.emitError() << "range of " << count
                           << " elements is too large to build at import";
  // A negative count is an empty range (and -4e28 fits no int64).
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  ConstTensor r;
  r.dtype = start->dtype;
  r.shape = {n};
  r.allocate();
  for (int64_t i = 0; i < n; ++i) {
    if (isFloat)
      r.floats[i] = s + i * d;
    else
      r.ints[i] = static_cast<int64_t>(s128 + i * d128);
  }
  ctx.setConstResult(0, std::move(r));
  return success();
}

/// Result of a reshape-like op: folds constants, else emits
/// expand/collapse_shape.
LogicalResult setReshaped(NodeContext &ctx, ArrayRef<int64_t> shape) {
  const ImportedValue &x = ctx.input(0);
  if (getNumElements(shape) != getNumElements(x.shape))
    return ctx.emitError() << "cannot reshape " << formatShape(x.shape) << " ("
                           << getNumElements(x.shape) << " elements) to "
                           << formatShape(shape) << " ("
                           << getNumElements(shape) << " elements)";
  if (x.constant) {
    ConstTensor r = *x.constant;
    r.shape.assign(shape.begin(), shape.end());
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  ctx.setResult(0, buildReshape(ctx.b, ctx.loc, ctx.operand(0), shape),
                x.dtype);
  return success();
}

LogicalResult convertReshape(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.input(0).shape;
  std::optional<SmallVector<int64_t>> target;
  if (ctx.opset < 5)
    target = ctx.attrInts("shape");
  else
    target = ctx.constInts(1, "shape");
  if (!target)
    return failure();
  bool allowZero = ctx.attrInt("allowzero", 0);
  SmallVector<int64_t> shape = *target;
  int64_t inferred = -1, known = 1;
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (d == 0 && !allowZero) {
      if (i >= in.size())
        return ctx.emitError()
               << "shape " << formatShape(*target) << " copies dim " << i
               << " of " << formatShape(in) << ", which has none";
      d = in[i];
    }
    if (d == -1) {
      if (inferred >= 0)
        return ctx.emitError()
               << "shape " << formatShape(*target) << " has more than one -1";
      inferred = i;
      continue;
    }
    if (d < 0)
      return ctx.emitError()
             << "shape " << formatShape(*target) << " has a negative dim";
    if (llvm::MulOverflow(known, d, known))
      return ctx.emitError() << "cannot reshape " << formatShape(in) << " to "
                             << formatShape(*target)
                             << ": its element count does not fit in 64 bits";
  }
  if (inferred >= 0) {
    int64_t total = getNumElements(in);
    if (known == 0 || total % known != 0)
      return ctx.emitError() << "cannot reshape " << formatShape(in) << " to "
                             << formatShape(*target);
    shape[inferred] = total / known;
  }
  return setReshaped(ctx, shape);
}

LogicalResult convertFlatten(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.input(0).shape;
  int64_t rank = in.size();
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < -rank || axis > rank)
    return ctx.emitError() << "axis " << axis << " is out of range for rank "
                           << rank;
  if (axis < 0)
    axis += rank;
  return setReshaped(ctx, {getNumElements(in.take_front(axis)),
                           getNumElements(in.drop_front(axis))});
}

/// Axes from the `axes` input (opset >= 13) or attribute.
std::optional<SmallVector<int64_t>> getAxes(NodeContext &ctx, unsigned input,
                                            int64_t sinceOpset) {
  if (ctx.opset >= sinceOpset) {
    if (!ctx.hasInput(input))
      return SmallVector<int64_t>{};
    return ctx.constInts(input, "axes");
  }
  if (auto axes = ctx.attrInts("axes"))
    return axes;
  return SmallVector<int64_t>{};
}

LogicalResult convertSqueeze(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.input(0).shape;
  auto axes = getAxes(ctx, 1, 13);
  if (!axes)
    return failure();
  SmallVector<bool> drop(in.size(), false);
  if (axes->empty()) {
    for (auto [i, d] : llvm::enumerate(in))
      drop[i] = d == 1;
  }
  for (int64_t a : *axes) {
    auto axis = ctx.normalizeAxis(a, in.size());
    if (!axis)
      return failure();
    if (in[*axis] != 1)
      return ctx.emitError() << "cannot squeeze dim " << *axis << " of "
                             << formatShape(in) << ": its size is not 1";
    drop[*axis] = true;
  }
  SmallVector<int64_t> shape;
  for (auto [i, d] : llvm::enumerate(in))
    if (!drop[i])
      shape.push_back(d);
  return setReshaped(ctx, shape);
}

LogicalResult convertUnsqueeze(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.input(0).shape;
  auto axes = getAxes(ctx, 1, 13);
  if (!axes)
    return failure();
  int64_t rank = in.size() + axes->size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t a : *axes) {
    auto axis = ctx.normalizeAxis(a, rank);
    if (!axis)
      return failure();
    if (inserted[*axis])
      return ctx.emitError() << "axis " << a << " is repeated";
    inserted[*axis] = true;
  }
  SmallVector<int64_t> shape;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    shape.push_back(inserted[i] ? 1 : in[next++]);
  return setReshaped(ctx, shape);
}

LogicalResult convertExpand(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  auto target = ctx.constInts(1, "shape");
  if (!target)
    return failure();
  auto shape = broadcastShapes({x.shape, *target});
  if (!shape)
    return ctx.emitError() << "cannot expand " << formatShape(x.shape) << " to "
                           << formatShape(*target);
  if (x.constant && getNumElements(*shape) <= maxFoldedElements()) {
    SmallVector<int64_t> strides = getStrides(x.shape);
    size_t offset = shape->size() - x.shape.size();
    ctx.setConstResult(
        0, foldByIndex(*x.constant, *shape, [&](ArrayRef<int64_t> idx) {
          int64_t flat = 0;
          for (size_t d = 0; d < x.shape.size(); ++d)
            flat += (x.shape[d] == 1 ? 0 : idx[offset + d]) * strides[d];
          return flat;
        }));
    return success();
  }
  Value input = ctx.operand(0);
  Value result = buildElementwise(
      ctx.b, ctx.loc, input, *shape, getTensorType(input).getElementType(),
      [](OpBuilder &, Location, ValueRange s) { return s[0]; });
  ctx.setResult(0, result, x.dtype);
  return success();
}

LogicalResult convertTranspose(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  SmallVector<int64_t> perm;
  if (auto p = ctx.attrInts("perm"))
    perm = *p;
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  SmallVector<int64_t> sorted(perm);
  llvm::sort(sorted);
  bool valid = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t i = 0; valid && i < rank; ++i)
    valid = sorted[i] == i;
  if (!valid)
    return ctx.emitError() << "perm " << formatShape(perm)
                           << " is not a permutation of rank " << rank;
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(x.shape[p]);
  if (x.constant && x.constant->numel() <= maxFoldedElements()) {
    SmallVector<int64_t> strides = getStrides(x.shape);
    ctx.setConstResult(
        0, foldByIndex(*x.constant, shape, [&](ArrayRef<int64_t> idx) {
          int64_t flat = 0;
          for (int64_t d = 0; d < rank; ++d)
            flat += idx[d] * strides[perm[d]];
          return flat;
        }));
    return success();
  }
  Value input = ctx.operand(0);
  // A permutation that keeps every dim in place (of a scalar, too, which
  // linalg.transpose cannot take) is the input itself.
  if (llvm::equal(perm, llvm::seq<int64_t>(0, rank))) {
    ctx.setResult(0, input, x.dtype);
    return success();
  }
  Value init =
      createEmpty(ctx.b, ctx.loc, shape, getTensorType(input).getElementType());
  Value result = linalg::TransposeOp::create(ctx.b, ctx.loc, input, init, perm)
                     .getResult()[0];
  ctx.setResult(0, result, x.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateShapeConverters(ConverterMap &map) {
  map["Identity"] = convertIdentity;
  map["Dropout"] = convertDropout;
  map["Shape"] = convertShape;
  map["Size"] = convertSize;
  map["Constant"] = convertConstant;
  map["ConstantOfShape"] = convertConstantOfShape;
  map["Range"] = convertRange;
  map["EyeLike"] = convertEyeLike;
  map["Reshape"] = convertReshape;
  map["Flatten"] = convertFlatten;
  map["Squeeze"] = convertSqueeze;
  map["Unsqueeze"] = convertUnsqueeze;
  map["Expand"] = convertExpand;
  map["Transpose"] = convertTranspose;
}
