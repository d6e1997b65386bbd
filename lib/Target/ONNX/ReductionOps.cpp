//===- ReductionOps.cpp - ONNX reductions, arg-extremes and norms ---------===//
//
// Reductions become linalg.generic ops with reduction iterators (then a
// keepdims reshape); ArgMax/ArgMin, Softmax, LogSoftmax, LayerNormalization
// and InstanceNormalization are built from those and broadcasting
// elementwise generics, the form sharding propagation already understands.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>
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
  ctx.setResult(0, buildSoftmax(ctx.b, ctx.loc, ctx.operand(0), axes, log),
                x.dtype);
  return success();
}

/// The statistics of a normalization over `axes` (kept as unit dims):
/// x - mean and 1 / sqrt(var + epsilon), with the biased variance.
struct Normalized {
  Value mean, centered, invStd;
};

Normalized buildNormalized(OpBuilder &b, Location loc, Value input,
                           ArrayRef<int64_t> axes, double epsilon) {
  auto type = getTensorType(input);
  Type elementType = type.getElementType();
  int64_t n = 1;
  for (int64_t d : axes)
    n *= type.getDimSize(d);
  auto add = [](OpBuilder &nb, Location nloc, Value acc, Value v) {
    return createAdd(nb, nloc, acc, v);
  };
  Value mean =
      divideBy(b, loc, buildReduction(b, loc, input, axes, true, 0.0, add), n);
  Value centered = buildElementwise(
      b, loc, ValueRange{input, mean}, type.getShape(), elementType,
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
  return {mean, centered, invStd};
}

/// (x - mean) * invStd [* scale] [+ bias], the operands broadcasting.
Value buildAffine(OpBuilder &b, Location loc, const Normalized &stats,
                  Value scale, Value bias) {
  auto type = getTensorType(stats.centered);
  SmallVector<Value> operands = {stats.centered, stats.invStd};
  if (scale)
    operands.push_back(scale);
  if (bias)
    operands.push_back(bias);
  return buildElementwise(
      b, loc, operands, type.getShape(), type.getElementType(),
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        Value v = arith::MulFOp::create(nb, nloc, s[0], s[1]);
        unsigned next = 2;
        if (scale)
          v = arith::MulFOp::create(nb, nloc, v, s[next++]);
        if (bias)
          v = arith::AddFOp::create(nb, nloc, v, s[next++]);
        return v;
      });
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
  for (int64_t d = *axis; d < rank; ++d) {
    axes.push_back(d);
    normShape.push_back(x.shape[d]);
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
  Normalized stats =
      buildNormalized(ctx.b, ctx.loc, ctx.operand(0), axes, epsilon);
  Value scale = ctx.hasInput(1) ? ctx.operand(1) : Value();
  Value bias = ctx.hasInput(2) ? ctx.operand(2) : Value();
  ctx.setResult(0, buildAffine(ctx.b, ctx.loc, stats, scale, bias), x.dtype);
  ctx.setResult(1, stats.mean, x.dtype);
  ctx.setResult(2, stats.invStd, x.dtype);
  return success();
}

/// InstanceNormalization: each (n, c) slice normalized over its spatial
/// dims, then scaled and shifted per channel: a LayerNorm over dims 2.. with
/// [C] scale and bias read as [C, 1, ...].
LogicalResult convertInstanceNorm(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "input must be floating point, got "
                           << dtypeName(x.dtype);
  int64_t rank = x.shape.size();
  if (rank < 3)
    return ctx.emitError() << "input must be [N, C, D1, ...] (rank >= 3), got "
                           << formatShape(x.shape);
  int64_t channels = x.shape[1];
  for (unsigned i : {1u, 2u})
    if (ctx.input(i).shape != SmallVector<int64_t>{channels})
      return ctx.emitError()
             << (i == 1 ? "scale" : "bias") << " must be [" << channels
             << "] (one per channel), got " << formatShape(ctx.input(i).shape);
  SmallVector<int64_t> axes, perChannel = {channels};
  for (int64_t d = 2; d < rank; ++d) {
    axes.push_back(d);
    perChannel.push_back(1);
  }
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Normalized stats = buildNormalized(b, loc, ctx.operand(0), axes,
                                     ctx.attrFloat("epsilon", 1e-5f));
  Value scale = buildReshape(b, loc, ctx.operand(1), perChannel);
  Value bias = buildReshape(b, loc, ctx.operand(2), perChannel);
  ctx.setResult(0, buildAffine(b, loc, stats, scale, bias), x.dtype);
  return success();
}

/// ArgMax / ArgMin of a known tensor: the first (or last) extreme, NaN
/// counting as the extreme, as numpy and onnxruntime pick it.
ConstTensor foldArgExtreme(const ConstTensor &in, int64_t axis, bool isMax,
                           bool last, ArrayRef<int64_t> outShape) {
  ConstTensor r;
  r.dtype = onnx::TensorProto::INT64;
  r.shape.assign(outShape.begin(), outShape.end());
  r.allocate();
  SmallVector<int64_t> strides = getStrides(in.shape);
  int64_t n = in.shape[axis], stride = strides[axis];
  int64_t inner = stride, outer = in.numel() / std::max<int64_t>(n * inner, 1);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      double bestValue = in.getAsDouble(o * n * inner + i);
      for (int64_t k = 1; k < n; ++k) {
        double v = in.getAsDouble(o * n * inner + k * stride + i);
        if (std::isnan(bestValue) && !last)
          break;
        bool better = std::isnan(v) || (isMax ? v > bestValue : v < bestValue);
        if (better || (last && v == bestValue)) {
          best = k;
          bestValue = v;
        }
      }
      r.ints[o * inner + i] = best;
    }
  }
  return r;
}

/// ArgMax / ArgMin: the extreme by a reduction, then the smallest (or, with
/// select_last_index, largest) index holding it by a second reduction over
/// linalg.index: two single-result generics, the forms the planner and the
/// emitters already read.
LogicalResult convertArgExtreme(NodeContext &ctx, bool isMax) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank == 0)
    return ctx.emitError() << "input must have rank >= 1";
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  bool keepDims = ctx.attrInt("keepdims", 1) != 0;
  bool last = ctx.attrInt("select_last_index", 0) != 0;
  int64_t n = x.shape[*axis];
  if (n == 0)
    return ctx.emitError() << "cannot take the arg" << (isMax ? "max" : "min")
                           << " of an empty axis " << *axis;
  SmallVector<int64_t> keptShape(x.shape), reducedShape;
  keptShape[*axis] = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis)
      reducedShape.push_back(x.shape[d]);
  ArrayRef<int64_t> outShape = keepDims ? keptShape : reducedShape;
  if (const ConstTensor *c = ctx.constInput(0);
      c && c->numel() <= maxFoldedElements()) {
    ctx.setConstResult(0, foldArgExtreme(*c, *axis, isMax, last, outShape));
    return success();
  }

  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  MLIRContext *mctx = b.getContext();
  Value input = ctx.operand(0);
  bool isUnsigned = isUnsignedDType(x.dtype);
  ReduceKind kind = isMax ? ReduceKind::Max : ReduceKind::Min;
  Value extreme = buildReduction(
      b, loc, input, *axis, /*keepDims=*/false, initFor(kind, isUnsigned),
      [&](OpBuilder &nb, Location nloc, Value acc, Value v) {
        return combineFor(kind, nb, nloc, acc, v, isUnsigned);
      });
  // No match is n (first) or -1 (last); one always matches, since a NaN
  // extreme matches the NaNs.
  Type i64 = b.getI64Type();
  Value init = createFilled(b, loc, reducedShape, i64, last ? -1.0 : double(n));
  SmallVector<AffineExpr> reducedExprs;
  SmallVector<utils::IteratorType> iterators;
  for (int64_t d = 0; d < rank; ++d) {
    iterators.push_back(d == *axis ? utils::IteratorType::reduction
                                   : utils::IteratorType::parallel);
    if (d != *axis)
      reducedExprs.push_back(getAffineDimExpr(d, mctx));
  }
  AffineMap reducedMap = AffineMap::get(rank, 0, reducedExprs, mctx);
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(rank), reducedMap,
                                 reducedMap};
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), ValueRange{input, extreme}, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value v = args[0], best = args[1], acc = args[2];
        Value match;
        if (isa<FloatType>(v.getType())) {
          Value equal = arith::CmpFOp::create(
              nb, nloc, arith::CmpFPredicate::OEQ, v, best);
          Value nan =
              arith::CmpFOp::create(nb, nloc, arith::CmpFPredicate::UNO, v, v);
          match = arith::OrIOp::create(nb, nloc, equal, nan);
        } else {
          match = arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq, v,
                                        best);
        }
        Value index = arith::IndexCastOp::create(
            nb, nloc, i64, linalg::IndexOp::create(nb, nloc, *axis));
        Value none = createScalar(nb, nloc, i64, last ? -1.0 : double(n));
        Value candidate = arith::SelectOp::create(nb, nloc, match, index, none);
        Value r = last
                      ? Value(arith::MaxSIOp::create(nb, nloc, acc, candidate))
                      : Value(arith::MinSIOp::create(nb, nloc, acc, candidate));
        linalg::YieldOp::create(nb, nloc, r);
      });
  Value result = generic.getResult(0);
  if (keepDims)
    result = buildReshape(b, loc, result, keptShape);
  ctx.setResult(0, result, onnx::TensorProto::INT64);
  return success();
}

} // namespace

Value mlir::tp::onnx_import::buildSoftmax(OpBuilder &b, Location loc,
                                          Value input, ArrayRef<int64_t> axes,
                                          bool log) {
  auto type = getTensorType(input);
  ArrayRef<int64_t> shape = type.getShape();
  Type elementType = type.getElementType();
  Value max =
      buildReduction(b, loc, input, axes, /*keepDims=*/true, -kInf,
                     [](OpBuilder &nb, Location nloc, Value acc, Value v) {
                       return createMax(nb, nloc, acc, v);
                     });
  Value shifted =
      buildElementwise(b, loc, ValueRange{input, max}, shape, elementType,
                       [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
                         return arith::SubFOp::create(nb, nloc, s[0], s[1]);
                       });
  Value exp =
      buildElementwise(b, loc, shifted, shape, elementType,
                       [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
                         return math::ExpOp::create(nb, nloc, s[0]);
                       });
  Value sum =
      buildReduction(b, loc, exp, axes, /*keepDims=*/true, 0.0,
                     [](OpBuilder &nb, Location nloc, Value acc, Value v) {
                       return createAdd(nb, nloc, acc, v);
                     });
  return buildElementwise(
      b, loc, ValueRange{log ? shifted : exp, sum}, shape, elementType,
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        if (log)
          return arith::SubFOp::create(nb, nloc, s[0],
                                       math::LogOp::create(nb, nloc, s[1]));
        return arith::DivFOp::create(nb, nloc, s[0], s[1]);
      });
}

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
  map["InstanceNormalization"] = convertInstanceNorm;
  map["ArgMax"] = [](NodeContext &ctx) { return convertArgExtreme(ctx, true); };
  map["ArgMin"] = [](NodeContext &ctx) {
    return convertArgExtreme(ctx, false);
  };
}
