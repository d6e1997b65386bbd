//===- LossOps.cpp - ONNX training losses ---------------------------------===//
//
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, as a model
// exported with its labels holds them (torch's cross_entropy and nll_loss).
// The target's entry of each row is picked by a reduction over the class
// dim that keeps the one class equal to the target (a compare on
// linalg.index), not by a gather: the class dim is then an ordinary
// reduction, which tp-differentiate's one rule for generics differentiates
// and which a vocabulary split turns into a partial sum and one all-reduce
// (Megatron-LM's target-logit all-reduce of its vocabulary-parallel
// cross-entropy).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

/// The loss of each row, -input[n, target, d...] * weight[target] (0 for an
/// ignored target), and the weight each row counts for in a mean.
struct PickedRows {
  Value losses;
  Value counts;
};

/// Sums `picked(input[n, c, d...], weight[c])` over the classes c equal to
/// the row's target, skipping targets equal to `ignoreIndex`.
Value buildPick(
    OpBuilder &b, Location loc, Value input, Value target, Value weight,
    std::optional<int64_t> ignoreIndex,
    function_ref<Value(OpBuilder &, Location, Value x, Value w)> picked) {
  MLIRContext *ctx = b.getContext();
  auto inputType = getTensorType(input);
  auto targetType = getTensorType(target);
  Type elementType = inputType.getElementType();
  Type indexType = targetType.getElementType();
  int64_t rank = inputType.getRank();
  // Loops (n, c, d1, ...): the class loop c reduces.
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators[1] = utils::IteratorType::reduction;
  SmallVector<AffineExpr> rowExprs;
  for (int64_t d = 0; d < rank; ++d)
    if (d != 1)
      rowExprs.push_back(getAffineDimExpr(d, ctx));
  AffineMap rowMap = AffineMap::get(rank, 0, rowExprs, ctx);
  SmallVector<Value> inputs = {input, target};
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(rank), rowMap};
  if (weight) {
    inputs.push_back(weight);
    maps.push_back(AffineMap::get(rank, 0, getAffineDimExpr(1, ctx)));
  }
  maps.push_back(rowMap);
  Value init =
      createFilled(b, loc, targetType.getShape(), elementType, /*value=*/0.0);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), inputs, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value x = args[0], t = args[1];
        Value w = weight ? args[2] : Value();
        Value acc = args.back();
        Value c = arith::IndexCastOp::create(
            nb, nloc, indexType, linalg::IndexOp::create(nb, nloc, 1));
        Value match =
            arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq, t, c);
        if (ignoreIndex) {
          Value ignored = arith::ConstantOp::create(
              nb, nloc, nb.getIntegerAttr(indexType, *ignoreIndex));
          Value kept = arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::ne,
                                             t, ignored);
          match = arith::AndIOp::create(nb, nloc, match, kept);
        }
        Value zero = createScalar(nb, nloc, elementType, 0.0);
        Value contribution = arith::SelectOp::create(
            nb, nloc, match, picked(nb, nloc, x, w), zero);
        Value sum = arith::AddFOp::create(nb, nloc, acc, contribution);
        linalg::YieldOp::create(nb, nloc, sum);
      });
  return generic.getResult(0);
}

/// The rows' losses and the weights a mean divides by.
PickedRows buildNegativeLogLikelihood(OpBuilder &b, Location loc, Value input,
                                      Value target, Value weight,
                                      std::optional<int64_t> ignoreIndex) {
  auto targetType = getTensorType(target);
  Type elementType = getTensorType(input).getElementType();
  Value losses =
      buildPick(b, loc, input, target, weight, ignoreIndex,
                [](OpBuilder &nb, Location nloc, Value x, Value w) -> Value {
                  Value loss = arith::NegFOp::create(nb, nloc, x);
                  return w ? arith::MulFOp::create(nb, nloc, loss, w) : loss;
                });
  Value counts;
  if (weight) {
    // The target's class weight: a pick over the classes that reads only
    // the weight.
    counts = buildPick(b, loc, input, target, weight, ignoreIndex,
                       [](OpBuilder &, Location, Value, Value w) { return w; });
  } else {
    counts = buildElementwise(
        b, loc, target, targetType.getShape(), elementType,
        [&](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
          Value one = createScalar(nb, nloc, elementType, 1.0);
          if (!ignoreIndex)
            return one;
          Value ignored = arith::ConstantOp::create(
              nb, nloc,
              nb.getIntegerAttr(targetType.getElementType(), *ignoreIndex));
          Value kept = arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::ne,
                                             s[0], ignored);
          return arith::SelectOp::create(
              nb, nloc, kept, one, createScalar(nb, nloc, elementType, 0.0));
        });
  }
  return {losses, counts};
}

/// The sum of every entry of `v`, as a rank-0 tensor.
Value buildTotal(OpBuilder &b, Location loc, Value v) {
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < getTensorType(v).getRank(); ++d)
    axes.push_back(d);
  return buildReduction(b, loc, v, axes, /*keepDims=*/false, 0.0,
                        [](OpBuilder &nb, Location nloc, Value acc, Value x) {
                          return createAdd(nb, nloc, acc, x);
                        });
}

/// Both losses after the log-probabilities: checks the operands, picks the
/// rows and applies the reduction.
LogicalResult convertLoss(NodeContext &ctx, bool softmax) {
  const ImportedValue &x = ctx.input(0);
  const ImportedValue &t = ctx.input(1);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "input 0 must be floating point, got "
                           << dtypeName(x.dtype);
  if (x.shape.size() < 2)
    return ctx.emitError() << "input 0 must be [N, C, d1, ...] (rank >= 2), "
                              "got "
                           << formatShape(x.shape);
  if (t.dtype != onnx::TensorProto::INT64 &&
      t.dtype != onnx::TensorProto::INT32)
    return ctx.emitError() << "the target (input 1) must be int32 or int64, "
                              "got "
                           << dtypeName(t.dtype);
  SmallVector<int64_t> rows(x.shape);
  rows.erase(rows.begin() + 1);
  if (t.shape != rows)
    return ctx.emitError() << "the target (input 1) must be "
                           << formatShape(rows) << " for input 0 of "
                           << formatShape(x.shape) << ", got "
                           << formatShape(t.shape);
  int64_t classes = x.shape[1];
  bool weighted = ctx.hasInput(2);
  if (weighted && (ctx.input(2).shape != SmallVector<int64_t>{classes} ||
                   ctx.input(2).dtype != x.dtype))
    return ctx.emitError() << "the class weights (input 2) must be [" << classes
                           << "] of the input's type, got "
                           << formatShape(ctx.input(2).shape);
  std::string reduction = ctx.attrString("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return ctx.emitError() << "reduction '" << reduction
                           << "' is not one of mean, sum, none";
  std::optional<int64_t> ignoreIndex;
  if (ctx.attr("ignore_index"))
    ignoreIndex = ctx.attrInt("ignore_index", 0);

  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value input = ctx.operand(0);
  if (softmax) {
    input = buildSoftmax(b, loc, input, /*axes=*/{1}, /*log=*/true);
    if (ctx.hasOutput(1))
      ctx.setResult(1, input, x.dtype);
  }
  PickedRows picked = buildNegativeLogLikelihood(
      b, loc, input, ctx.operand(1), weighted ? ctx.operand(2) : Value(),
      ignoreIndex);
  if (reduction == "none") {
    ctx.setResult(0, picked.losses, x.dtype);
    return success();
  }
  Value total = buildTotal(b, loc, picked.losses);
  if (reduction == "mean") {
    Value count = buildTotal(b, loc, picked.counts);
    total = buildElementwise(
        b, loc, ValueRange{total, count}, {},
        getTensorType(total).getElementType(),
        [](OpBuilder &nb, Location nloc, ValueRange s) -> Value {
          return arith::DivFOp::create(nb, nloc, s[0], s[1]);
        });
  }
  ctx.setResult(0, total, x.dtype);
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateLossConverters(ConverterMap &map) {
  map["NegativeLogLikelihoodLoss"] = [](NodeContext &ctx) {
    return convertLoss(ctx, /*softmax=*/false);
  };
  map["SoftmaxCrossEntropyLoss"] = [](NodeContext &ctx) {
    return convertLoss(ctx, /*softmax=*/true);
  };
}
