//===- TopKOps.cpp - ONNX TopK, OneHot, ScatterElements
//--------------------===//
//
// The ops of a mixture-of-experts router (docs/design/moe-import.md): TopK
// of the router's probabilities, OneHot of the picked experts, and the
// ScatterElements that writes an expert's rows back. TopK is computed
// without sorting, as a rank per element (static shapes, single-result
// generics the planner and emitters read). ScatterElements with indices
// known at import and no reduction refuses a repeated target (an
// index_add_ exported without its sum); otherwise a reduction generic.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

/// TopK's rank form compares every pair along the axis: O(n²) per slice.
constexpr int64_t kMaxTopKAxis = 4096;

/// The maps of a generic over `rank + 1` loops that reads a tensor of
/// `rank` dims with its dim `axis` bound to the extra (last) loop.
AffineMap mapWithAxisOnLastLoop(MLIRContext *ctx, int64_t rank, int64_t axis) {
  SmallVector<AffineExpr> exprs;
  for (int64_t d = 0; d < rank; ++d)
    exprs.push_back(getAffineDimExpr(d == axis ? rank : d, ctx));
  return AffineMap::get(rank + 1, 0, exprs, ctx);
}

/// TopK: rank(i) = #{j : x[j] beats x[i], or ties it with j < i} along the
/// axis (beats: greater, or smaller when largest = 0), so the lower index
/// comes first among equals, as ONNX says; then output j reads the element
/// of rank j. Results are always sorted (ONNX allows any order with
/// sorted = 0). A NaN compares false with everything, so slices holding
/// NaN may leave some ranks unmatched (value 0, index 0): NaN follows ONNX
/// loosely.
LogicalResult convertTopK(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank == 0)
    return ctx.emitError() << "input must have rank >= 1";
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", -1), rank);
  if (!axis)
    return failure();
  int64_t k;
  if (ctx.opset < 10) {
    k = ctx.attrInt("k", -1);
  } else {
    auto ks = ctx.constInts(1, "k");
    if (!ks)
      return failure();
    if (ks->size() != 1)
      return ctx.emitError() << "k must hold one value, got " << ks->size();
    k = (*ks)[0];
  }
  int64_t n = x.shape[*axis];
  if (k < 0 || k > n)
    return ctx.emitError() << "k = " << k << " is out of range for axis "
                           << *axis << " of size " << n;
  if (n > kMaxTopKAxis)
    return ctx.emitError() << "axis " << *axis << " has " << n
                           << " elements; TopK compares every pair, which is "
                              "supported up to "
                           << kMaxTopKAxis;
  bool largest = ctx.attrInt("largest", 1) != 0;

  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  MLIRContext *mctx = b.getContext();
  Value input = ctx.operand(0);
  Type i64 = b.getI64Type();
  bool isFloat = isa<FloatType>(getTensorType(input).getElementType());
  bool isUnsigned = isUnsignedDType(x.dtype);
  AffineMap identity = AffineMap::getMultiDimIdentityMap(rank + 1, mctx);
  AffineMap own = identity.getMajorSubMap(rank);
  AffineMap other = mapWithAxisOnLastLoop(mctx, rank, *axis);
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);

  // ranks[.., i, ..] = the number of elements ahead of x[.., i, ..].
  Value zeros = createFilled(b, loc, x.shape, i64, 0.0);
  Value ranks =
      linalg::GenericOp::create(
          b, loc, zeros.getType(), ValueRange{input, input}, zeros,
          ArrayRef<AffineMap>{own, other, own}, iterators,
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Value v = args[0], w = args[1], acc = args[2];
            Value beats, equal;
            if (isFloat) {
              beats = arith::CmpFOp::create(nb, nloc,
                                            largest ? arith::CmpFPredicate::OGT
                                                    : arith::CmpFPredicate::OLT,
                                            w, v);
              equal = arith::CmpFOp::create(nb, nloc, arith::CmpFPredicate::OEQ,
                                            w, v);
            } else {
              arith::CmpIPredicate gt = isUnsigned ? arith::CmpIPredicate::ugt
                                                   : arith::CmpIPredicate::sgt;
              arith::CmpIPredicate lt = isUnsigned ? arith::CmpIPredicate::ult
                                                   : arith::CmpIPredicate::slt;
              beats = arith::CmpIOp::create(nb, nloc, largest ? gt : lt, w, v);
              equal = arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq,
                                            w, v);
            }
            Value i = linalg::IndexOp::create(nb, nloc, *axis);
            Value j = linalg::IndexOp::create(nb, nloc, rank);
            Value before = arith::CmpIOp::create(
                nb, nloc, arith::CmpIPredicate::ult, j, i);
            Value tie = arith::AndIOp::create(nb, nloc, equal, before);
            Value ahead = arith::OrIOp::create(nb, nloc, beats, tie);
            Value one = arith::ExtUIOp::create(nb, nloc, i64, ahead);
            linalg::YieldOp::create(
                nb, nloc,
                arith::AddIOp::create(nb, nloc, acc, one).getResult());
          })
          .getResult(0);

  // Output j along the axis: the element (or index) whose rank is j.
  SmallVector<int64_t> outShape(x.shape);
  outShape[*axis] = k;
  auto pick = [&](bool index) {
    Type type = index ? Type(i64) : getTensorType(input).getElementType();
    Value init = createFilled(b, loc, outShape, type, 0.0);
    return linalg::GenericOp::create(
               b, loc, init.getType(), ValueRange{input, ranks}, init,
               ArrayRef<AffineMap>{other, other, own}, iterators,
               [&](OpBuilder &nb, Location nloc, ValueRange args) {
                 Value v = args[0], r = args[1], acc = args[2];
                 Value j = arith::IndexCastOp::create(
                     nb, nloc, i64, linalg::IndexOp::create(nb, nloc, *axis));
                 Value hit = arith::CmpIOp::create(
                     nb, nloc, arith::CmpIPredicate::eq, r, j);
                 Value picked = v;
                 if (index)
                   picked = arith::IndexCastOp::create(
                       nb, nloc, i64, linalg::IndexOp::create(nb, nloc, rank));
                 linalg::YieldOp::create(
                     nb, nloc,
                     arith::SelectOp::create(nb, nloc, hit, picked, acc)
                         .getResult());
               })
        .getResult(0);
  };
  if (ctx.hasOutput(0))
    ctx.setResult(0, pick(false), x.dtype);
  if (ctx.hasOutput(1))
    ctx.setResult(1, pick(true), onnx::TensorProto::INT64);
  return success();
}

/// OneHot: out[.., d, ..] = on where indices[..] (wrapped by depth when
/// negative) equals d, else off; d is a new dim at `axis`. Indices out of
/// [-depth, depth) give a row of off.
LogicalResult convertOneHot(NodeContext &ctx) {
  const ImportedValue &indices = ctx.input(0);
  const ImportedValue &values = ctx.input(2);
  int64_t rank = indices.shape.size();
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", -1), rank + 1);
  if (!axis)
    return failure();
  const ConstTensor *depthConst = ctx.constInput(1);
  if (!depthConst)
    return ctx.emitError() << "depth (input 1) must be known at import time";
  if (depthConst->numel() != 1)
    return ctx.emitError() << "depth (input 1) must be one value, got "
                           << depthConst->numel();
  int64_t depth = depthConst->isFloat()
                      ? truncToInt64(depthConst->getAsDouble(0))
                      : depthConst->getAsInt(0);
  if (depth <= 0)
    return ctx.emitError() << "depth must be positive, got " << depth;
  if (getNumElements(values.shape) != 2)
    return ctx.emitError() << "values (input 2) must hold [off, on], got "
                           << formatShape(values.shape);
  SmallVector<int64_t> outShape(indices.shape);
  outShape.insert(outShape.begin() + *axis, depth);

  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  MLIRContext *mctx = b.getContext();
  Value idx = ctx.operand(0);
  Value vals = buildReshape(b, loc, ctx.operand(2), {2});
  Type elementType = getTensorType(vals).getElementType();
  Type i64 = b.getI64Type();
  bool idxFloat = isFloatDType(indices.dtype);
  bool idxUnsigned = isUnsignedDType(indices.dtype);
  SmallVector<AffineExpr> exprs;
  for (int64_t d = 0; d <= rank; ++d)
    if (d != *axis)
      exprs.push_back(getAffineDimExpr(d, mctx));
  AffineMap idxMap = AffineMap::get(rank + 1, 0, exprs, mctx);
  Value init = createEmpty(b, loc, outShape, elementType);
  SmallVector<utils::IteratorType> iterators(rank + 1,
                                             utils::IteratorType::parallel);
  Value result =
      linalg::GenericOp::create(
          b, loc, init.getType(), ValueRange{idx}, init,
          ArrayRef<AffineMap>{idxMap, b.getMultiDimIdentityMap(rank + 1)},
          iterators,
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Value i = args[0];
            i = idxFloat ? castScalar(nb, nloc, i, i64, false)
                         : castScalar(nb, nloc, i, i64, idxUnsigned);
            Value n = createScalar(nb, nloc, i64, double(depth));
            Value zero = createScalar(nb, nloc, i64, 0.0);
            Value negative = arith::CmpIOp::create(
                nb, nloc, arith::CmpIPredicate::slt, i, zero);
            Value wrapped = arith::SelectOp::create(
                nb, nloc, negative, arith::AddIOp::create(nb, nloc, i, n), i);
            Value d = arith::IndexCastOp::create(
                nb, nloc, i64, linalg::IndexOp::create(nb, nloc, *axis));
            Value hit = arith::CmpIOp::create(
                nb, nloc, arith::CmpIPredicate::eq, wrapped, d);
            Value off = tensor::ExtractOp::create(
                nb, nloc, vals,
                ValueRange{arith::ConstantIndexOp::create(nb, nloc, 0)});
            Value on = tensor::ExtractOp::create(
                nb, nloc, vals,
                ValueRange{arith::ConstantIndexOp::create(nb, nloc, 1)});
            linalg::YieldOp::create(
                nb, nloc,
                arith::SelectOp::create(nb, nloc, hit, on, off).getResult());
          })
          .getResult(0);
  ctx.setResult(0, result, values.dtype);
  return success();
}

/// ScatterElements with indices known only at run time, or a reduction:
/// out[p] combines data[p] with every update whose index targets p, in
/// order (the last wins without a reduction, as onnxruntime does; ONNX
/// leaves repeats undefined there). One generic over data's dims and the
/// scattered dim of the updates as a reduction loop; indices must span
/// data on the other dims.
LogicalResult convertRunTimeScatter(NodeContext &ctx, int64_t axis,
                                    StringRef reduction) {
  const ImportedValue &data = ctx.input(0);
  const ImportedValue &indices = ctx.input(1);
  int64_t rank = data.shape.size();
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.shape[d] != data.shape[d])
      return ctx.emitError()
             << "indices " << formatShape(indices.shape) << " must span data "
             << formatShape(data.shape)
             << " on every dim but the axis when they are known only at run "
                "time";
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  MLIRContext *mctx = b.getContext();
  AffineMap own =
      AffineMap::getMultiDimIdentityMap(rank + 1, mctx).getMajorSubMap(rank);
  AffineMap other = mapWithAxisOnLastLoop(mctx, rank, axis);
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  Value dataValue = ctx.operand(0);
  bool isFloat = isa<FloatType>(getTensorType(dataValue).getElementType());
  bool idxUnsigned = isUnsignedDType(indices.dtype);
  int64_t dim = data.shape[axis];
  Value result =
      linalg::GenericOp::create(
          b, loc, dataValue.getType(),
          ValueRange{ctx.operand(1), ctx.operand(2)}, dataValue,
          ArrayRef<AffineMap>{other, other, own}, iterators,
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Type i64 = nb.getI64Type();
            Value i = castScalar(nb, nloc, args[0], i64, idxUnsigned);
            Value u = args[1], acc = args[2];
            Value zero = createScalar(nb, nloc, i64, 0.0);
            Value negative = arith::CmpIOp::create(
                nb, nloc, arith::CmpIPredicate::slt, i, zero);
            Value wrapped = arith::SelectOp::create(
                nb, nloc, negative,
                arith::AddIOp::create(nb, nloc, i,
                                      createScalar(nb, nloc, i64, dim)),
                i);
            Value at = arith::IndexCastOp::create(
                nb, nloc, i64, linalg::IndexOp::create(nb, nloc, axis));
            Value hit = arith::CmpIOp::create(
                nb, nloc, arith::CmpIPredicate::eq, wrapped, at);
            Value combined = u;
            if (reduction == "add")
              combined = createAdd(nb, nloc, acc, u);
            else if (reduction == "mul")
              combined = createMul(nb, nloc, acc, u);
            else if (reduction == "max")
              combined = createMax(nb, nloc, acc, u);
            else if (reduction == "min")
              combined =
                  isFloat ? Value(arith::MinimumFOp::create(nb, nloc, acc, u))
                          : Value(arith::MinSIOp::create(nb, nloc, acc, u));
            linalg::YieldOp::create(
                nb, nloc,
                arith::SelectOp::create(nb, nloc, hit, combined, acc)
                    .getResult());
          })
          .getResult(0);
  ctx.setResult(0, result, data.dtype);
  return success();
}

/// ScatterElements without a reduction, with indices known at import:
/// out = data with out[idx with dim `axis` = indices[idx]] = updates[idx].
/// A repeated target has no defined winner in ONNX, and the exports that
/// have one (index_add_ over repeated tokens) mean a sum: refused. Where
/// the indices write every element once in place (the dense routing of
/// DenseRouting.cpp), the result is `updates` itself.
LogicalResult convertScatterElements(NodeContext &ctx) {
  const ImportedValue &data = ctx.input(0);
  const ImportedValue &indices = ctx.input(1);
  const ImportedValue &updates = ctx.input(2);
  int64_t rank = data.shape.size();
  if (rank == 0)
    return ctx.emitError() << "data must have rank >= 1";
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  std::string reduction = ctx.attrString("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return ctx.emitError() << "unknown reduction '" << reduction << "'";
  if (indices.shape != updates.shape ||
      static_cast<int64_t>(indices.shape.size()) != rank)
    return ctx.emitError() << "indices " << formatShape(indices.shape)
                           << " and updates " << formatShape(updates.shape)
                           << " must have one shape, of the rank of data "
                           << formatShape(data.shape);
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices.shape[d] > data.shape[d])
      return ctx.emitError()
             << "indices " << formatShape(indices.shape) << " exceed data "
             << formatShape(data.shape) << " on dim " << d;
  if (!indices.constant || reduction != "none")
    return convertRunTimeScatter(ctx, *axis, reduction);
  if (getNumElements(indices.shape) == 0) {
    ctx.setValue(0, data);
    return success();
  }
  // source[p] = the flat position in updates written to data's p, or -1.
  const ConstTensor &idx = *indices.constant;
  SmallVector<int64_t> dataStrides = getStrides(data.shape);
  SmallVector<int64_t> updStrides = getStrides(updates.shape);
  int64_t dataCount = getNumElements(data.shape);
  std::vector<int64_t> source(dataCount, -1);
  int64_t dim = data.shape[*axis];
  bool inPlace = updates.shape == data.shape;
  for (int64_t u = 0, e = idx.numel(); u < e; ++u) {
    int64_t i = idx.getAsInt(u);
    if (i < -dim || i >= dim)
      return ctx.emitError() << "index " << i << " is out of range for dim "
                             << *axis << " of size " << dim;
    if (i < 0)
      i += dim;
    int64_t p = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t c = (u / updStrides[d]) % updates.shape[d];
      p += (d == *axis ? i : c) * dataStrides[d];
    }
    if (source[p] >= 0)
      return ctx.emitError()
             << "indices write element " << p << " of data twice; without a "
             << "reduction ONNX leaves the result undefined (an index_add_ "
                "over repeated indices exports this way and means a sum)";
    source[p] = u;
    inPlace &= p == u;
  }
  if (inPlace) {
    ctx.setValue(0, updates);
    return success();
  }

  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  ConstTensor sourceConst;
  sourceConst.dtype = onnx::TensorProto::INT64;
  sourceConst.shape.assign(data.shape.begin(), data.shape.end());
  sourceConst.ints = std::move(source);
  Value sourceTensor = materializeConstant(b, loc, sourceConst);
  Value upd = ctx.operand(2);
  Value dataValue = ctx.operand(0);
  Value init = createEmpty(b, loc, data.shape,
                           getTensorType(dataValue).getElementType());
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  AffineMap id = b.getMultiDimIdentityMap(rank);
  Value result =
      linalg::GenericOp::create(
          b, loc, init.getType(), ValueRange{dataValue, sourceTensor}, init,
          ArrayRef<AffineMap>{id, id, id}, iterators,
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Value old = args[0], src = args[1];
            Type i64 = nb.getI64Type();
            Value zero = createScalar(nb, nloc, i64, 0.0);
            Value written = arith::CmpIOp::create(
                nb, nloc, arith::CmpIPredicate::sge, src, zero);
            Value flat = arith::IndexCastOp::create(
                nb, nloc, nb.getIndexType(),
                arith::MaxSIOp::create(nb, nloc, src, zero));
            SmallVector<Value> at;
            for (int64_t d = 0; d < rank; ++d) {
              Value q = arith::DivUIOp::create(
                  nb, nloc, flat,
                  arith::ConstantIndexOp::create(nb, nloc, updStrides[d]));
              at.push_back(arith::RemUIOp::create(
                  nb, nloc, q,
                  arith::ConstantIndexOp::create(nb, nloc, updates.shape[d])));
            }
            Value v = tensor::ExtractOp::create(nb, nloc, upd, at);
            linalg::YieldOp::create(
                nb, nloc,
                arith::SelectOp::create(nb, nloc, written, v, old).getResult());
          })
          .getResult(0);
  ctx.setResult(0, result, data.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateTopKConverters(ConverterMap &map) {
  map["TopK"] = convertTopK;
  map["OneHot"] = convertOneHot;
  map["ScatterElements"] = convertScatterElements;
}
