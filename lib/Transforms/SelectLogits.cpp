//===- SelectLogits.cpp - tp-select-logits --------------------------------===//
//
// A prefill chunk of C tokens computes logits for all C positions, but
// generation reads one: the last prompt token's. This pass gives @main an
// input `logits_position` and returns the output's row at that position
// only, [.., 1, ..] on the position dim.
//
// The row is a selection generic, out[.., 0, ..] = sum_p select(p ==
// position, x[.., p, ..], 0): a lookup both emitters read directly (one
// row copied). It then moves up through each producer that computes every
// position from the same position of its inputs alone (the LM head, a
// final norm's scale, a logits bias or soft cap), which then runs on one
// position: a producer with a position loop that is parallel, read by its
// inputs as a plain dim, not read through linalg.index, and whose result
// the selection alone reads. Each input that reads the position gets its
// own selection, which goes on up the same way. It stops at a value read
// elsewhere too (a residual stream that a norm reads twice), where one
// position is copied out of C.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace mlir::tp {
#define GEN_PASS_DEF_SELECTLOGITS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

constexpr llvm::StringLiteral kPositionInput = "logits_position";

/// `shape` with dim `dim` of size 1.
SmallVector<int64_t> oneAt(ArrayRef<int64_t> shape, int64_t dim) {
  SmallVector<int64_t> result(shape);
  result[dim] = 1;
  return result;
}

/// An init of `type` for a generic: a fill like `init`'s when the body
/// reads it (an accumulator), an empty tensor otherwise; null when the
/// body reads an init that is not a fill.
Value newInit(OpBuilder &b, Location loc, Value init, bool read,
              RankedTensorType type) {
  Value empty =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  if (!read)
    return empty;
  auto fill = init.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return nullptr;
  return linalg::FillOp::create(b, loc, fill.getInputs()[0], empty)
      .getResult(0);
}

/// The generic that reads position `position` of dim `dim` of `x`.
linalg::GenericOp selectRow(OpBuilder &b, Location loc, Value x, int64_t dim,
                            Value position) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  MLIRContext *ctx = b.getContext();
  auto resultType =
      RankedTensorType::get(oneAt(type.getShape(), dim), type.getElementType());
  Type element = type.getElementType();
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
  Value init =
      linalg::FillOp::create(
          b, loc, zero,
          tensor::EmptyOp::create(b, loc, resultType.getShape(), element)
              .getResult())
          .getResult(0);
  // Loops: the result's dims, then the position p (a reduction).
  SmallVector<AffineExpr> input, output;
  for (int64_t d = 0; d < rank; ++d) {
    input.push_back(getAffineDimExpr(d == dim ? rank : d, ctx));
    output.push_back(getAffineDimExpr(d, ctx));
  }
  SmallVector<AffineMap> maps = {AffineMap::get(rank + 1, 0, input, ctx),
                                 AffineMap::get(rank + 1, 0, {}, ctx),
                                 AffineMap::get(rank + 1, 0, output, ctx)};
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  return linalg::GenericOp::create(
      b, loc, TypeRange{resultType}, ValueRange{x, position}, ValueRange{init},
      maps, iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value key =
            arith::IndexCastOp::create(nb, nloc, nb.getIndexType(), args[1]);
        Value p = linalg::IndexOp::create(nb, nloc, rank);
        Value hit =
            arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq, p, key);
        Value zeroElement =
            arith::ConstantOp::create(nb, nloc, nb.getZeroAttr(element));
        Value picked =
            arith::SelectOp::create(nb, nloc, hit, args[0], zeroElement);
        Value sum = arith::AddFOp::create(nb, nloc, args[2], picked);
        linalg::YieldOp::create(nb, nloc, sum);
      });
}

/// The loop of `op` that dim `dim` of its result indexes, when `op`
/// computes each index of it from the same index of its inputs alone.
std::optional<unsigned> positionLoop(linalg::GenericOp op, int64_t dim) {
  if (op.getNumDpsInits() != 1 || op.getNumResults() != 1)
    return std::nullopt;
  AffineMap out = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
  if (!out.isProjectedPermutation())
    return std::nullopt;
  auto loopExpr = dyn_cast<AffineDimExpr>(out.getResult(dim));
  if (!loopExpr)
    return std::nullopt;
  unsigned loop = loopExpr.getPosition();
  if (op.getIteratorTypesArray()[loop] != utils::IteratorType::parallel)
    return std::nullopt;
  bool readsIndex = false;
  op.getRegion().walk(
      [&](linalg::IndexOp index) { readsIndex |= index.getDim() == loop; });
  if (readsIndex)
    return std::nullopt;
  for (OpOperand *input : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(input);
    unsigned reads = 0;
    for (AffineExpr expr : map.getResults()) {
      if (!expr.isFunctionOfDim(loop))
        continue;
      if (!isa<AffineDimExpr>(expr))
        return std::nullopt;
      ++reads;
    }
    if (reads > 1)
      return std::nullopt;
  }
  return loop;
}

/// Moves `select` (a selectRow of dim `dim`) above its producer where the
/// producer allows; returns the selections of the producer's inputs it
/// created, or nothing.
SmallVector<std::pair<linalg::GenericOp, int64_t>>
hoist(linalg::GenericOp select, int64_t dim, Value position) {
  Value x = select.getDpsInputs()[0];
  auto producer = x.getDefiningOp<linalg::GenericOp>();
  if (!producer || !x.hasOneUse() || !producer.hasPureTensorSemantics())
    return {};
  std::optional<unsigned> loop = positionLoop(producer, dim);
  if (!loop)
    return {};
  OpBuilder b(producer);
  Location loc = producer.getLoc();
  OpOperand *init = producer.getDpsInitOperand(0);
  auto resultType = cast<RankedTensorType>(select.getResult(0).getType());
  Value newInitValue =
      newInit(b, loc, init->get(), producer.payloadUsesValueFromOperand(init),
              resultType);
  if (!newInitValue)
    return {};
  SmallVector<std::pair<linalg::GenericOp, int64_t>> created;
  SmallVector<Value> inputs;
  for (OpOperand *input : producer.getDpsInputOperands()) {
    AffineMap map = producer.getMatchingIndexingMap(input);
    std::optional<int64_t> read;
    for (auto [r, expr] : llvm::enumerate(map.getResults()))
      if (expr.isFunctionOfDim(*loop))
        read = r;
    if (!read) {
      inputs.push_back(input->get());
      continue;
    }
    linalg::GenericOp inner = selectRow(b, loc, input->get(), *read, position);
    created.push_back({inner, *read});
    inputs.push_back(inner.getResult(0));
  }
  auto moved = linalg::GenericOp::create(
      b, loc, TypeRange{resultType}, inputs, ValueRange{newInitValue},
      producer.getIndexingMapsArray(), producer.getIteratorTypesArray());
  moved->setDiscardableAttrs(producer->getDiscardableAttrDictionary());
  moved.getRegion().takeBody(producer.getRegion());
  select.getResult(0).replaceAllUsesWith(moved.getResult(0));
  select->erase();
  producer->erase();
  return created;
}

struct SelectLogits : tp::impl::SelectLogitsBase<SelectLogits> {
  using SelectLogitsBase::SelectLogitsBase;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func || func.isExternal())
      return;
    auto returnOp = cast<func::ReturnOp>(func.getBody().front().back());
    std::optional<unsigned> result;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      if (auto name = func.getResultAttrOfType<StringAttr>(
              i, TPDialect::kOutputAttrName);
          name && name.getValue() == output)
        result = i;
    if (!result)
      return;
    Value logits = returnOp.getOperand(*result);
    auto type = dyn_cast<RankedTensorType>(logits.getType());
    if (!type || !type.hasStaticShape() || dim < 0 || dim >= type.getRank() ||
        !isa<FloatType>(type.getElementType()) || type.getDimSize(dim) <= 1)
      return;

    // The position input goes after the last model input.
    MLIRContext *ctx = &getContext();
    unsigned index = 0;
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName))
        index = arg.getArgNumber() + 1;
    NamedAttribute name(StringAttr::get(ctx, TPDialect::kInputAttrName),
                        StringAttr::get(ctx, kPositionInput));
    if (failed(func.insertArgument(
            index, RankedTensorType::get({}, IntegerType::get(ctx, 64)),
            DictionaryAttr::get(ctx, {name}), func.getLoc()))) {
      func.emitError("tp-select-logits: cannot add the position input");
      return signalPassFailure();
    }
    Value position = func.getArgument(index);

    OpBuilder b(returnOp);
    linalg::GenericOp select =
        selectRow(b, logits.getLoc(), logits, dim, position);
    returnOp.setOperand(*result, select.getResult(0));
    SmallVector<Type> results(func.getResultTypes());
    results[*result] = select.getResult(0).getType();
    func.setFunctionType(
        FunctionType::get(ctx, func.getArgumentTypes(), results));

    SmallVector<std::pair<linalg::GenericOp, int64_t>> work = {
        {select, int64_t(dim)}};
    while (!work.empty()) {
      auto [next, at] = work.pop_back_val();
      llvm::append_range(work, hoist(next, at, position));
    }
  }
};

} // namespace
