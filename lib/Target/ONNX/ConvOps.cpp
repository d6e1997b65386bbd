//===- ConvOps.cpp - ONNX Conv, pooling and BatchNormalization ------------===//
//
// N-d convolution and pooling as linalg.generic (strides and dilations in
// the indexing maps, padding as tensor.pad), and inference-mode batch norm
// as one per-channel elementwise generic.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

/// Window geometry of a Conv or pool over `spatial` input dims.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, padBegin, padEnd, out;
};

FailureOr<Window> getWindow(NodeContext &ctx, ArrayRef<int64_t> spatial,
                            ArrayRef<int64_t> kernel, bool ceilMode) {
  size_t n = spatial.size();
  Window w;
  w.kernel.assign(kernel.begin(), kernel.end());
  w.strides = ctx.attrInts("strides").value_or(SmallVector<int64_t>(n, 1));
  w.dilations = ctx.attrInts("dilations").value_or(SmallVector<int64_t>(n, 1));
  SmallVector<int64_t> pads =
      ctx.attrInts("pads").value_or(SmallVector<int64_t>(2 * n, 0));
  if (w.kernel.size() != n || w.strides.size() != n ||
      w.dilations.size() != n || pads.size() != 2 * n)
    return ctx.emitError() << "kernel_shape, strides, dilations and pads do "
                              "not match "
                           << n << " spatial dims";
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  for (size_t i = 0; i < n; ++i) {
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0)
      return ctx.emitError() << "kernel, strides and dilations must be "
                                "positive";
    int64_t extent = w.dilations[i] * (w.kernel[i] - 1) + 1;
    int64_t begin = pads[i], end = pads[i + n];
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t out = (spatial[i] + w.strides[i] - 1) / w.strides[i];
      int64_t total =
          std::max<int64_t>(0, (out - 1) * w.strides[i] + extent - spatial[i]);
      begin = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end = total - begin;
    } else if (autoPad == "VALID") {
      begin = end = 0;
    } else if (autoPad != "NOTSET") {
      return ctx.emitError() << "unknown auto_pad '" << autoPad << "'";
    }
    int64_t span = spatial[i] + begin + end - extent;
    if (span < 0)
      return ctx.emitError()
             << "kernel extent " << extent << " exceeds the padded input "
             << spatial[i] << " + " << begin + end << " on spatial dim " << i;
    int64_t out = ceilMode ? (span + w.strides[i] - 1) / w.strides[i] + 1
                           : span / w.strides[i] + 1;
    // A ceil-mode window must start inside the input or its begin padding.
    if (ceilMode && (out - 1) * w.strides[i] >= spatial[i] + begin)
      --out;
    // Pad the end far enough for the last window.
    end = std::max(end, (out - 1) * w.strides[i] + extent - spatial[i] - begin);
    w.padBegin.push_back(begin);
    w.padEnd.push_back(end);
    w.out.push_back(out);
  }
  return w;
}

Value padSpatial(OpBuilder &b, Location loc, Value x, const Window &w,
                 double value) {
  auto type = getTensorType(x);
  if (llvm::all_of(w.padBegin, [](int64_t p) { return p == 0; }) &&
      llvm::all_of(w.padEnd, [](int64_t p) { return p == 0; }))
    return x;
  SmallVector<OpFoldResult> low(2, b.getIndexAttr(0)),
      high(2, b.getIndexAttr(0));
  SmallVector<int64_t> shape(type.getShape().take_front(2));
  for (size_t i = 0; i < w.padBegin.size(); ++i) {
    low.push_back(b.getIndexAttr(w.padBegin[i]));
    high.push_back(b.getIndexAttr(w.padEnd[i]));
    shape.push_back(type.getDimSize(i + 2) + w.padBegin[i] + w.padEnd[i]);
  }
  Value padValue = createScalar(b, loc, type.getElementType(), value);
  return tensor::PadOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), x, low, high,
      padValue);
}

/// Reshapes a per-channel vector [C] to [C, 1, ..., 1] for broadcasting
/// against [N, C, spatial...].
Value channelView(OpBuilder &b, Location loc, Value v, int64_t spatialRank) {
  SmallVector<int64_t> shape = {getTensorType(v).getNumElements()};
  shape.append(spatialRank, 1);
  return buildReshape(b, loc, v, shape);
}

LogicalResult convertConv(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0), &wt = ctx.input(1);
  int64_t rank = x.shape.size();
  if (rank < 3 || wt.shape.size() != x.shape.size())
    return ctx.emitError() << "expects X [N, C, spatial...] and W [M, C/group, "
                              "kernel...] of the same rank, got "
                           << formatShape(x.shape) << " and "
                           << formatShape(wt.shape);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "input must be floating point";
  int64_t group = ctx.attrInt("group", 1);
  int64_t channels = x.shape[1], m = wt.shape[0], cg = wt.shape[1];
  if (group <= 0 || channels != cg * group || m % group != 0)
    return ctx.emitError() << "channels do not match: X has " << channels
                           << ", W " << formatShape(wt.shape) << ", group "
                           << group;
  int64_t spatialRank = rank - 2;
  SmallVector<int64_t> kernel(wt.shape.begin() + 2, wt.shape.end());
  if (auto ks = ctx.attrInts("kernel_shape"); ks && *ks != kernel)
    return ctx.emitError() << "kernel_shape " << formatShape(*ks)
                           << " does not match W " << formatShape(wt.shape);
  FailureOr<Window> w =
      getWindow(ctx, ArrayRef<int64_t>(x.shape).drop_front(2), kernel, false);
  if (failed(w))
    return failure();
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  MLIRContext *mctx = b.getContext();
  Value input = padSpatial(b, loc, ctx.operand(0), *w, 0.0);
  Type elementType = getTensorType(input).getElementType();
  int64_t mg = m / group;
  // Loops: n, g, mg, out..., c, k...
  int64_t numLoops = 3 + 2 * spatialRank + 1;
  auto dim = [&](int64_t i) { return getAffineDimExpr(i, mctx); };
  SmallVector<AffineExpr> xExprs = {dim(0), dim(1) * cg + dim(3 + spatialRank)};
  SmallVector<AffineExpr> wExprs = {dim(1), dim(2), dim(3 + spatialRank)};
  SmallVector<AffineExpr> outExprs = {dim(0), dim(1), dim(2)};
  SmallVector<int64_t> outShape = {x.shape[0], group, mg};
  for (int64_t i = 0; i < spatialRank; ++i) {
    AffineExpr o = dim(3 + i), k = dim(4 + spatialRank + i);
    xExprs.push_back(o * w->strides[i] + k * w->dilations[i]);
    wExprs.push_back(k);
    outExprs.push_back(o);
    outShape.push_back(w->out[i]);
  }
  SmallVector<int64_t> wView = {group, mg, cg};
  wView.append(kernel.begin(), kernel.end());
  Value weight = buildReshape(b, loc, ctx.operand(1), wView);
  SmallVector<utils::IteratorType> iterators(3 + spatialRank,
                                             utils::IteratorType::parallel);
  iterators.append(1 + spatialRank, utils::IteratorType::reduction);
  Value init = createFilled(b, loc, outShape, elementType, 0.0);
  SmallVector<AffineMap> maps = {AffineMap::get(numLoops, 0, xExprs, mctx),
                                 AffineMap::get(numLoops, 0, wExprs, mctx),
                                 AffineMap::get(numLoops, 0, outExprs, mctx)};
  Value conv = linalg::GenericOp::create(
                   b, loc, init.getType(), ValueRange{input, weight}, init,
                   maps, iterators,
                   [](OpBuilder &nb, Location nloc, ValueRange args) {
                     Value p =
                         arith::MulFOp::create(nb, nloc, args[0], args[1]);
                     Value sum = arith::AddFOp::create(nb, nloc, args[2], p);
                     linalg::YieldOp::create(nb, nloc, sum);
                   })
                   .getResult(0);
  SmallVector<int64_t> resultShape = {x.shape[0], m};
  resultShape.append(w->out.begin(), w->out.end());
  Value result = buildReshape(b, loc, conv, resultShape);
  if (ctx.hasInput(2)) {
    if (ctx.input(2).shape != SmallVector<int64_t>{m})
      return ctx.emitError() << "bias " << formatShape(ctx.input(2).shape)
                             << " must be [" << m << "]";
    Value bias = channelView(b, loc, ctx.operand(2), spatialRank);
    result = buildElementwise(
        b, loc, ValueRange{result, bias}, resultShape, elementType,
        [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
          return arith::AddFOp::create(nb, nloc, s[0], s[1]);
        });
  }
  ctx.setResult(0, result, x.dtype);
  return success();
}

/// How many taps of each output position's window fall inside the input
/// (AveragePool with count_include_pad = 0).
ConstTensor countTaps(ArrayRef<int64_t> spatial, const Window &w, DType dtype) {
  ConstTensor c;
  c.dtype = dtype;
  c.shape.assign(w.out.begin(), w.out.end());
  c.allocate();
  SmallVector<int64_t> strides = getStrides(c.shape);
  for (int64_t flat = 0, e = c.numel(); flat < e; ++flat) {
    double count = 1;
    for (size_t d = 0; d < spatial.size(); ++d) {
      int64_t o = (flat / strides[d]) % c.shape[d], taps = 0;
      for (int64_t k = 0; k < w.kernel[d]; ++k) {
        int64_t pos = o * w.strides[d] + k * w.dilations[d] - w.padBegin[d];
        taps += pos >= 0 && pos < spatial[d];
      }
      count *= taps;
    }
    c.floats[flat] = count;
  }
  return c;
}

LogicalResult convertPool(NodeContext &ctx, bool isMax) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank < 3)
    return ctx.emitError() << "expects [N, C, spatial...], got "
                           << formatShape(x.shape);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "input must be floating point";
  if (isMax && ctx.hasOutput(1))
    return ctx.emitError() << "the Indices output is not supported";
  auto kernel = ctx.attrInts("kernel_shape");
  if (!kernel)
    return ctx.emitError() << "needs kernel_shape";
  ArrayRef<int64_t> spatial = ArrayRef<int64_t>(x.shape).drop_front(2);
  FailureOr<Window> w =
      getWindow(ctx, spatial, *kernel, ctx.attrInt("ceil_mode", 0));
  if (failed(w))
    return failure();
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  MLIRContext *mctx = b.getContext();
  double lowest = -std::numeric_limits<double>::infinity();
  Value input = padSpatial(b, loc, ctx.operand(0), *w, isMax ? lowest : 0.0);
  Type elementType = getTensorType(input).getElementType();
  int64_t spatialRank = rank - 2, numLoops = 2 + 2 * spatialRank;
  auto dim = [&](int64_t i) { return getAffineDimExpr(i, mctx); };
  SmallVector<AffineExpr> xExprs = {dim(0), dim(1)}, kExprs,
                          outExprs = {dim(0), dim(1)};
  SmallVector<int64_t> outShape = {x.shape[0], x.shape[1]};
  for (int64_t i = 0; i < spatialRank; ++i) {
    AffineExpr o = dim(2 + i), k = dim(2 + spatialRank + i);
    xExprs.push_back(o * w->strides[i] + k * w->dilations[i]);
    kExprs.push_back(k);
    outExprs.push_back(o);
    outShape.push_back(w->out[i]);
  }
  Value window = createEmpty(b, loc, w->kernel, elementType);
  SmallVector<AffineMap> maps = {AffineMap::get(numLoops, 0, xExprs, mctx),
                                 AffineMap::get(numLoops, 0, kExprs, mctx),
                                 AffineMap::get(numLoops, 0, outExprs, mctx)};
  SmallVector<utils::IteratorType> iterators(2 + spatialRank,
                                             utils::IteratorType::parallel);
  iterators.append(spatialRank, utils::IteratorType::reduction);
  Value init =
      createFilled(b, loc, outShape, elementType, isMax ? lowest : 0.0);
  Value result = linalg::GenericOp::create(
                     b, loc, init.getType(), ValueRange{input, window}, init,
                     maps, iterators,
                     [&](OpBuilder &nb, Location nloc, ValueRange args) {
                       Value v = isMax ? createMax(nb, nloc, args[2], args[0])
                                       : createAdd(nb, nloc, args[2], args[0]);
                       linalg::YieldOp::create(nb, nloc, v);
                     })
                     .getResult(0);
  if (!isMax) {
    Value divisor;
    // With count_include_pad, or where every window lies inside the input,
    // each window counts all its taps: one rank-0 constant (an arith
    // constant, which sharding propagation sees through), not a tensor per
    // output position.
    if (ctx.attrInt("count_include_pad", 0) ||
        llvm::all_of(llvm::seq<size_t>(0, spatial.size()), [&](size_t d) {
          return w->padBegin[d] == 0 &&
                 (w->out[d] - 1) * w->strides[d] +
                         (w->kernel[d] - 1) * w->dilations[d] <
                     spatial[d];
        })) {
      ConstTensor taps;
      taps.dtype = x.dtype;
      taps.allocate();
      taps.floats[0] = getNumElements(w->kernel);
      divisor = materializeConstant(b, loc, taps);
    } else {
      std::optional<int64_t> positions = getCheckedNumElements(w->out);
      if (!positions || *positions > kMaxConstantElements)
        return ctx.emitError()
               << "AveragePool over " << formatShape(spatial)
               << " with padding needs a divisor per output position; "
               << formatShape(w->out) << " is more than "
               << kMaxConstantElements << " positions";
      divisor = materializeConstant(b, loc, countTaps(spatial, *w, x.dtype));
    }
    result = buildElementwise(
        b, loc, ValueRange{result, divisor}, outShape, elementType,
        [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
          return arith::DivFOp::create(nb, nloc, s[0], s[1]);
        });
  }
  ctx.setResult(0, result, x.dtype);
  return success();
}

LogicalResult convertGlobalPool(NodeContext &ctx, bool isMax) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank < 3)
    return ctx.emitError() << "expects [N, C, spatial...], got "
                           << formatShape(x.shape);
  SmallVector<int64_t> axes;
  int64_t n = 1;
  for (int64_t d = 2; d < rank; ++d) {
    axes.push_back(d);
    n *= x.shape[d];
  }
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value result =
      buildReduction(b, loc, ctx.operand(0), axes, /*keepDims=*/true,
                     isMax ? -std::numeric_limits<double>::infinity() : 0.0,
                     [&](OpBuilder &nb, Location nloc, Value acc, Value v) {
                       return isMax ? createMax(nb, nloc, acc, v)
                                    : createAdd(nb, nloc, acc, v);
                     });
  if (!isMax) {
    auto type = getTensorType(result);
    result = buildElementwise(
        b, loc, result, type.getShape(), type.getElementType(),
        [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
          return arith::DivFOp::create(
              nb, nloc, s[0], createScalar(nb, nloc, s[0].getType(), n));
        });
  }
  ctx.setResult(0, result, x.dtype);
  return success();
}

LogicalResult convertBatchNorm(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank < 2)
    return ctx.emitError() << "expects [N, C, ...], got "
                           << formatShape(x.shape);
  if (ctx.attrInt("training_mode", 0) || ctx.getNumOutputs() > 1)
    return ctx.emitError() << "only inference mode (one output) is supported";
  for (unsigned i = 1; i < 5; ++i)
    if (ctx.input(i).shape != SmallVector<int64_t>{x.shape[1]})
      return ctx.emitError()
             << "input " << i << " " << formatShape(ctx.input(i).shape)
             << " must be [" << x.shape[1] << "]";
  double epsilon = ctx.attrFloat("epsilon", 1e-5f);
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  SmallVector<Value> operands = {ctx.operand(0)};
  for (unsigned i = 1; i < 5; ++i)
    operands.push_back(channelView(b, loc, ctx.operand(i), rank - 2));
  Type elementType = getTensorType(operands[0]).getElementType();
  Value result = buildElementwise(
      b, loc, operands, x.shape, elementType,
      [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
        // (x - mean) * scale / sqrt(var + eps) + bias
        Value centered = arith::SubFOp::create(nb, nloc, s[0], s[3]);
        Value inv = math::RsqrtOp::create(
            nb, nloc,
            arith::AddFOp::create(
                nb, nloc, s[4], createScalar(nb, nloc, elementType, epsilon)));
        Value scaled = arith::MulFOp::create(
            nb, nloc, centered, arith::MulFOp::create(nb, nloc, s[1], inv));
        return arith::AddFOp::create(nb, nloc, scaled, s[2]);
      });
  ctx.setResult(0, result, x.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateConvConverters(ConverterMap &map) {
  map["Conv"] = convertConv;
  map["MaxPool"] = [](NodeContext &ctx) { return convertPool(ctx, true); };
  map["AveragePool"] = [](NodeContext &ctx) { return convertPool(ctx, false); };
  map["GlobalAveragePool"] = [](NodeContext &ctx) {
    return convertGlobalPool(ctx, false);
  };
  map["GlobalMaxPool"] = [](NodeContext &ctx) {
    return convertGlobalPool(ctx, true);
  };
  map["BatchNormalization"] = convertBatchNorm;
}
