//===- IndexingOps.cpp - ONNX CumSum, Tile, GatherElements, ScatterND -----===//
//
// Ops that real exports use for positions and masks: OPT's and RoBERTa's
// position ids (CumSum over a mask), GPT-J's position table (Tile,
// GatherElements), transformers' causal-mask slice assignment (ScatterND).
// Each folds when its inputs are known at import; otherwise it becomes a
// structured op: a linalg.generic (for Tile a broadcast and a collapse), or
// tensor.insert_slice for a scatter into a box.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

Value indexConst(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// The multi-index of `flat` in `shape`.
SmallVector<int64_t> unravel(int64_t flat, ArrayRef<int64_t> shape) {
  SmallVector<int64_t> index(shape.size());
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return index;
}

/// A constant scalar (or one-element) integer input.
std::optional<int64_t> constScalar(NodeContext &ctx, unsigned i,
                                   StringRef what) {
  auto v = ctx.constInts(i, what);
  if (!v)
    return std::nullopt;
  if (v->size() != 1) {
    ctx.emitError() << "the " << what << " (input " << i
                    << ") must be a scalar, got " << v->size() << " values";
    return std::nullopt;
  }
  return (*v)[0];
}

/// CumSum: out[.., i, ..] = sum over j of x[.., j, ..] with j <= i (j < i
/// when exclusive; j >= i / j > i when reversed). At run time this is one
/// generic with the scanned dim as a reduction loop, which adds x in the
/// same order a sequential scan does.
LogicalResult convertCumSum(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank == 0)
    return ctx.emitError() << "input must have rank >= 1";
  std::optional<int64_t> axisValue = constScalar(ctx, 1, "axis");
  if (!axisValue)
    return failure();
  auto axis = ctx.normalizeAxis(*axisValue, rank);
  if (!axis)
    return failure();
  bool exclusive = ctx.attrInt("exclusive", 0);
  bool reverse = ctx.attrInt("reverse", 0);
  auto included = [&](int64_t i, int64_t j) {
    if (reverse)
      return exclusive ? j > i : j >= i;
    return exclusive ? j < i : j <= i;
  };
  int64_t n = x.shape[*axis];
  if (x.constant && x.constant->numel() <= maxFoldedElements()) {
    ConstTensor r = *x.constant;
    SmallVector<int64_t> strides = getStrides(x.shape);
    for (int64_t flat = 0, e = r.numel(); flat < e; ++flat) {
      int64_t i = (flat / strides[*axis]) % n;
      int64_t base = flat - i * strides[*axis];
      double fsum = 0;
      int64_t isum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (!included(i, j))
          continue;
        int64_t src = base + j * strides[*axis];
        if (r.isFloat())
          fsum += x.constant->floats[src];
        else
          isum += x.constant->ints[src];
      }
      if (r.isFloat())
        r.floats[flat] = fsum;
      else
        r.ints[flat] = isum;
    }
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  OpBuilder &b = ctx.b;
  MLIRContext *mctx = b.getContext();
  Value input = ctx.operand(0);
  Type elementType = getTensorType(input).getElementType();
  // Loops: the result dims, then j (reduction) over the scanned dim.
  SmallVector<AffineExpr> inExprs, outExprs;
  for (int64_t d = 0; d < rank; ++d) {
    outExprs.push_back(getAffineDimExpr(d, mctx));
    inExprs.push_back(getAffineDimExpr(d == *axis ? rank : d, mctx));
  }
  SmallVector<AffineMap> maps = {AffineMap::get(rank + 1, 0, inExprs, mctx),
                                 AffineMap::get(rank + 1, 0, outExprs, mctx)};
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  Value init = createFilled(b, ctx.loc, x.shape, elementType, 0.0);
  arith::CmpIPredicate pred =
      reverse
          ? (exclusive ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::uge)
          : (exclusive ? arith::CmpIPredicate::ult : arith::CmpIPredicate::ule);
  auto generic = linalg::GenericOp::create(
      b, ctx.loc, init.getType(), ValueRange{input}, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value i = linalg::IndexOp::create(nb, nloc, *axis);
        Value j = linalg::IndexOp::create(nb, nloc, rank);
        Value in = arith::CmpIOp::create(nb, nloc, pred, j, i);
        Value term = arith::SelectOp::create(
            nb, nloc, in, args[0], createScalar(nb, nloc, elementType, 0.0));
        linalg::YieldOp::create(nb, nloc, createAdd(nb, nloc, args[1], term));
      });
  ctx.setResult(0, generic.getResult(0), x.dtype);
  return success();
}

/// Tile repeats the input `repeats[d]` times along each dim d.
LogicalResult convertTile(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  auto repeats = ctx.constInts(1, "repeats");
  if (!repeats)
    return failure();
  if (static_cast<int64_t>(repeats->size()) != rank)
    return ctx.emitError() << "repeats " << formatShape(*repeats)
                           << " must have one value per dim of input "
                           << formatShape(x.shape);
  SmallVector<int64_t> shape;
  for (auto [d, r] : llvm::enumerate(*repeats)) {
    if (r < 0)
      return ctx.emitError()
             << "repeats " << formatShape(*repeats) << " has a negative value";
    shape.push_back(x.shape[d] * r);
  }
  if (x.constant && getNumElements(shape) <= maxFoldedElements()) {
    SmallVector<int64_t> strides = getStrides(x.shape);
    ctx.setConstResult(
        0, foldByIndex(*x.constant, shape, [&](ArrayRef<int64_t> idx) {
          int64_t src = 0;
          for (int64_t d = 0; d < rank; ++d)
            src += (idx[d] % x.shape[d]) * strides[d];
          return src;
        }));
    return success();
  }
  Value input = ctx.operand(0);
  Type elementType = getTensorType(input).getElementType();
  if (getNumElements(shape) == 0) {
    ctx.setResult(0, createEmpty(ctx.b, ctx.loc, shape, elementType), x.dtype);
    return success();
  }
  // Tile is a broadcast: dim d of size s repeated r > 1 times is the
  // collapse of [r, s], the input broadcast along a new dim r. So one
  // generic broadcasts the input to those pairs and a collapse merges them:
  // a broadcast and a view, which the planner splits like any other (a
  // size-1 dim repeated is a plain broadcast dim; one repeated once stays).
  MLIRContext *mctx = ctx.b.getContext();
  SmallVector<int64_t> kept, pairShape;
  SmallVector<AffineExpr> inExprs;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t r = (*repeats)[d], size = x.shape[d];
    if (r > 1)
      pairShape.push_back(r);
    if (r > 1 && size == 1)
      continue;
    inExprs.push_back(getAffineDimExpr(pairShape.size(), mctx));
    kept.push_back(size);
    pairShape.push_back(size);
  }
  int64_t loops = pairShape.size();
  SmallVector<AffineMap> maps = {AffineMap::get(loops, 0, inExprs, mctx),
                                 ctx.b.getMultiDimIdentityMap(loops)};
  SmallVector<utils::IteratorType> iterators(loops,
                                             utils::IteratorType::parallel);
  Value init = createEmpty(ctx.b, ctx.loc, pairShape, elementType);
  auto broadcast = linalg::GenericOp::create(
      ctx.b, ctx.loc, init.getType(), buildReshape(ctx.b, ctx.loc, input, kept),
      init, maps, iterators, [](OpBuilder &nb, Location nloc, ValueRange args) {
        linalg::YieldOp::create(nb, nloc, args[0]);
      });
  Value result = buildReshape(ctx.b, ctx.loc, broadcast.getResult(0), shape);
  ctx.setResult(0, result, x.dtype);
  return success();
}

/// GatherElements of float data in the lookup form the embedding has:
/// out[i] = sum_k (indices[i] == k ? data[i with `axis` -> k] : 0), with k
/// a reduction loop. Exactly one term is non-zero (none for an index out of
/// range), so the sum is the element itself; what the form buys is data as
/// an operand whose other dims are loops like any op's, which unflattening
/// and the planner split (a gather along the relative positions of
/// [batch*heads, seq, 2*span] scores splits by heads), and which code
/// generation emits as a gather (matchLookup).
Value buildElementLookup(NodeContext &ctx, Value indices, int64_t axis,
                         bool checkNegative) {
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value data = ctx.operand(0);
  auto dataType = getTensorType(data);
  ArrayRef<int64_t> shape = ctx.input(1).shape;
  int64_t rank = shape.size(), dim = dataType.getDimSize(axis);
  // Data beyond the indices' extent on the other dims is never read.
  SmallVector<int64_t> box(shape);
  box[axis] = dim;
  if (ArrayRef<int64_t>(box) != dataType.getShape()) {
    SmallVector<int64_t> offsets(rank, 0), strides(rank, 1);
    auto type = RankedTensorType::get(box, dataType.getElementType());
    data = tensor::ExtractSliceOp::create(b, loc, type, data, ValueRange{},
                                          ValueRange{}, ValueRange{}, offsets,
                                          box, strides);
  }
  MLIRContext *mctx = b.getContext();
  SmallVector<AffineExpr> outExprs, dataExprs;
  for (int64_t d = 0; d < rank; ++d) {
    outExprs.push_back(getAffineDimExpr(d, mctx));
    dataExprs.push_back(getAffineDimExpr(d == axis ? rank : d, mctx));
  }
  AffineMap outMap = AffineMap::get(rank + 1, 0, outExprs, mctx);
  SmallVector<AffineMap> maps = {
      outMap, AffineMap::get(rank + 1, 0, dataExprs, mctx), outMap};
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  Type elementType = dataType.getElementType();
  Value init = createFilled(b, loc, shape, elementType, 0.0);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), ValueRange{indices, data}, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value i =
            arith::IndexCastOp::create(nb, nloc, nb.getIndexType(), args[0]);
        if (checkNegative) {
          Value negative = arith::CmpIOp::create(
              nb, nloc, arith::CmpIPredicate::slt, i, indexConst(nb, nloc, 0));
          i = arith::SelectOp::create(
              nb, nloc, negative,
              arith::AddIOp::create(nb, nloc, i, indexConst(nb, nloc, dim)), i);
        }
        Value k = linalg::IndexOp::create(nb, nloc, rank);
        Value hit =
            arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq, i, k);
        Value term = arith::SelectOp::create(
            nb, nloc, hit, args[1], createScalar(nb, nloc, elementType, 0.0));
        linalg::YieldOp::create(nb, nloc, createAdd(nb, nloc, args[2], term));
      });
  return generic.getResult(0);
}

/// GatherElements: out[i] = data[i with dim `axis` replaced by indices[i]].
LogicalResult convertGatherElements(NodeContext &ctx) {
  const ImportedValue &data = ctx.input(0);
  const ImportedValue &indices = ctx.input(1);
  int64_t rank = data.shape.size();
  if (rank == 0)
    return ctx.emitError() << "data must have rank >= 1";
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  if (isFloatDType(indices.dtype))
    return ctx.emitError() << "indices must be integers, got "
                           << dtypeName(indices.dtype);
  if (static_cast<int64_t>(indices.shape.size()) != rank)
    return ctx.emitError() << "indices " << formatShape(indices.shape)
                           << " must have the rank of data "
                           << formatShape(data.shape);
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices.shape[d] > data.shape[d])
      return ctx.emitError()
             << "indices " << formatShape(indices.shape) << " exceed data "
             << formatShape(data.shape) << " on dim " << d;
  int64_t dim = data.shape[*axis];
  std::optional<ConstTensor> constIndices = indices.constant;
  if (constIndices) {
    for (int64_t &i : constIndices->ints) {
      if (i < -dim || i >= dim)
        return ctx.emitError() << "index " << i << " is out of range for dim "
                               << *axis << " of size " << dim;
      if (i < 0)
        i += dim;
    }
  }
  ArrayRef<int64_t> shape = indices.shape;
  if (data.constant && constIndices &&
      getNumElements(shape) <= maxFoldedElements()) {
    SmallVector<int64_t> strides = getStrides(data.shape);
    SmallVector<int64_t> idxStrides = getStrides(shape);
    ctx.setConstResult(
        0, foldByIndex(*data.constant, shape, [&](ArrayRef<int64_t> idx) {
          int64_t flatIdx = 0, src = 0;
          for (int64_t d = 0; d < rank; ++d)
            flatIdx += idx[d] * idxStrides[d];
          for (int64_t d = 0; d < rank; ++d)
            src += (d == *axis ? constIndices->ints[flatIdx] : idx[d]) *
                   strides[d];
          return src;
        }));
    return success();
  }
  Value idx = constIndices ? materializeConstant(ctx.b, ctx.loc, *constIndices)
                           : ctx.operand(1);
  if (isFloatDType(data.dtype)) {
    ctx.setResult(0, buildElementLookup(ctx, idx, *axis, !constIndices),
                  data.dtype);
    return success();
  }
  AffineMap identity = ctx.b.getMultiDimIdentityMap(rank);
  bool checkNegative = !constIndices;
  Value result = buildIndexedRead(
      ctx.b, ctx.loc, ctx.operand(0), idx, identity, shape,
      [&](OpBuilder &b, Location loc, ValueRange loops, ValueRange scalars) {
        Value i =
            arith::IndexCastOp::create(b, loc, b.getIndexType(), scalars[0]);
        if (checkNegative) {
          Value neg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                            i, indexConst(b, loc, 0));
          i = arith::SelectOp::create(
              b, loc, neg,
              arith::AddIOp::create(b, loc, i, indexConst(b, loc, dim)), i);
        }
        SmallVector<Value> index(loops);
        index[*axis] = i;
        return index;
      });
  ctx.setResult(0, result, data.dtype);
  return success();
}

/// More scattered slices than this, at run time, are refused.
constexpr int64_t kMaxScatterSlices = 64;

/// Inserts `source` into `dest` at `lo` (the leading dims; the rest at 0).
Value insertBox(NodeContext &ctx, Value dest, Value source,
                ArrayRef<int64_t> lo) {
  auto type = getTensorType(source);
  SmallVector<OpFoldResult> offsets, sizes, strides;
  for (int64_t d = 0, e = type.getRank(); d < e; ++d) {
    offsets.push_back(ctx.b.getIndexAttr(d < (int64_t)lo.size() ? lo[d] : 0));
    sizes.push_back(ctx.b.getIndexAttr(type.getDimSize(d)));
    strides.push_back(ctx.b.getIndexAttr(1));
  }
  return tensor::InsertSliceOp::create(ctx.b, ctx.loc, source, dest, offsets,
                                       sizes, strides);
}

/// A scatter whose index tuples enumerate a box in row-major order (a slice
/// assignment) as one tensor.insert_slice; null if they do not.
Value buildScatterBox(NodeContext &ctx, ArrayRef<int64_t> coords,
                      ArrayRef<int64_t> tupleShape,
                      ArrayRef<int64_t> sliceShape) {
  int64_t k = ctx.input(1).shape.back();
  int64_t tuples = getNumElements(tupleShape);
  SmallVector<int64_t> lo(k, std::numeric_limits<int64_t>::max()), extent(k);
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t d = 0; d < k; ++d)
      lo[d] = std::min(lo[d], coords[t * k + d]);
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t d = 0; d < k; ++d)
      extent[d] = std::max(extent[d], coords[t * k + d] - lo[d] + 1);
  if (getNumElements(extent) != tuples)
    return {};
  for (int64_t t = 0; t < tuples; ++t) {
    SmallVector<int64_t> at = unravel(t, extent);
    for (int64_t d = 0; d < k; ++d)
      if (coords[t * k + d] != lo[d] + at[d])
        return {};
  }
  SmallVector<int64_t> boxShape(extent);
  llvm::append_range(boxShape, sliceShape);
  Value source = buildReshape(ctx.b, ctx.loc, ctx.operand(2), boxShape);
  return insertBox(ctx, ctx.operand(0), source, lo);
}

/// ScatterND with known indices. All inputs known: folds. Otherwise a slice
/// assignment (`mask[:, :, :, :n] = ...`, index tuples enumerating a box) is
/// one tensor.insert_slice of the updates into the data, and a few scattered
/// slices are one insert_slice each.
LogicalResult convertScatterND(NodeContext &ctx) {
  const ImportedValue &data = ctx.input(0);
  const ImportedValue &indices = ctx.input(1);
  const ImportedValue &updates = ctx.input(2);
  int64_t rank = data.shape.size();
  std::string reduction = ctx.attrString("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return ctx.emitError() << "unknown reduction '" << reduction << "'";
  if (indices.shape.empty() || isFloatDType(indices.dtype))
    return ctx.emitError() << "indices must be integers of rank >= 1, got "
                           << dtypeName(indices.dtype)
                           << formatShape(indices.shape);
  int64_t k = indices.shape.back();
  if (k < 1 || k > rank)
    return ctx.emitError() << "indices' last dim " << k << " must be in [1, "
                           << rank << "] for data " << formatShape(data.shape);
  ArrayRef<int64_t> tupleShape = ArrayRef<int64_t>(indices.shape).drop_back();
  SmallVector<int64_t> sliceShape(data.shape.begin() + k, data.shape.end());
  SmallVector<int64_t> expected(tupleShape);
  llvm::append_range(expected, sliceShape);
  if (updates.shape != ArrayRef<int64_t>(expected))
    return ctx.emitError() << "updates " << formatShape(updates.shape)
                           << " must be " << formatShape(expected)
                           << " for indices " << formatShape(indices.shape)
                           << " into data " << formatShape(data.shape);
  if (updates.dtype != data.dtype)
    return ctx.emitError() << "updates " << dtypeName(updates.dtype)
                           << " do not match data " << dtypeName(data.dtype);
  if (!indices.constant)
    return ctx.emitError()
           << "the indices (input 1) must be known at import time: run-time "
              "scatter indices are not supported";
  // Normalize and check every index tuple.
  int64_t tuples = getNumElements(tupleShape);
  std::vector<int64_t> coords = indices.constant->ints;
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t d = 0; d < k; ++d) {
      int64_t &c = coords[t * k + d];
      if (c < -data.shape[d] || c >= data.shape[d])
        return ctx.emitError() << "index " << c << " is out of range for dim "
                               << d << " of size " << data.shape[d];
      if (c < 0)
        c += data.shape[d];
    }
  int64_t sliceSize = getNumElements(sliceShape);
  SmallVector<int64_t> strides = getStrides(data.shape);
  if (data.constant && updates.constant &&
      data.constant->numel() <= maxFoldedElements()) {
    ConstTensor r = *data.constant;
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t base = 0;
      for (int64_t d = 0; d < k; ++d)
        base += coords[t * k + d] * strides[d];
      for (int64_t s = 0; s < sliceSize; ++s) {
        int64_t dst = base + s, src = t * sliceSize + s;
        auto apply = [&](auto &out, auto u) {
          if (reduction == "add")
            out += u;
          else if (reduction == "mul")
            out *= u;
          else if (reduction == "max")
            out = std::max<std::decay_t<decltype(out)>>(out, u);
          else if (reduction == "min")
            out = std::min<std::decay_t<decltype(out)>>(out, u);
          else
            out = u;
        };
        if (r.isFloat())
          apply(r.floats[dst], updates.constant->floats[src]);
        else
          apply(r.ints[dst], updates.constant->ints[src]);
      }
    }
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  if (tuples == 0) {
    ctx.setResult(0, ctx.operand(0), data.dtype);
    return success();
  }
  if (reduction != "none")
    return ctx.emitError() << "reduction '" << reduction
                           << "' needs its data and updates known at import";
  Value result = buildScatterBox(ctx, coords, tupleShape, sliceShape);
  if (!result) {
    if (tuples > kMaxScatterSlices)
      return ctx.emitError()
             << "indices address " << tuples
             << " slices that do not form a box; at most " << kMaxScatterSlices
             << " are supported when data or updates are computed at run "
                "time";
    // Few scattered slices: one insert per index tuple, in order, so a
    // later duplicate wins as ONNX's reference implementation does.
    result = ctx.operand(0);
    SmallVector<int64_t> flatUpdates = {tuples};
    llvm::append_range(flatUpdates, sliceShape);
    Value all = buildReshape(ctx.b, ctx.loc, ctx.operand(2), flatUpdates);
    SmallVector<int64_t> unitShape(k, 1);
    llvm::append_range(unitShape, sliceShape);
    for (int64_t t = 0; t < tuples; ++t) {
      SmallVector<int64_t> lo(coords.begin() + t * k,
                              coords.begin() + (t + 1) * k);
      SmallVector<int64_t> pieceOffsets(1 + sliceShape.size(), 0);
      pieceOffsets[0] = t;
      SmallVector<int64_t> pieceSizes = {1};
      llvm::append_range(pieceSizes, sliceShape);
      auto pieceType = RankedTensorType::get(
          pieceSizes, getTensorType(all).getElementType());
      Value piece = tensor::ExtractSliceOp::create(
          ctx.b, ctx.loc, pieceType, all, ValueRange{}, ValueRange{},
          ValueRange{}, pieceOffsets, pieceSizes,
          SmallVector<int64_t>(pieceSizes.size(), 1));
      result = insertBox(ctx, result,
                         buildReshape(ctx.b, ctx.loc, piece, unitShape), lo);
    }
  }
  ctx.setResult(0, result, data.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateIndexingConverters(ConverterMap &map) {
  map["CumSum"] = convertCumSum;
  map["Tile"] = convertTile;
  map["GatherElements"] = convertGatherElements;
  map["ScatterND"] = convertScatterND;
}
