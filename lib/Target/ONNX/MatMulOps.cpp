//===- MatMulOps.cpp - ONNX MatMul, Gemm and Einsum -----------------------===//
//
// Every contraction is written as an einsum spec and built by
// buildContraction: linalg.matmul / batch_matmul when it is one, otherwise
// a linalg.generic whose reduction dim sharding propagation can see.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

/// Letters of the batch dims; m, k, n come after them.
constexpr char kBatchLetters[] = "abcdefgh";

LogicalResult checkFloatOrInt(NodeContext &ctx, unsigned i) {
  if (ctx.input(i).dtype == onnx::TensorProto::BOOL)
    return ctx.emitError() << "input " << i << " must be numeric, got BOOL";
  return success();
}

LogicalResult convertMatMul(NodeContext &ctx) {
  const ImportedValue &a = ctx.input(0), &b = ctx.input(1);
  if (failed(checkFloatOrInt(ctx, 0)) || failed(checkFloatOrInt(ctx, 1)))
    return failure();
  if (a.dtype != b.dtype)
    return ctx.emitError() << "operands differ in element type: "
                           << dtypeName(a.dtype) << " and "
                           << dtypeName(b.dtype);
  if (a.shape.empty() || b.shape.empty())
    return ctx.emitError() << "operands must have rank >= 1, got "
                           << formatShape(a.shape) << " and "
                           << formatShape(b.shape);
  int64_t ra = a.shape.size(), rb = b.shape.size();
  int64_t k = a.shape.back();
  int64_t kb = rb == 1 ? b.shape[0] : b.shape[rb - 2];
  if (k != kb)
    return ctx.emitError() << "inner dimensions do not match: "
                           << formatShape(a.shape) << " x "
                           << formatShape(b.shape);
  SmallVector<int64_t> batchA(a.shape.begin(),
                              a.shape.begin() + std::max<int64_t>(ra - 2, 0));
  SmallVector<int64_t> batchB(b.shape.begin(),
                              b.shape.begin() + std::max<int64_t>(rb - 2, 0));
  auto batch = broadcastShapes({batchA, batchB});
  if (!batch)
    return ctx.emitError() << "batch dimensions of " << formatShape(a.shape)
                           << " and " << formatShape(b.shape)
                           << " do not broadcast";
  if (batch->size() > sizeof(kBatchLetters) - 1)
    return ctx.emitError() << "more than " << sizeof(kBatchLetters) - 1
                           << " batch dims";
  int64_t nb = batch->size();
  auto batchDims = [&](ArrayRef<int64_t> own) {
    std::string dims;
    int64_t offset = nb - own.size();
    for (size_t i = 0; i < own.size(); ++i)
      dims.push_back(own[i] == 1 && (*batch)[offset + i] != 1
                         ? '1'
                         : kBatchLetters[offset + i]);
    return dims;
  };
  std::string lhs = batchDims(batchA), rhs = batchDims(batchB);
  std::string out(kBatchLetters, nb);
  SmallVector<int64_t> outShape = *batch;
  if (ra >= 2) {
    lhs += "xy";
    out += "x";
    outShape.push_back(a.shape[ra - 2]);
  } else {
    lhs += "y";
  }
  if (rb >= 2) {
    rhs += "yz";
    out += "z";
    outShape.push_back(b.shape[rb - 1]);
  } else {
    rhs += "y";
  }
  Value result = buildContraction(ctx.b, ctx.loc, ctx.operand(0),
                                  ctx.operand(1), lhs, rhs, out);
  ctx.setResult(0, result, a.dtype);
  return success();
}

LogicalResult convertGemm(NodeContext &ctx) {
  const ImportedValue &a = ctx.input(0), &b = ctx.input(1);
  if (a.shape.size() != 2 || b.shape.size() != 2)
    return ctx.emitError() << "A and B must be 2-D, got "
                           << formatShape(a.shape) << " and "
                           << formatShape(b.shape);
  bool transA = ctx.attrInt("transA", 0), transB = ctx.attrInt("transB", 0);
  float alpha = ctx.attrFloat("alpha", 1.0f),
        beta = ctx.attrFloat("beta", 1.0f);
  int64_t m = transA ? a.shape[1] : a.shape[0];
  int64_t k = transA ? a.shape[0] : a.shape[1];
  int64_t kb = transB ? b.shape[1] : b.shape[0];
  int64_t n = transB ? b.shape[0] : b.shape[1];
  if (k != kb)
    return ctx.emitError() << "inner dimensions do not match: A "
                           << formatShape(a.shape) << (transA ? "^T" : "")
                           << " x B " << formatShape(b.shape)
                           << (transB ? "^T" : "");
  Value y = buildContraction(ctx.b, ctx.loc, ctx.operand(0), ctx.operand(1),
                             transA ? "km" : "mk", transB ? "nk" : "kn", "mn");
  SmallVector<int64_t> shape = {m, n};
  bool hasC = ctx.hasInput(2) && beta != 0.0f;
  if (hasC && broadcastShapes({ctx.input(2).shape, shape}) !=
                  std::optional<SmallVector<int64_t>>(shape))
    return ctx.emitError() << "C " << formatShape(ctx.input(2).shape)
                           << " does not broadcast to " << formatShape(shape);
  if (alpha != 1.0f || hasC) {
    SmallVector<Value> operands = {y};
    if (hasC)
      operands.push_back(ctx.operand(2));
    Type elementType = getTensorType(y).getElementType();
    y = buildElementwise(
        ctx.b, ctx.loc, operands, shape, elementType,
        [&](OpBuilder &nb, Location loc, ValueRange s) {
          Value v = s[0];
          if (alpha != 1.0f)
            v = createMul(nb, loc, v,
                          createScalar(nb, loc, elementType, alpha));
          if (!hasC)
            return v;
          Value c = s[1];
          if (beta != 1.0f)
            c = createMul(nb, loc, c, createScalar(nb, loc, elementType, beta));
          return createAdd(nb, loc, v, c);
        });
  }
  ctx.setResult(0, y, a.dtype);
  return success();
}

/// A one-operand einsum: transpose and/or sum over letters.
Value buildUnaryEinsum(OpBuilder &b, Location loc, Value x, StringRef in,
                       StringRef out, ArrayRef<int64_t> outShape) {
  MLIRContext *ctx = b.getContext();
  std::string loops = out.str();
  for (char c : in)
    if (loops.find(c) == std::string::npos)
      loops.push_back(c);
  auto mapFor = [&](StringRef dims) {
    SmallVector<AffineExpr> exprs;
    for (char c : dims)
      exprs.push_back(getAffineDimExpr(loops.find(c), ctx));
    return AffineMap::get(loops.size(), 0, exprs, ctx);
  };
  SmallVector<utils::IteratorType> iterators;
  for (size_t i = 0; i < loops.size(); ++i)
    iterators.push_back(i < out.size() ? utils::IteratorType::parallel
                                       : utils::IteratorType::reduction);
  Value init =
      createFilled(b, loc, outShape, getTensorType(x).getElementType(), 0.0);
  return linalg::GenericOp::create(
             b, loc, init.getType(), x, init,
             ArrayRef<AffineMap>{mapFor(in), mapFor(out)}, iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(nb, nloc,
                                       createAdd(nb, nloc, args[1], args[0]));
             })
      .getResult(0);
}

LogicalResult convertEinsum(NodeContext &ctx) {
  std::string equation;
  for (char c : ctx.attrString("equation", ""))
    if (c != ' ')
      equation.push_back(c);
  StringRef eq(equation);
  auto [lhsText, outText] = eq.split("->");
  bool explicitOut = eq.contains("->");
  SmallVector<StringRef> operands;
  lhsText.split(operands, ',');
  if (eq.contains("..."))
    return ctx.emitError() << "equation '" << equation
                           << "': ellipsis is not supported";
  if (operands.size() != ctx.getNumInputs() || operands.size() > 2)
    return ctx.emitError() << "equation '" << equation << "' with "
                           << ctx.getNumInputs()
                           << " inputs: only one or two operands are supported";
  llvm::StringMap<int64_t> sizes;
  llvm::StringMap<int> counts;
  for (auto [i, dims] : llvm::enumerate(operands)) {
    const ImportedValue &v = ctx.input(i);
    if (dims.size() != v.shape.size())
      return ctx.emitError() << "equation term '" << dims << "' has "
                             << dims.size() << " letters but input " << i
                             << " has shape " << formatShape(v.shape);
    llvm::SmallSet<char, 8> seen;
    for (auto [d, c] : llvm::enumerate(dims)) {
      if (!llvm::isAlpha(c))
        return ctx.emitError() << "equation '" << equation
                               << "' has an invalid letter '" << c << "'";
      if (!seen.insert(c).second)
        return ctx.emitError() << "equation term '" << dims << "' repeats '"
                               << c << "' (diagonals are not supported)";
      StringRef key(&c, 1);
      ++counts[key];
      auto [it, inserted] = sizes.try_emplace(key, v.shape[d]);
      if (!inserted && it->second != v.shape[d])
        return ctx.emitError() << "letter '" << c << "' has sizes "
                               << it->second << " and " << v.shape[d];
    }
  }
  std::string out = outText.str();
  if (!explicitOut) {
    for (const auto &entry : counts)
      if (entry.getValue() == 1)
        out += entry.getKey().str();
    llvm::sort(out);
  }
  SmallVector<int64_t> outShape;
  for (char c : out) {
    auto it = sizes.find(StringRef(&c, 1));
    if (it == sizes.end())
      return ctx.emitError()
             << "output letter '" << c << "' appears in no input";
    outShape.push_back(it->second);
  }
  Value result =
      operands.size() == 1
          ? buildUnaryEinsum(ctx.b, ctx.loc, ctx.operand(0), operands[0], out,
                             outShape)
          : buildContraction(ctx.b, ctx.loc, ctx.operand(0), ctx.operand(1),
                             operands[0], operands[1], out);
  ctx.setResult(0, result, ctx.input(0).dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateMatMulConverters(ConverterMap &map) {
  map["MatMul"] = convertMatMul;
  map["Gemm"] = convertGemm;
  map["Einsum"] = convertEinsum;
}
