//===- Builders.cpp - IR builders shared by the ONNX op families ----------===//
//
// Broadcasting elementwise generics, reshapes as expand/collapse_shape,
// reductions and einsum-style contractions: the few shapes of linalg IR that
// every imported op is made of, so that sharding propagation sees the same
// patterns everywhere.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include <set>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include "llvm/ADT/SmallSet.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::tp::onnx_import;

RankedTensorType mlir::tp::onnx_import::getTensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

Value mlir::tp::onnx_import::createEmpty(OpBuilder &b, Location loc,
                                         ArrayRef<int64_t> shape,
                                         Type elementType) {
  return tensor::EmptyOp::create(b, loc, shape, elementType);
}

Value mlir::tp::onnx_import::createScalar(OpBuilder &b, Location loc, Type type,
                                          double value) {
  if (auto floatType = dyn_cast<FloatType>(type))
    return arith::ConstantOp::create(b, loc, floatType,
                                     b.getFloatAttr(floatType, value));
  auto intType = cast<IntegerType>(type);
  unsigned width = intType.getWidth();
  // Values beyond the type's range saturate, as the infinities do: a bound
  // such as Clip's default -FLT_MAX means "none", and converting a double
  // outside int64's range to an integer is undefined. NaN becomes 0.
  double limit = std::ldexp(1.0, width == 1 ? 63 : width - 1);
  APInt v;
  if (std::isnan(value))
    v = APInt::getZero(width);
  else if (value <= -limit)
    v = width == 1 ? APInt(1, 0) : APInt::getSignedMinValue(width);
  else if (value >= limit)
    v = width == 1 ? APInt(1, 1) : APInt::getSignedMaxValue(width);
  else
    v = APInt(width, static_cast<uint64_t>(static_cast<int64_t>(value)),
              /*isSigned=*/true, /*implicitTrunc=*/true);
  return arith::ConstantOp::create(b, loc, intType,
                                   b.getIntegerAttr(intType, v));
}

Value mlir::tp::onnx_import::createFilled(OpBuilder &b, Location loc,
                                          ArrayRef<int64_t> shape,
                                          Type elementType, double value) {
  Value empty = createEmpty(b, loc, shape, elementType);
  Value scalar = createScalar(b, loc, elementType, value);
  return linalg::FillOp::create(b, loc, scalar, empty).getResult(0);
}

std::optional<SmallVector<int64_t>>
mlir::tp::onnx_import::broadcastShapes(ArrayRef<SmallVector<int64_t>> shapes) {
  size_t rank = 0;
  for (const auto &s : shapes)
    rank = std::max(rank, s.size());
  SmallVector<int64_t> result(rank, 1);
  for (const auto &s : shapes) {
    size_t offset = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &r = result[offset + i];
      if (s[i] == r || s[i] == 1)
        continue;
      if (r != 1)
        return std::nullopt;
      r = s[i];
    }
  }
  return result;
}

/// Drops the dims of `v` listed in `drop` (all of size 1) with
/// tensor.collapse_shape. Broadcasting then needs no constant index in an
/// indexing map: upstream sharding only accepts maps made of dims.
static Value dropUnitDims(OpBuilder &b, Location loc, Value v,
                          ArrayRef<bool> drop) {
  auto type = getTensorType(v);
  if (!llvm::is_contained(drop, true))
    return v;
  SmallVector<ReassociationIndices> groups;
  ReassociationIndices pending;
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    pending.push_back(d);
    if (drop[d])
      continue;
    groups.push_back(pending);
    pending.clear();
    shape.push_back(type.getDimSize(d));
  }
  // Trailing dropped dims join the last group.
  if (!groups.empty())
    groups.back().append(pending.begin(), pending.end());
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  return tensor::CollapseShapeOp::create(b, loc, resultType, v, groups);
}

/// Prepares an operand of `shape` that broadcasts to `resultShape`: drops
/// its broadcast (size-1) dims and returns the map from the loops of the
/// result to what is left.
static std::pair<Value, AffineMap>
broadcastOperand(OpBuilder &b, Location loc, Value v,
                 ArrayRef<int64_t> resultShape) {
  MLIRContext *ctx = b.getContext();
  ArrayRef<int64_t> shape = getTensorType(v).getShape();
  size_t offset = resultShape.size() - shape.size();
  SmallVector<bool> drop;
  SmallVector<AffineExpr> exprs;
  for (size_t i = 0; i < shape.size(); ++i) {
    drop.push_back(shape[i] == 1 && resultShape[offset + i] != 1);
    if (!drop.back())
      exprs.push_back(getAffineDimExpr(offset + i, ctx));
  }
  return {dropUnitDims(b, loc, v, drop),
          AffineMap::get(resultShape.size(), 0, exprs, ctx)};
}

Value mlir::tp::onnx_import::buildElementwise(OpBuilder &b, Location loc,
                                              ValueRange inputs,
                                              ArrayRef<int64_t> resultShape,
                                              Type resultElementType,
                                              ScalarBody body) {
  SmallVector<AffineMap> maps;
  SmallVector<Value> operands;
  for (Value input : inputs) {
    auto [operand, map] = broadcastOperand(b, loc, input, resultShape);
    operands.push_back(operand);
    maps.push_back(map);
  }
  maps.push_back(b.getMultiDimIdentityMap(resultShape.size()));
  SmallVector<utils::IteratorType> iterators(resultShape.size(),
                                             utils::IteratorType::parallel);
  Value init = createEmpty(b, loc, resultShape, resultElementType);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), operands, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value r = body(nb, nloc, args.drop_back());
        linalg::YieldOp::create(nb, nloc, r);
      });
  return generic.getResult(0);
}

/// The shape whose dims both `a` and `b` are products of consecutive runs
/// of: the sorted union of their prefix products, if each divides the next.
/// Unit dims are dropped from it (they are re-added by the reshapes).
static std::optional<SmallVector<int64_t>>
getCommonRefinement(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (llvm::is_contained(a, 0) || llvm::is_contained(b, 0))
    return std::nullopt;
  std::set<int64_t> prefixes;
  for (ArrayRef<int64_t> shape : {a, b}) {
    int64_t p = 1;
    for (int64_t d : shape)
      prefixes.insert(p *= d);
  }
  SmallVector<int64_t> fine;
  int64_t prev = 1;
  for (int64_t p : prefixes) {
    if (p % prev != 0)
      return std::nullopt;
    if (p != prev)
      fine.push_back(p / prev);
    prev = p;
  }
  return fine;
}

/// Upstream's reassociation with each group's leading unit dims moved to
/// the group before: [B·S, H] -> [B, 1, H] (a one-token step) groups as
/// [[0, 1], [2]], so the unit dim joins the batch, as it does for S > 1,
/// and H stays the lead dim of its group (where the planner's splits land).
static std::optional<SmallVector<ReassociationIndices>>
getReassociation(RankedTensorType fine, RankedTensorType coarse) {
  std::optional<SmallVector<ReassociationIndices>> groups =
      getReassociationIndicesForReshape(fine, coarse);
  if (!groups)
    return groups;
  for (size_t g = 1; g < groups->size(); ++g) {
    ReassociationIndices &group = (*groups)[g];
    auto firstReal = llvm::find_if(
        group, [&](int64_t d) { return fine.getDimSize(d) != 1; });
    if (firstReal == group.begin() || firstReal == group.end())
      continue;
    ReassociationIndices &before = (*groups)[g - 1];
    before.append(group.begin(), firstReal);
    group.erase(group.begin(), firstReal);
  }
  return groups;
}

Value mlir::tp::onnx_import::buildReshape(OpBuilder &b, Location loc,
                                          Value input,
                                          ArrayRef<int64_t> shape) {
  auto srcType = getTensorType(input);
  auto dstType = RankedTensorType::get(shape, srcType.getElementType());
  if (srcType == dstType)
    return input;
  // Nothing to move; reassociation rules do not hold for zero-size dims.
  if (dstType.getNumElements() == 0)
    return createEmpty(b, loc, shape, srcType.getElementType());
  if (dstType.getRank() == 0)
    return tensor::CollapseShapeOp::create(b, loc, dstType, input,
                                           ArrayRef<ReassociationIndices>{});
  if (srcType.getRank() == 0)
    return tensor::ExpandShapeOp::create(b, loc, dstType, input,
                                         ArrayRef<ReassociationIndices>{});
  if (srcType.getRank() > dstType.getRank()) {
    if (auto re = getReassociation(srcType, dstType))
      return tensor::CollapseShapeOp::create(b, loc, dstType, input, *re);
  } else if (srcType.getRank() < dstType.getRank()) {
    if (auto re = getReassociation(dstType, srcType))
      return tensor::ExpandShapeOp::create(b, loc, dstType, input, *re);
  }
  // Neither a pure split nor a pure merge of dims: split to the finest
  // shape both refine ([B, S, H] -> [B, S, h, d] -> [B, S·h, d], the
  // multi-query query reshape), so the dims that survive stay visible;
  // through 1-D only when there is none.
  if (std::optional<SmallVector<int64_t>> fine =
          getCommonRefinement(srcType.getShape(), shape);
      fine && fine->size() > std::max<size_t>(srcType.getRank(), shape.size()))
    return buildReshape(b, loc, buildReshape(b, loc, input, *fine), shape);
  int64_t n = srcType.getNumElements();
  Value flat = buildReshape(b, loc, input, {n});
  return buildReshape(b, loc, flat, shape);
}

Value mlir::tp::onnx_import::buildReduction(
    OpBuilder &b, Location loc, Value input, ArrayRef<int64_t> axes,
    bool keepDims, double init,
    function_ref<Value(OpBuilder &, Location, Value, Value)> combine) {
  auto type = getTensorType(input);
  int64_t rank = type.getRank();
  MLIRContext *ctx = b.getContext();
  SmallVector<int64_t> reducedShape, keptShape;
  SmallVector<AffineExpr> outExprs;
  SmallVector<utils::IteratorType> iterators;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = llvm::is_contained(axes, d);
    iterators.push_back(reduced ? utils::IteratorType::reduction
                                : utils::IteratorType::parallel);
    keptShape.push_back(reduced ? 1 : type.getDimSize(d));
    if (!reduced) {
      reducedShape.push_back(type.getDimSize(d));
      outExprs.push_back(getAffineDimExpr(d, ctx));
    }
  }
  Value acc = createFilled(b, loc, reducedShape, type.getElementType(), init);
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(rank),
                                 AffineMap::get(rank, 0, outExprs, ctx)};
  auto generic = linalg::GenericOp::create(
      b, loc, acc.getType(), input, acc, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        linalg::YieldOp::create(nb, nloc, combine(nb, nloc, args[1], args[0]));
      });
  Value result = generic.getResult(0);
  return keepDims ? buildReshape(b, loc, result, keptShape) : result;
}

Value mlir::tp::onnx_import::createAdd(OpBuilder &b, Location loc, Value x,
                                       Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::AddFOp::create(b, loc, x, y);
  return arith::AddIOp::create(b, loc, x, y);
}

Value mlir::tp::onnx_import::createSub(OpBuilder &b, Location loc, Value x,
                                       Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::SubFOp::create(b, loc, x, y);
  return arith::SubIOp::create(b, loc, x, y);
}

Value mlir::tp::onnx_import::createMul(OpBuilder &b, Location loc, Value x,
                                       Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::MulFOp::create(b, loc, x, y);
  return arith::MulIOp::create(b, loc, x, y);
}

Value mlir::tp::onnx_import::createMax(OpBuilder &b, Location loc, Value x,
                                       Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::MaximumFOp::create(b, loc, x, y);
  return arith::MaxSIOp::create(b, loc, x, y);
}

/// True if the three dim strings name a plain (or batched) matmul:
/// "ab,bc->ac" (or "zab,zbc->zac") with distinct letters.
static bool isMatmulForm(StringRef lhs, StringRef rhs, StringRef out,
                         bool batched) {
  size_t rank = batched ? 3 : 2;
  if (lhs.size() != rank || rhs.size() != rank || out.size() != rank)
    return false;
  size_t o = batched ? 1 : 0;
  if (batched && (lhs[0] != rhs[0] || lhs[0] != out[0]))
    return false;
  char m = lhs[o], k = lhs[o + 1], n = rhs[o + 1];
  llvm::SmallSet<char, 4> letters;
  for (char c : {m, k, n})
    letters.insert(c);
  if (batched)
    letters.insert(lhs[0]);
  return letters.size() == (batched ? 4u : 3u) && rhs[o] == k && out[o] == m &&
         out[o + 1] == n && !letters.contains('1');
}

Value mlir::tp::onnx_import::buildContraction(OpBuilder &b, Location loc,
                                              Value lhs, Value rhs,
                                              StringRef lhsDims,
                                              StringRef rhsDims,
                                              StringRef outDims) {
  auto lhsType = getTensorType(lhs);
  auto rhsType = getTensorType(rhs);
  Type elementType = lhsType.getElementType();
  MLIRContext *ctx = b.getContext();

  // Loop order: output letters, then the contracted ones.
  std::string loops = outDims.str();
  for (char c : (lhsDims + rhsDims).str())
    if (c != '1' && loops.find(c) == std::string::npos)
      loops.push_back(c);
  llvm::StringMap<int64_t> sizes;
  auto record = [&](StringRef dims, RankedTensorType type) {
    for (auto [i, c] : llvm::enumerate(dims))
      if (c != '1')
        sizes[StringRef(&c, 1)] = type.getDimSize(i);
  };
  record(lhsDims, lhsType);
  record(rhsDims, rhsType);
  SmallVector<int64_t> outShape;
  for (char c : outDims)
    outShape.push_back(sizes.lookup(StringRef(&c, 1)));
  Value init = createFilled(b, loc, outShape, elementType, 0.0);

  if (isMatmulForm(lhsDims, rhsDims, outDims, /*batched=*/false))
    return linalg::MatmulOp::create(b, loc, TypeRange{init.getType()},
                                    ValueRange{lhs, rhs}, ValueRange{init})
        .getResult(0);
  if (isMatmulForm(lhsDims, rhsDims, outDims, /*batched=*/true))
    return linalg::BatchMatmulOp::create(b, loc, TypeRange{init.getType()},
                                         ValueRange{lhs, rhs}, ValueRange{init})
        .getResult(0);

  // Broadcast ('1') dims are dropped from the operand, not indexed at 0.
  auto dropOnes = [&](Value v, StringRef dims) {
    SmallVector<bool> drop;
    for (char c : dims)
      drop.push_back(c == '1');
    return dropUnitDims(b, loc, v, drop);
  };
  lhs = dropOnes(lhs, lhsDims);
  rhs = dropOnes(rhs, rhsDims);
  auto mapFor = [&](StringRef dims) {
    SmallVector<AffineExpr> exprs;
    for (char c : dims)
      if (c != '1')
        exprs.push_back(getAffineDimExpr(loops.find(c), ctx));
    return AffineMap::get(loops.size(), 0, exprs, ctx);
  };
  SmallVector<AffineMap> maps = {mapFor(lhsDims), mapFor(rhsDims),
                                 mapFor(outDims)};
  SmallVector<utils::IteratorType> iterators;
  for (size_t i = 0; i < loops.size(); ++i)
    iterators.push_back(i < outDims.size() ? utils::IteratorType::parallel
                                           : utils::IteratorType::reduction);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), ValueRange{lhs, rhs}, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value product = createMul(nb, nloc, args[0], args[1]);
        linalg::YieldOp::create(nb, nloc,
                                createAdd(nb, nloc, args[2], product));
      });
  return generic.getResult(0);
}

Value mlir::tp::onnx_import::castScalar(OpBuilder &b, Location loc, Value x,
                                        Type to, bool srcUnsigned,
                                        bool dstUnsigned) {
  Type from = x.getType();
  if (from == to)
    return x;
  auto fromFloat = dyn_cast<FloatType>(from);
  auto toFloat = dyn_cast<FloatType>(to);
  if (fromFloat && toFloat) {
    if (fromFloat.getWidth() < toFloat.getWidth())
      return arith::ExtFOp::create(b, loc, to, x);
    return arith::TruncFOp::create(b, loc, to, x);
  }
  if (toFloat) {
    if (srcUnsigned || from.isInteger(1))
      return arith::UIToFPOp::create(b, loc, to, x);
    return arith::SIToFPOp::create(b, loc, to, x);
  }
  if (to.isInteger(1)) {
    if (fromFloat)
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, x,
                                   createScalar(b, loc, from, 0.0));
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, x,
                                 createScalar(b, loc, from, 0.0));
  }
  if (fromFloat && dstUnsigned)
    return arith::FPToUIOp::create(b, loc, to, x);
  if (fromFloat)
    return arith::FPToSIOp::create(b, loc, to, x);
  unsigned fromWidth = from.getIntOrFloatBitWidth();
  unsigned toWidth = to.getIntOrFloatBitWidth();
  if (fromWidth > toWidth)
    return arith::TruncIOp::create(b, loc, to, x);
  if (srcUnsigned || fromWidth == 1)
    return arith::ExtUIOp::create(b, loc, to, x);
  return arith::ExtSIOp::create(b, loc, to, x);
}

Value mlir::tp::onnx_import::buildIndexedRead(
    OpBuilder &b, Location loc, Value source, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps, ArrayRef<int64_t> resultShape,
    function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange,
                                    ValueRange)>
        indexFn) {
  SmallVector<AffineMap> maps(inputMaps);
  SmallVector<Value> operands(inputs);
  if (maps.empty()) {
    operands.clear();
    for (Value input : inputs) {
      auto [operand, map] = broadcastOperand(b, loc, input, resultShape);
      operands.push_back(operand);
      maps.push_back(map);
    }
  }
  maps.push_back(b.getMultiDimIdentityMap(resultShape.size()));
  SmallVector<utils::IteratorType> iterators(resultShape.size(),
                                             utils::IteratorType::parallel);
  Value init =
      createEmpty(b, loc, resultShape, getTensorType(source).getElementType());
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), operands, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        SmallVector<Value> loops;
        for (size_t d = 0; d < resultShape.size(); ++d)
          loops.push_back(linalg::IndexOp::create(nb, nloc, d));
        SmallVector<Value> index = indexFn(nb, nloc, loops, args.drop_back());
        Value v = tensor::ExtractOp::create(nb, nloc, source, index);
        linalg::YieldOp::create(nb, nloc, v);
      });
  return generic.getResult(0);
}

ConstTensor mlir::tp::onnx_import::foldByIndex(
    const ConstTensor &in, ArrayRef<int64_t> outShape,
    function_ref<int64_t(ArrayRef<int64_t>)> sourceIndex) {
  ConstTensor r;
  r.dtype = in.dtype;
  r.shape.assign(outShape.begin(), outShape.end());
  r.allocate();
  SmallVector<int64_t> strides = getStrides(outShape);
  SmallVector<int64_t> index(outShape.size());
  for (int64_t flat = 0, e = r.numel(); flat < e; ++flat) {
    for (size_t d = 0; d < outShape.size(); ++d)
      index[d] = (flat / strides[d]) % outShape[d];
    int64_t src = sourceIndex(index);
    if (r.isFloat())
      r.floats[flat] = in.floats[src];
    else
      r.ints[flat] = in.ints[src];
  }
  return r;
}
