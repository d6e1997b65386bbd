//===- DataMovementOps.cpp - ONNX Concat, Split, Slice, Gather, Pad, Trilu ===//
//
// Ops that move data without arithmetic: tensor.concat, extract_slice and
// pad where they fit, and an indexed linalg.generic (embedding lookups,
// reversed slices, triangular masks) where they do not.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;
using onnx::TensorProto;

namespace {

Value indexConst(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// The graph input whose values `v` holds unchanged: through reshapes,
/// broadcasts, transposes, and copies or widening casts to an integer type.
/// Null when `v` is computed.
BlockArgument findGraphInput(Value v) {
  while (v) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      return func && func.getArgAttr(arg.getArgNumber(),
                                     tp::TPDialect::kInputAttrName)
                 ? arg
                 : nullptr;
    }
    Operation *op = v.getDefiningOp();
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::ReshapeOp,
            tensor::CastOp>(op)) {
      v = op->getOperand(0);
    } else if (auto broadcast = dyn_cast<linalg::BroadcastOp>(op)) {
      v = broadcast.getInput();
    } else if (auto transpose = dyn_cast<linalg::TransposeOp>(op)) {
      v = transpose.getInput();
    } else if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
      if (generic.getNumDpsInputs() != 1 || generic.getNumResults() != 1)
        return nullptr;
      Block &body = generic.getRegion().front();
      auto yield = cast<linalg::YieldOp>(body.getTerminator());
      Value yielded = yield.getOperand(0);
      if (auto ext = yielded.getDefiningOp<arith::ExtSIOp>())
        yielded = ext.getIn();
      if (yielded != body.getArgument(0))
        return nullptr;
      v = generic.getDpsInputs()[0];
    } else {
      return nullptr;
    }
  }
  return nullptr;
}

/// Records on the graph input that `indices` reads unchanged, if any, that
/// its values index a dim of size `dim` (tp.index_bound), so that tp-run
/// can reject ids outside [-dim, dim) as onnxruntime does.
void recordIndexBound(Value indices, int64_t dim) {
  BlockArgument arg = findGraphInput(indices);
  if (!arg || dim < 1)
    return;
  auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
  unsigned index = arg.getArgNumber();
  auto name = tp::TPDialect::kIndexBoundAttrName;
  if (auto old = func.getArgAttrOfType<IntegerAttr>(index, name))
    dim = std::min(dim, old.getInt());
  func.setArgAttr(
      index, name,
      IntegerAttr::get(IntegerType::get(func.getContext(), 64), dim));
}

LogicalResult convertConcat(NodeContext &ctx) {
  const ImportedValue &first = ctx.input(0);
  int64_t rank = first.shape.size();
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  SmallVector<int64_t> shape = first.shape;
  shape[*axis] = 0;
  SmallVector<unsigned> parts;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
    const ImportedValue &in = ctx.input(i);
    bool same = static_cast<int64_t>(in.shape.size()) == rank &&
                in.dtype == first.dtype;
    for (int64_t d = 0; same && d < rank; ++d)
      same = d == *axis || in.shape[d] == first.shape[d];
    if (!same)
      return ctx.emitError()
             << "input " << i << " " << dtypeName(in.dtype)
             << formatShape(in.shape) << " does not match input 0 "
             << dtypeName(first.dtype) << formatShape(first.shape)
             << " off axis " << *axis;
    shape[*axis] += in.shape[*axis];
    if (in.shape[*axis] != 0)
      parts.push_back(i);
  }
  if (ctx.allInputsConstant()) {
    // Walk the output and find, for each index, its part and offset.
    SmallVector<int64_t> starts;
    int64_t start = 0;
    for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
      starts.push_back(start);
      start += ctx.input(i).shape[*axis];
    }
    ConstTensor r;
    r.dtype = first.dtype;
    r.shape = shape;
    r.allocate();
    SmallVector<int64_t> strides = getStrides(shape);
    for (int64_t flat = 0, e = r.numel(); flat < e; ++flat) {
      int64_t pos = (flat / strides[*axis]) % shape[*axis];
      unsigned part = llvm::upper_bound(starts, pos) - starts.begin() - 1;
      while (ctx.input(part).shape[*axis] == 0)
        ++part;
      const ConstTensor &in = *ctx.constInput(part);
      SmallVector<int64_t> inStrides = getStrides(in.shape);
      int64_t src = 0;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t p = (flat / strides[d]) % shape[d];
        if (d == *axis)
          p -= starts[part];
        src += p * inStrides[d];
      }
      if (r.isFloat())
        r.floats[flat] = in.floats[src];
      else
        r.ints[flat] = in.ints[src];
    }
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  SmallVector<Value> operands;
  for (unsigned i : parts)
    operands.push_back(ctx.operand(i));
  Value result =
      operands.size() == 1
          ? operands.front()
          : Value(tensor::ConcatOp::create(ctx.b, ctx.loc, *axis, operands));
  ctx.setResult(0, result, first.dtype);
  return success();
}

/// Static slice with positive strides: fold or tensor.extract_slice.
void setSlice(NodeContext &ctx, unsigned output, ArrayRef<int64_t> offsets,
              ArrayRef<int64_t> sizes, ArrayRef<int64_t> strides) {
  const ImportedValue &x = ctx.input(0);
  if (x.constant && x.constant->numel() <= maxFoldedElements()) {
    SmallVector<int64_t> inStrides = getStrides(x.shape);
    ctx.setConstResult(
        output, foldByIndex(*x.constant, sizes, [&](ArrayRef<int64_t> idx) {
          int64_t flat = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            flat += (offsets[d] + idx[d] * strides[d]) * inStrides[d];
          return flat;
        }));
    return;
  }
  Value input = ctx.operand(0);
  auto type =
      RankedTensorType::get(sizes, getTensorType(input).getElementType());
  if (type.getNumElements() == 0) {
    // An empty slice may start past the end, which extract_slice rejects.
    ctx.setResult(output,
                  createEmpty(ctx.b, ctx.loc, sizes, type.getElementType()),
                  x.dtype);
    return;
  }
  Value result = tensor::ExtractSliceOp::create(
      ctx.b, ctx.loc, type, input, ValueRange{}, ValueRange{}, ValueRange{},
      offsets, sizes, strides);
  ctx.setResult(output, result, x.dtype);
}

LogicalResult convertSplit(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  auto axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  int64_t dim = x.shape[*axis];
  SmallVector<int64_t> sizes;
  if (ctx.opset >= 13 && ctx.hasInput(1)) {
    auto split = ctx.constInts(1, "split");
    if (!split)
      return failure();
    sizes = *split;
  } else if (auto split = ctx.attrInts("split")) {
    sizes = *split;
  } else {
    int64_t n = ctx.opset >= 18 && ctx.attr("num_outputs")
                    ? ctx.attrInt("num_outputs", 1)
                    : ctx.getNumOutputs();
    if (n < 1)
      return ctx.emitError()
             << "num_outputs is " << n << "; it must be at least 1";
    int64_t chunk = (dim + n - 1) / n;
    for (int64_t i = 0; i < n; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  int64_t total = 0;
  for (int64_t s : sizes)
    if (s < 0 || llvm::AddOverflow(total, s, total))
      return ctx.emitError() << "split " << formatShape(sizes)
                             << " has a negative size or overflows";
  if (total != dim || sizes.size() != ctx.getNumOutputs())
    return ctx.emitError() << "split " << formatShape(sizes) << " into "
                           << ctx.getNumOutputs() << " outputs does not add "
                           << "up to dim " << *axis << " of "
                           << formatShape(x.shape);
  int64_t offset = 0;
  for (auto [i, s] : llvm::enumerate(sizes)) {
    SmallVector<int64_t> offsets(rank, 0), shape = x.shape, strides(rank, 1);
    offsets[*axis] = offset;
    shape[*axis] = s;
    setSlice(ctx, i, offsets, shape, strides);
    offset += s;
  }
  return success();
}

LogicalResult convertSlice(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  std::optional<SmallVector<int64_t>> starts, ends, axes, steps;
  if (ctx.opset < 10) {
    starts = ctx.attrInts("starts");
    ends = ctx.attrInts("ends");
    axes = ctx.attrInts("axes");
    if (!starts || !ends)
      return ctx.emitError() << "needs starts and ends";
  } else {
    starts = ctx.constInts(1, "starts");
    ends = ctx.constInts(2, "ends");
    if (!starts || !ends)
      return failure();
    if (ctx.hasInput(3) && !(axes = ctx.constInts(3, "axes")))
      return failure();
    if (ctx.hasInput(4) && !(steps = ctx.constInts(4, "steps")))
      return failure();
  }
  if (!axes) {
    axes.emplace();
    for (size_t i = 0; i < starts->size(); ++i)
      axes->push_back(i);
  }
  if (!steps)
    steps = SmallVector<int64_t>(starts->size(), 1);
  if (ends->size() != starts->size() || axes->size() != starts->size() ||
      steps->size() != starts->size())
    return ctx.emitError() << "starts, ends, axes and steps differ in length";
  SmallVector<int64_t> offsets(rank, 0), sizes = x.shape, strides(rank, 1);
  bool reversed = false;
  for (size_t i = 0; i < starts->size(); ++i) {
    auto axis = ctx.normalizeAxis((*axes)[i], rank);
    if (!axis)
      return failure();
    int64_t dim = x.shape[*axis], step = (*steps)[i];
    if (step == 0)
      return ctx.emitError() << "step is zero on axis " << *axis;
    auto clampIndex = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0)
        v = v < -dim ? -1 : v + dim; // INT64_MIN-safe
      return std::clamp(v, lo, hi);
    };
    int64_t start, end;
    if (step > 0) {
      start = clampIndex((*starts)[i], 0, dim);
      end = clampIndex((*ends)[i], 0, dim);
    } else {
      start = clampIndex((*starts)[i], -1, dim - 1);
      end = clampIndex((*ends)[i], -1, dim - 1);
      reversed = true;
    }
    // Positions start, start + step, ... before end; in unsigned
    // arithmetic, so that a step near +-2^63 cannot overflow.
    uint64_t span =
        step > 0 ? static_cast<uint64_t>(std::max<int64_t>(0, end - start))
                 : static_cast<uint64_t>(std::max<int64_t>(0, start - end));
    uint64_t stride = step > 0 ? static_cast<uint64_t>(step)
                               : 0 - static_cast<uint64_t>(step);
    int64_t count =
        span == 0 ? 0 : static_cast<int64_t>((span - 1) / stride + 1);
    offsets[*axis] = start;
    sizes[*axis] = std::max<int64_t>(0, count);
    strides[*axis] = step;
  }
  if (!reversed) {
    setSlice(ctx, 0, offsets, sizes, strides);
    return success();
  }
  // Negative steps: read source[offset + i * step] with an indexed generic.
  if (x.constant && x.constant->numel() <= maxFoldedElements()) {
    SmallVector<int64_t> inStrides = getStrides(x.shape);
    ctx.setConstResult(
        0, foldByIndex(*x.constant, sizes, [&](ArrayRef<int64_t> idx) {
          int64_t flat = 0;
          for (int64_t d = 0; d < rank; ++d)
            flat += (offsets[d] + idx[d] * strides[d]) * inStrides[d];
          return flat;
        }));
    return success();
  }
  Value result = buildIndexedRead(
      ctx.b, ctx.loc, ctx.operand(0), {}, {}, sizes,
      [&](OpBuilder &b, Location loc, ValueRange loops, ValueRange) {
        SmallVector<Value> index;
        for (int64_t d = 0; d < rank; ++d) {
          Value scaled = arith::MulIOp::create(b, loc, loops[d],
                                               indexConst(b, loc, strides[d]));
          index.push_back(arith::AddIOp::create(
              b, loc, scaled, indexConst(b, loc, offsets[d])));
        }
        return index;
      });
  ctx.setResult(0, result, x.dtype);
  return success();
}

/// table[V, H] looked up at ids[...] as a reduction over the vocabulary:
/// out[..., h] = sum_v (ids[...] == v ? table[v, h] : 0). Exactly one term
/// is non-zero, so the result is the row itself; what the form buys is the
/// table as an operand with the vocabulary as a reduction loop, which
/// upstream partition splits Megatron's way (each rank looks up the ids in
/// its range, then one all-reduce). `tp.embedding` (the vocabulary size)
/// marks it for the vocabulary offset after partition and for code
/// generation, which emits a gather.
LogicalResult convertEmbeddingLookup(NodeContext &ctx) {
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value table = ctx.operand(0), ids = ctx.operand(1);
  auto tableType = getTensorType(table);
  int64_t vocab = tableType.getDimSize(0), hidden = tableType.getDimSize(1);
  ArrayRef<int64_t> idShape = ctx.input(1).shape;
  int64_t q = idShape.size();
  SmallVector<int64_t> shape(idShape);
  shape.push_back(hidden);
  MLIRContext *mctx = b.getContext();
  // Loops: the id dims, hidden, then vocabulary (reduction).
  int64_t numLoops = q + 2;
  SmallVector<AffineExpr> idExprs;
  for (int64_t d = 0; d < q; ++d)
    idExprs.push_back(getAffineDimExpr(d, mctx));
  SmallVector<AffineExpr> outExprs(idExprs);
  outExprs.push_back(getAffineDimExpr(q, mctx));
  SmallVector<AffineMap> maps = {
      AffineMap::get(numLoops, 0, idExprs, mctx),
      AffineMap::get(numLoops, 0,
                     {getAffineDimExpr(q + 1, mctx), getAffineDimExpr(q, mctx)},
                     mctx),
      AffineMap::get(numLoops, 0, outExprs, mctx)};
  SmallVector<utils::IteratorType> iterators(q + 1,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  Type elementType = tableType.getElementType();
  Value init = createFilled(b, loc, shape, elementType, 0.0);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), ValueRange{ids, table}, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value id =
            arith::IndexCastOp::create(nb, nloc, nb.getIndexType(), args[0]);
        // Negative ids count from the end, as Gather allows.
        Value n = indexConst(nb, nloc, vocab);
        Value negative = arith::CmpIOp::create(
            nb, nloc, arith::CmpIPredicate::slt, id, indexConst(nb, nloc, 0));
        id = arith::SelectOp::create(
            nb, nloc, negative, arith::AddIOp::create(nb, nloc, id, n), id);
        Value v = linalg::IndexOp::create(nb, nloc, q + 1);
        Value hit =
            arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq, id, v);
        Value term = arith::SelectOp::create(
            nb, nloc, hit, args[1], createScalar(nb, nloc, elementType, 0.0));
        linalg::YieldOp::create(nb, nloc, createAdd(nb, nloc, args[2], term));
      });
  generic->setAttr(mlir::tp::TPDialect::kEmbeddingAttrName,
                   b.getI64IntegerAttr(vocab));
  ctx.setResult(0, generic.getResult(0), ctx.input(0).dtype);
  return success();
}

LogicalResult convertGather(NodeContext &ctx) {
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
  int64_t dim = data.shape[*axis];
  SmallVector<int64_t> shape(data.shape.begin(), data.shape.begin() + *axis);
  llvm::append_range(shape, indices.shape);
  shape.append(data.shape.begin() + *axis + 1, data.shape.end());
  int64_t q = indices.shape.size();

  // Known indices: normalize and range-check now.
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
  if (data.constant && constIndices &&
      getNumElements(shape) <= maxFoldedElements()) {
    SmallVector<int64_t> strides = getStrides(data.shape);
    SmallVector<int64_t> idxStrides = getStrides(indices.shape);
    ctx.setConstResult(
        0, foldByIndex(*data.constant, shape, [&](ArrayRef<int64_t> idx) {
          int64_t flatIdx = 0;
          for (int64_t d = 0; d < q; ++d)
            flatIdx += idx[*axis + d] * idxStrides[d];
          int64_t src = constIndices->ints[flatIdx] * strides[*axis];
          for (int64_t d = 0; d < *axis; ++d)
            src += idx[d] * strides[d];
          for (int64_t d = *axis + 1; d < rank; ++d)
            src += idx[d - 1 + q] * strides[d];
          return src;
        }));
    return success();
  }
  // Known indices that are a run of consecutive positions (x[:, 0],
  // Falcon's fused K/V heads x[..., [-2], :], positions 0..s-1 into a
  // table) are a slice, viewed as the indices' shape: the planner and the
  // code generators read slices, not gathers.
  bool run = constIndices && !constIndices->ints.empty();
  for (size_t k = 1; run && k < constIndices->ints.size(); ++k)
    run = constIndices->ints[k] == constIndices->ints[0] + int64_t(k);
  if (run) {
    SmallVector<int64_t> offsets(rank, 0), sizes = data.shape, strides(rank, 1);
    offsets[*axis] = constIndices->ints[0];
    sizes[*axis] = constIndices->ints.size();
    Value input = ctx.operand(0);
    auto type =
        RankedTensorType::get(sizes, getTensorType(input).getElementType());
    Value slice = tensor::ExtractSliceOp::create(
        ctx.b, ctx.loc, type, input, ValueRange{}, ValueRange{}, ValueRange{},
        offsets, sizes, strides);
    ctx.setResult(0, buildReshape(ctx.b, ctx.loc, slice, shape), data.dtype);
    return success();
  }
  // An embedding lookup (run-time ids into a weight table) reads the table
  // as an operand, so that it can be split on the vocabulary.
  if (!constIndices && *axis == 0 && rank == 2 &&
      isa<BlockArgument>(ctx.operand(0)) && !isFloatDType(indices.dtype)) {
    recordIndexBound(ctx.operand(1), dim);
    return convertEmbeddingLookup(ctx);
  }
  if (!constIndices)
    recordIndexBound(ctx.operand(1), dim);
  Value idx = constIndices ? materializeConstant(ctx.b, ctx.loc, *constIndices)
                           : ctx.operand(1);
  // The result loops are (data dims before axis, index dims, data dims
  // after); the indices are read at the index dims.
  SmallVector<AffineExpr> idxExprs;
  for (int64_t d = 0; d < q; ++d)
    idxExprs.push_back(ctx.b.getAffineDimExpr(*axis + d));
  AffineMap idxMap =
      AffineMap::get(shape.size(), 0, idxExprs, ctx.b.getContext());
  bool checkNegative = !constIndices;
  Value result = buildIndexedRead(
      ctx.b, ctx.loc, ctx.operand(0), idx, idxMap, shape,
      [&](OpBuilder &b, Location loc, ValueRange loops, ValueRange scalars) {
        Value i =
            arith::IndexCastOp::create(b, loc, b.getIndexType(), scalars[0]);
        if (checkNegative) {
          Value n = indexConst(b, loc, dim);
          Value neg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                            i, indexConst(b, loc, 0));
          i = arith::SelectOp::create(b, loc, neg,
                                      arith::AddIOp::create(b, loc, i, n), i);
        }
        SmallVector<Value> index(loops.take_front(*axis));
        index.push_back(i);
        llvm::append_range(index, loops.drop_front(*axis + q));
        return index;
      });
  ctx.setResult(0, result, data.dtype);
  return success();
}

LogicalResult convertPad(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant")
    return ctx.emitError() << "only mode 'constant' is supported, got '" << mode
                           << "'";
  std::optional<SmallVector<int64_t>> pads =
      ctx.opset < 11 ? ctx.attrInts("pads") : ctx.constInts(1, "pads");
  if (!pads)
    return failure();
  SmallVector<int64_t> axes;
  if (ctx.opset >= 18 && ctx.hasInput(3)) {
    auto a = ctx.constInts(3, "axes");
    if (!a)
      return failure();
    for (int64_t v : *a) {
      auto axis = ctx.normalizeAxis(v, rank);
      if (!axis)
        return failure();
      axes.push_back(*axis);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  if (pads->size() != 2 * axes.size())
    return ctx.emitError() << "pads " << formatShape(*pads) << " must hold "
                           << 2 * axes.size() << " values";
  SmallVector<int64_t> low(rank, 0), high(rank, 0), shape = x.shape;
  for (auto [i, a] : llvm::enumerate(axes)) {
    low[a] = (*pads)[i];
    high[a] = (*pads)[i + axes.size()];
    if (low[a] < 0 || high[a] < 0)
      return ctx.emitError() << "negative pads are not supported";
    if (llvm::AddOverflow(shape[a], low[a], shape[a]) ||
        llvm::AddOverflow(shape[a], high[a], shape[a]))
      return ctx.emitError() << "pads " << formatShape(*pads) << " make dim "
                             << a << " larger than fits in 64 bits";
  }
  Value input = ctx.operand(0);
  if (llvm::all_of(low, [](int64_t v) { return v == 0; }) &&
      llvm::all_of(high, [](int64_t v) { return v == 0; })) {
    ctx.setResult(0, input, x.dtype);
    return success();
  }
  Type elementType = getTensorType(input).getElementType();
  double padValue = ctx.opset < 11 ? ctx.attrFloat("value", 0.0f) : 0.0;
  Value value;
  if (ctx.opset >= 11 && ctx.hasInput(2)) {
    if (ctx.getNumElements(2) != 1)
      return ctx.emitError() << "constant_value must be a scalar";
    if (ctx.input(2).dtype != x.dtype)
      return ctx.emitError()
             << "constant_value is " << dtypeName(ctx.input(2).dtype)
             << " but the data is " << dtypeName(x.dtype);
    if (const ConstTensor *c = ctx.constInput(2))
      padValue = c->getAsDouble(0);
    else
      value = tensor::ExtractOp::create(ctx.b, ctx.loc, ctx.operand(2),
                                        ValueRange{});
  }
  if (!value)
    value = createScalar(ctx.b, ctx.loc, elementType, padValue);
  SmallVector<OpFoldResult> lowAttr, highAttr;
  for (int64_t i = 0; i < rank; ++i) {
    lowAttr.push_back(ctx.b.getIndexAttr(low[i]));
    highAttr.push_back(ctx.b.getIndexAttr(high[i]));
  }
  auto type = RankedTensorType::get(shape, elementType);
  Value result = tensor::PadOp::create(ctx.b, ctx.loc, type, input, lowAttr,
                                       highAttr, value);
  ctx.setResult(0, result, x.dtype);
  return success();
}

/// Trilu keeps the upper (or lower) triangle of the last two dims.
LogicalResult convertTrilu(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  int64_t rank = x.shape.size();
  if (rank < 2)
    return ctx.emitError() << "input must have rank >= 2, got "
                           << formatShape(x.shape);
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    auto kv = ctx.constInts(1, "k");
    if (!kv)
      return failure();
    if (kv->size() != 1)
      return ctx.emitError() << "k must be a scalar";
    k = (*kv)[0];
  }
  bool upper = ctx.attrInt("upper", 1);
  auto keep = [&](int64_t i, int64_t j) {
    return upper ? j - i >= k : j - i <= k;
  };
  if (x.constant && x.constant->numel() <= maxFoldedElements()) {
    ConstTensor r = *x.constant;
    SmallVector<int64_t> strides = getStrides(x.shape);
    for (int64_t flat = 0, e = r.numel(); flat < e; ++flat) {
      int64_t i = (flat / strides[rank - 2]) % x.shape[rank - 2];
      int64_t j = flat % x.shape[rank - 1];
      if (keep(i, j))
        continue;
      if (r.isFloat())
        r.floats[flat] = 0;
      else
        r.ints[flat] = 0;
    }
    ctx.setConstResult(0, std::move(r));
    return success();
  }
  Value input = ctx.operand(0);
  Type elementType = getTensorType(input).getElementType();
  Value result = buildElementwise(
      ctx.b, ctx.loc, input, x.shape, elementType,
      [&](OpBuilder &b, Location loc, ValueRange s) {
        Value i = linalg::IndexOp::create(b, loc, rank - 2);
        Value j = linalg::IndexOp::create(b, loc, rank - 1);
        Value diff = arith::SubIOp::create(b, loc, j, i);
        Value keepIt = arith::CmpIOp::create(b, loc,
                                             upper ? arith::CmpIPredicate::sge
                                                   : arith::CmpIPredicate::sle,
                                             diff, indexConst(b, loc, k));
        return Value(arith::SelectOp::create(
            b, loc, keepIt, s[0], createScalar(b, loc, elementType, 0)));
      });
  ctx.setResult(0, result, x.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateDataMovementConverters(ConverterMap &map) {
  map["Concat"] = convertConcat;
  map["Split"] = convertSplit;
  map["Slice"] = convertSlice;
  map["Gather"] = convertGather;
  map["Pad"] = convertPad;
  map["Trilu"] = convertTrilu;
}
