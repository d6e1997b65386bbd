//===- ReductionOps.cpp - ONNX reductions, Softmax and LayerNormalization -===//
//
// Reductions become linalg.generic ops with reduction iterators (then a
// keepdims reshape); Softmax, LogSoftmax and LayerNormalization are built
// from those and broadcasting elementwise generics, the form sharding
// propagation already understands.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <limits>

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class ReduceKind { Sum, Mean, Max, Min, Prod, SumSquare, L2 };

Value combineFor(ReduceKind kind, OpBuilder &b, Location loc, Value acc,
                 Value x, bool isUnsigned) {
  bool isFloat = isa<FloatType>(x.getType());
  switch (kind) {
  case ReduceKind::Max:
    if (isUnsigned)
      return arith::MaxUIOp::create(b, loc, acc, x);
    return createMax(b, loc, acc, x);
  case ReduceKind::Min:
    if (isFloat)
      return arith::MinimumFOp::create(b, loc, acc, x);
    if (isUnsigned)
      return arith::MinUIOp::create(b, loc, acc, x);
    return arith::MinSIOp::create(b, loc, acc, x);
  case ReduceKind::Prod:
    return createMul(b, loc, acc, x);
  case ReduceKind::SumSquare:
  case ReduceKind::L2:
    return createAdd(b, loc, acc, createMul(b, loc, x, x));
  default:
    return createAdd(b, loc, acc, x);
  }
}

/// The identity of the reduction; unsigned extremes are 0 and all ones
/// (-1 as a signless integer).
double initFor(ReduceKind kind, bool isUnsigned) {
  switch (kind) {
  case ReduceKind::Max:
    return isUnsigned ? 0.0 : -kInf;
  case ReduceKind::Min:
    return isUnsigned ? -1.0 : kInf;
  case ReduceKind::Prod:
    return 1.0;
  default:
    return 0.0;
  }
}

/// Sorted, unique, normalized axes; empty `axes` means all of them.
std::optional<SmallVector<int64_t>>
normalizeAxes(NodeContext &ctx, ArrayRef<int64_t> axes, int64_t rank) {
  SmallVector<int64_t> result;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i)
      result.push_back(i);
    return result;
  }
  for (int64_t a : axes) {
    auto axis = ctx.normalizeAxis(a, rank);
    if (!axis)
      return std::nullopt;
    result.push_back(*axis);
  }
  llvm::sort(result);
  result.erase(llvm::unique(result), result.end());
  return result;
}

/// Divides `x` by the scalar `n` (broadcast), for means.
Value divideBy(OpBuilder &b, Location loc, Value x, double n,
               bool isUnsigned = false) {
  auto type = getTensorType(x);
  return buildElementwise(
      b, loc, x, type.getShape(), type.getElementType(),
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        Value d = createScalar(nb, nloc, s[0].getType(), n);
        if (isa<FloatType>(s[0].getType()))
          return arith::DivFOp::create(nb, nloc, s[0], d);
        if (isUnsigned)
          return arith::DivUIOp::create(nb, nloc, s[0], d);
        return arith::DivSIOp::create(nb, nloc, s[0], d);
      });
}

LogicalResult convertReduce(NodeContext &ctx, ReduceKind kind,
                            int64_t axesInputSince) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  SmallVector<int64_t> axes;
  if (ctx.opset >= axesInputSince) {
    if (ctx.hasInput(1)) {
      auto a = ctx.constInts(1, "axes");
      if (!a)
        return failure();
      axes = *a;
    }
  } else if (auto a = ctx.attrInts("axes")) {
    axes = *a;
  }
  bool keepDims = ctx.attrInt("keepdims", 1);
  if (axes.empty() && ctx.attrInt("noop_with_empty_axes", 0)) {
    ctx.setResult(0, ctx.operand(0), x.dtype);
    return success();
  }
  auto normalized = normalizeAxes(ctx, axes, rank);
  if (!normalized)
    return failure();
  bool isUnsigned = isUnsignedDType(x.dtype);
  Value result =
      buildReduction(ctx.b, ctx.loc, ctx.operand(0), *normalized, keepDims,
                     initFor(kind, isUnsigned),
                     [&](OpBuilder &b, Location loc, Value acc, Value v) {
                       return combineFor(kind, b, loc, acc, v, isUnsigned);
                     });
  if (kind == ReduceKind::Mean) {
    int64_t n = 1;
    for (int64_t a : *normalized)
      n *= x.shape[a];
    result = divideBy(ctx.b, ctx.loc, result, n, isUnsigned);
  } else if (kind == ReduceKind::L2) {
    auto type = getTensorType(result);
    Type elementType = type.getElementType();
    result = buildElementwise(
        ctx.b, ctx.loc, result, type.getShape(), elementType,
        [&](OpBuilder &b, Location loc, ValueRange s) -> Value {
          if (isa<FloatType>(elementType))
            return math::SqrtOp::create(b, loc, s[0]);
          // Integer L2: the square root of the sum, truncated.
          Value f = castScalar(b, loc, s[0], b.getF64Type(), isUnsigned);
          Value r = math::SqrtOp::create(b, loc, f);
          return castScalar(b, loc, r, elementType, false, isUnsigned);
        });
  }
  ctx.setResult(0, result, x.dtype);
  return success();
}

/// Softmax over `axes`: exp(x - max) / sum(exp(x - max)); the log form
/// returns (x - max) - log(sum).
LogicalResult convertSoftmax(NodeContext &ctx, bool log) {
  const ImportedValue &x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "input must be floating point, got "
                           << dtypeName(x.dtype);
  int64_t rank = x.shape.size();
  auto axis =
      ctx.normalizeAxis(ctx.attrInt("axis", ctx.opset >= 13 ? -1 : 1), rank);
  if (!axis)
    return failure();
  // Before opset 13 the input is coerced to 2-D at `axis`.
  SmallVector<int64_t> axes;
  for (int64_t d = *axis; d < (ctx.opset >= 13 ? *axis + 1 : rank); ++d)
    axes.push_back(d);
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value input = ctx.operand(0);
  Type elementType = getTensorType(input).getElementType();
  Value max =
      buildReduction(b, loc, input, axes, /*keepDims=*/true, -kInf,
                     [](OpBuilder &nb, Location nloc, Value acc, Value v) {
                       return createMax(nb, nloc, acc, v);
                     });
  Value shifted =
      buildElementwise(b, loc, ValueRange{input, max}, x.shape, elementType,
                       [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
                         return arith::SubFOp::create(nb, nloc, s[0], s[1]);
                       });
  Value exp =
      buildElementwise(b, loc, shifted, x.shape, elementType,
                       [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
                         return math::ExpOp::create(nb, nloc, s[0]);
                       });
  Value sum =
      buildReduction(b, loc, exp, axes, /*keepDims=*/true, 0.0,
                     [](OpBuilder &nb, Location nloc, Value acc, Value v) {
                       return createAdd(nb, nloc, acc, v);
                     });
  Value result = buildElementwise(
      b, loc, ValueRange{log ? shifted : exp, sum}, x.shape, elementType,
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        if (log)
          return arith::SubFOp::create(nb, nloc, s[0],
                                       math::LogOp::create(nb, nloc, s[1]));
        return arith::DivFOp::create(nb, nloc, s[0], s[1]);
      });
  ctx.setResult(0, result, x.dtype);
  return success();
}

LogicalResult convertLayerNorm(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "input must be floating point, got "
                           << dtypeName(x.dtype);
  int64_t rank = x.shape.size();
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", -1), rank);
  if (!axis)
    return failure();
  double epsilon = ctx.attrFloat("epsilon", 1e-5f);
  SmallVector<int64_t> axes, normShape;
  int64_t n = 1;
  for (int64_t d = *axis; d < rank; ++d) {
    axes.push_back(d);
    normShape.push_back(x.shape[d]);
    n *= x.shape[d];
  }
  for (unsigned i : {1u, 2u}) {
    if (!ctx.hasInput(i))
      continue;
    auto s = broadcastShapes({ctx.input(i).shape, normShape});
    if (!s || *s != normShape)
      return ctx.emitError()
             << (i == 1 ? "scale " : "bias ") << formatShape(ctx.input(i).shape)
             << " does not broadcast to the normalized shape "
             << formatShape(normShape);
  }
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value input = ctx.operand(0);
  Type elementType = getTensorType(input).getElementType();
  auto add = [](OpBuilder &nb, Location nloc, Value acc, Value v) {
    return createAdd(nb, nloc, acc, v);
  };
  Value mean =
      divideBy(b, loc, buildReduction(b, loc, input, axes, true, 0.0, add), n);
  Value centered =
      buildElementwise(b, loc, ValueRange{input, mean}, x.shape, elementType,
                       [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
                         return arith::SubFOp::create(nb, nloc, s[0], s[1]);
                       });
  Value sumSq = buildReduction(
      b, loc, centered, axes, true, 0.0,
      [](OpBuilder &nb, Location nloc, Value acc, Value v) {
        return createAdd(nb, nloc, acc, arith::MulFOp::create(nb, nloc, v, v));
      });
  auto statType = getTensorType(sumSq);
  Value invStd = buildElementwise(
      b, loc, sumSq, statType.getShape(), elementType,
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        Value var = arith::DivFOp::create(
            nb, nloc, s[0], createScalar(nb, nloc, elementType, n));
        Value shifted = arith::AddFOp::create(
            nb, nloc, var, createScalar(nb, nloc, elementType, epsilon));
        return math::RsqrtOp::create(nb, nloc, shifted);
      });
  SmallVector<Value> operands = {centered, invStd};
  bool hasScale = ctx.hasInput(1), hasBias = ctx.hasInput(2);
  if (hasScale)
    operands.push_back(ctx.operand(1));
  if (hasBias)
    operands.push_back(ctx.operand(2));
  Value y = buildElementwise(
      b, loc, operands, x.shape, elementType,
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        Value v = arith::MulFOp::create(nb, nloc, s[0], s[1]);
        unsigned next = 2;
        if (hasScale)
          v = arith::MulFOp::create(nb, nloc, v, s[next++]);
        if (hasBias)
          v = arith::AddFOp::create(nb, nloc, v, s[next++]);
        return v;
      });
  ctx.setResult(0, y, x.dtype);
  ctx.setResult(1, mean, x.dtype);
  ctx.setResult(2, invStd, x.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateReductionConverters(ConverterMap &map) {
  auto reduce = [](ReduceKind kind, int64_t since) {
    return [kind, since](NodeContext &ctx) {
      return convertReduce(ctx, kind, since);
    };
  };
  map["ReduceSum"] = reduce(ReduceKind::Sum, 13);
  map["ReduceMean"] = reduce(ReduceKind::Mean, 18);
  map["ReduceMax"] = reduce(ReduceKind::Max, 18);
  map["ReduceMin"] = reduce(ReduceKind::Min, 18);
  map["ReduceProd"] = reduce(ReduceKind::Prod, 18);
  map["ReduceSumSquare"] = reduce(ReduceKind::SumSquare, 18);
  map["ReduceL2"] = reduce(ReduceKind::L2, 18);
  map["Softmax"] = [](NodeContext &ctx) { return convertSoftmax(ctx, false); };
  map["LogSoftmax"] = [](NodeContext &ctx) {
    return convertSoftmax(ctx, true);
  };
  map["LayerNormalization"] = convertLayerNorm;
}
