//===- Differentiate.cpp - tp-differentiate
//--------------------------------===//
//
// Reverse-mode differentiation of an imported model: appends to the
// function the gradient of its scalar loss with respect to every trainable
// weight (a float `tp.weight` argument that --freeze does not match).
//
// One rule covers every `linalg.generic` whose body is arith/math on
// scalars (elementwise ops, broadcasts, sum and max reductions,
// contractions): for an input x read through map m, the gradient is a
// generic over the same loops, writing through m and summing over the
// loops m does not read, of dy * d(body)/d(x), the body's derivative built
// by forward mode on its scalars (ScalarDerivative). Named linalg ops are
// generalized first. Reshapes, slices, concats and pads move the gradient
// back the way the value came. The forward values the backward reads stay
// where they are (the stash is the set of forward values a gradient op
// reads). An op on the path from a weight to the loss with no rule is an
// error at its location (the ONNX node).
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPAttrs.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Regex.h"

#include <cmath>

namespace mlir::tp {
#define GEN_PASS_DEF_DIFFERENTIATE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// Forward-mode derivative of a generic's scalar body with respect to one
/// of its block arguments, built in the body of the gradient generic.
class ScalarDerivative {
public:
  ScalarDerivative(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  /// Seeds `arg` with the tangent 1.
  void seed(Value arg) {
    tangents[arg] =
        arith::ConstantOp::create(b, loc, b.getFloatAttr(arg.getType(), 1.0));
  }

  /// The tangent of `v` (null: zero).
  Value tangent(Value v) const { return tangents.lookup(v); }

  /// Computes the tangent of `op`'s result from those of its operands (the
  /// op is already cloned: `op` is the clone). Fails on a float op with a
  /// tangent operand and no rule.
  LogicalResult visit(Operation *op) {
    if (op->getNumResults() != 1)
      return success(llvm::none_of(op->getOperands(),
                                   [&](Value v) { return tangent(v); }));
    Value r = op->getResult(0);
    SmallVector<Value> t;
    bool any = false;
    for (Value v : op->getOperands()) {
      t.push_back(tangent(v));
      any |= bool(t.back());
    }
    if (!any)
      return success();
    if (!isa<FloatType>(r.getType()))
      return success(); // A comparison or cast to an integer: no tangent.
    Value d = derivative(op, t);
    if (!d)
      return op->emitError("tp-differentiate: no differentiation rule for '")
             << op->getName() << "' in a generic's body";
    tangents[r] = d;
    return success();
  }

private:
  Value cst(Type type, double value) {
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(type, value));
  }
  /// a + b where either may be null (zero).
  Value add(Value x, Value y) {
    if (!x)
      return y;
    if (!y)
      return x;
    return arith::AddFOp::create(b, loc, x, y);
  }
  /// x * y where x may be null (zero).
  Value mul(Value x, Value y) {
    return x ? arith::MulFOp::create(b, loc, x, y).getResult() : Value();
  }
  Value neg(Value x) {
    return x ? arith::NegFOp::create(b, loc, x).getResult() : Value();
  }
  Value zeroIfNull(Value x, Type type) { return x ? x : cst(type, 0.0); }

  Value derivative(Operation *op, ArrayRef<Value> t) {
    Value r = op->getResult(0);
    Type type = r.getType();
    auto operand = [&](unsigned i) { return op->getOperand(i); };
    if (isa<arith::AddFOp>(op))
      return add(t[0], t[1]);
    if (isa<arith::SubFOp>(op))
      return add(t[0], neg(t[1]));
    if (isa<arith::MulFOp>(op))
      return add(mul(t[0], operand(1)), mul(t[1], operand(0)));
    if (isa<arith::DivFOp>(op)) {
      // d(a / b) = da / b - (a / b) * db / b
      Value first =
          t[0] ? arith::DivFOp::create(b, loc, t[0], operand(1)).getResult()
               : Value();
      Value second;
      if (t[1])
        second = neg(arith::DivFOp::create(b, loc, mul(t[1], r), operand(1))
                         .getResult());
      return add(first, second);
    }
    if (isa<arith::NegFOp>(op))
      return neg(t[0]);
    if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MinimumFOp,
            arith::MinNumFOp>(op)) {
      bool max = isa<arith::MaximumFOp, arith::MaxNumFOp>(op);
      Value first = arith::CmpFOp::create(
          b, loc, max ? arith::CmpFPredicate::OGE : arith::CmpFPredicate::OLE,
          operand(0), operand(1));
      return arith::SelectOp::create(b, loc, first, zeroIfNull(t[0], type),
                                     zeroIfNull(t[1], type));
    }
    if (isa<arith::SelectOp>(op))
      return arith::SelectOp::create(b, loc, operand(0), zeroIfNull(t[1], type),
                                     zeroIfNull(t[2], type));
    if (isa<arith::ExtFOp>(op))
      return arith::ExtFOp::create(b, loc, type, t[0]);
    if (isa<arith::TruncFOp>(op))
      return arith::TruncFOp::create(b, loc, type, t[0]);
    if (isa<math::ExpOp>(op))
      return mul(t[0], r);
    if (isa<math::LogOp>(op))
      return arith::DivFOp::create(b, loc, t[0], operand(0));
    if (isa<math::TanhOp>(op)) // 1 - tanh^2
      return mul(t[0],
                 arith::SubFOp::create(b, loc, cst(type, 1.0),
                                       arith::MulFOp::create(b, loc, r, r)));
    if (isa<math::ErfOp>(op)) { // 2 / sqrt(pi) * exp(-x^2)
      Value x = operand(0);
      Value e =
          math::ExpOp::create(b, loc, neg(arith::MulFOp::create(b, loc, x, x)));
      return mul(t[0], arith::MulFOp::create(b, loc, e,
                                             cst(type, 2.0 / std::sqrt(M_PI))));
    }
    if (isa<math::SqrtOp>(op)) // 1 / (2 sqrt x)
      return arith::DivFOp::create(
          b, loc, t[0], arith::MulFOp::create(b, loc, cst(type, 2.0), r));
    if (isa<math::RsqrtOp>(op)) // -1/2 x^(-3/2) = -r^3 / 2
      return mul(t[0],
                 arith::MulFOp::create(
                     b, loc, cst(type, -0.5),
                     arith::MulFOp::create(
                         b, loc, r, arith::MulFOp::create(b, loc, r, r))));
    if (isa<math::PowFOp>(op)) {
      // d(a^c) = c a^(c-1) da + a^c log(a) dc
      Value a = operand(0), c = operand(1);
      Value first;
      if (t[0]) {
        Value pow = math::PowFOp::create(
            b, loc, a, arith::SubFOp::create(b, loc, c, cst(type, 1.0)));
        first = mul(t[0], arith::MulFOp::create(b, loc, c, pow));
      }
      Value second;
      if (t[1])
        second = mul(t[1], arith::MulFOp::create(
                               b, loc, r, math::LogOp::create(b, loc, a)));
      return add(first, second);
    }
    if (isa<math::AbsFOp>(op)) {
      Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE,
                                             operand(0), cst(type, 0.0));
      return arith::SelectOp::create(b, loc, positive, t[0], neg(t[0]));
    }
    return {};
  }

  OpBuilder &b;
  Location loc;
  DenseMap<Value, Value> tangents;
};

/// A zero tensor of `type`.
Value zeros(OpBuilder &b, Location loc, RankedTensorType type) {
  Value empty =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  Value zero =
      arith::ConstantOp::create(b, loc, b.getZeroAttr(type.getElementType()));
  return linalg::FillOp::create(b, loc, zero, empty).getResult(0);
}

/// The one `tensor.extract` in `op`'s body from a tensor defined outside
/// it (a Gather at computed indices), if any; failure if there are several.
FailureOr<tensor::ExtractOp> getCapturedRead(linalg::GenericOp op) {
  tensor::ExtractOp found;
  bool several = false;
  op.getBody()->walk([&](tensor::ExtractOp extract) {
    if (op->isAncestor(extract.getTensor().getParentBlock()->getParentOp()) &&
        extract.getTensor().getParentBlock() != op->getBlock())
      return;
    several |= bool(found);
    found = extract;
  });
  if (several)
    return failure();
  return found;
}

/// A gather (`tensor.extract` of a captured tensor `t` at computed
/// indices) as a sum over t's gathered dims of the entry whose position
/// equals the index: y[l] = sum_k (k == idx(l) ? f(t[k]) : 0), with t an
/// operand. The sum is an ordinary reduction, which the rule for generics
/// differentiates (t's gradient sums dy over the positions that read each
/// entry: a scatter-add). A dim indexed by a loop itself stays that loop.
FailureOr<linalg::GenericOp> rewriteGatherAsSum(OpBuilder &b,
                                                linalg::GenericOp op,
                                                tensor::ExtractOp extract) {
  Location loc = op.getLoc();
  auto tableType = dyn_cast<RankedTensorType>(extract.getTensor().getType());
  if (op->getNumResults() != 1 || op.getNumReductionLoops() != 0 ||
      !op.getRegionOutputArgs()[0].use_empty() || !tableType ||
      !tableType.hasStaticShape() ||
      extract->getParentRegion() != &op.getRegion())
    return failure();
  MLIRContext *ctx = b.getContext();
  unsigned loops = op.getNumLoops();
  // Each dim of the table: the loop that indexes it directly, or a new
  // reduction loop over its positions.
  SmallVector<AffineExpr> tableExprs;
  SmallVector<std::pair<unsigned, Value>> gathered; // (new loop, index)
  llvm::SmallDenseSet<unsigned> direct;
  for (Value index : extract.getIndices()) {
    auto loop = index.getDefiningOp<linalg::IndexOp>();
    if (loop && direct.insert(loop.getDim()).second) {
      tableExprs.push_back(getAffineDimExpr(loop.getDim(), ctx));
      continue;
    }
    unsigned newLoop = loops + gathered.size();
    tableExprs.push_back(getAffineDimExpr(newLoop, ctx));
    gathered.push_back({newLoop, index});
  }
  unsigned newLoops = loops + gathered.size();
  SmallVector<AffineMap> maps;
  for (AffineMap map : op.getIndexingMapsArray())
    maps.push_back(AffineMap::get(newLoops, 0, map.getResults(), ctx));
  AffineMap outMap = maps.pop_back_val();
  maps.push_back(AffineMap::get(newLoops, 0, tableExprs, ctx));
  maps.push_back(outMap);
  SmallVector<utils::IteratorType> iterators(loops,
                                             utils::IteratorType::parallel);
  iterators.append(gathered.size(), utils::IteratorType::reduction);
  SmallVector<Value> inputs(op.getDpsInputs());
  inputs.push_back(extract.getTensor());
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  Value init = zeros(b, loc, resultType);
  Block *oldBody = op.getBody();
  unsigned numInputs = op.getNumDpsInputs();
  auto sum = linalg::GenericOp::create(
      b, loc, resultType, inputs, init, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        IRMapping mapping;
        for (unsigned i = 0; i < numInputs; ++i)
          mapping.map(oldBody->getArgument(i), args[i]);
        mapping.map(extract.getResult(), args[numInputs]);
        for (Operation &inner : oldBody->without_terminator())
          if (&inner != extract.getOperation())
            nb.clone(inner, mapping);
        Value match;
        for (auto [newLoop, index] : gathered) {
          Value position = linalg::IndexOp::create(nb, nloc, newLoop);
          Value equal =
              arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::eq,
                                    position, mapping.lookup(index));
          match = match ? arith::AndIOp::create(nb, nloc, match, equal) : equal;
        }
        Value y =
            mapping.lookupOrDefault(oldBody->getTerminator()->getOperand(0));
        Value zero = arith::ConstantOp::create(
            nb, nloc, nb.getZeroAttr(resultType.getElementType()));
        Value picked =
            match ? arith::SelectOp::create(nb, nloc, match, y, zero) : y;
        Value acc = args.back();
        Value total = gathered.empty()
                          ? picked
                          : arith::AddFOp::create(nb, nloc, acc, picked);
        linalg::YieldOp::create(nb, nloc, total);
      });
  return sum;
}

/// `grad` without the inputs its body no longer reads once the forward
/// ops the derivative does not need are gone (the derivative of a bias add
/// reads neither operand): the backward stashes only what it uses, and
/// leaves the forward's values single-use where they were.
linalg::GenericOp dropUnusedInputs(OpBuilder &b, linalg::GenericOp grad) {
  Block *body = grad.getBody();
  SmallVector<Operation *> ops;
  for (Operation &inner : body->without_terminator())
    ops.push_back(&inner);
  for (Operation *inner : llvm::reverse(ops))
    if (inner->use_empty() && isMemoryEffectFree(inner))
      inner->erase();
  SmallVector<unsigned> kept;
  for (unsigned i = 0, e = grad.getNumDpsInputs(); i < e; ++i)
    if (!body->getArgument(i).use_empty())
      kept.push_back(i);
  if (kept.size() == grad.getNumDpsInputs())
    return grad;
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (unsigned i : kept) {
    inputs.push_back(grad.getDpsInputs()[i]);
    maps.push_back(grad.getIndexingMapsArray()[i]);
  }
  maps.push_back(grad.getIndexingMapsArray().back());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(grad);
  auto trimmed = linalg::GenericOp::create(
      b, grad.getLoc(), grad->getResultTypes(), inputs, grad.getDpsInits(),
      maps, grad.getIteratorTypesArray());
  trimmed.getRegion().takeBody(grad.getRegion());
  llvm::BitVector dropped(trimmed.getBody()->getNumArguments());
  for (unsigned i = 0, e = grad.getNumDpsInputs(); i < e; ++i)
    if (!llvm::is_contained(kept, i))
      dropped.set(i);
  trimmed.getBody()->eraseArguments(dropped);
  grad->replaceAllUsesWith(trimmed);
  grad->erase();
  return trimmed;
}

/// How a generic's body combines its value with the init: y = f(ins)
/// (the init unread), y = init + f(ins) (a sum), or y = max(init, f(ins)).
enum class Accumulation { None, Sum, Max };

struct Differentiator {
  func::FuncOp func = nullptr;
  DenseMap<Value, Value> grads;
  /// Values that depend on a trainable weight.
  llvm::DenseSet<Value> active;

  /// Adds `g` to the gradient of `v`.
  void accumulate(OpBuilder &b, Location loc, Value v, Value g) {
    auto [it, inserted] = grads.try_emplace(v, g);
    if (inserted)
      return;
    auto type = cast<RankedTensorType>(g.getType());
    AffineMap id = b.getMultiDimIdentityMap(type.getRank());
    Value empty =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    auto sum = linalg::GenericOp::create(
        b, loc, type, ValueRange{it->second, g}, ValueRange{empty},
        ArrayRef<AffineMap>{id, id, id},
        SmallVector<utils::IteratorType>(type.getRank(),
                                         utils::IteratorType::parallel),
        [](OpBuilder &nb, Location nloc, ValueRange args) {
          linalg::YieldOp::create(
              nb, nloc,
              ValueRange{arith::AddFOp::create(nb, nloc, args[0], args[1])});
        });
    it->second = sum.getResult(0);
  }

  /// Marks what depends on `weights`; a gather from such a value becomes
  /// a sum (rewriteGatherAsSum). Run before `run`.
  LogicalResult findActive(ArrayRef<BlockArgument> weights);
  /// Appends the backward from `loss`; `results` are the weights'
  /// gradients. The loss's tangent is 1, or `scale` (a scalar of the
  /// loss's element type) where given.
  LogicalResult run(Value loss, ArrayRef<BlockArgument> weights,
                    SmallVectorImpl<Value> &results, Value scale = {});
  LogicalResult backward(OpBuilder &b, Operation *op);
  LogicalResult backwardGeneric(OpBuilder &b, linalg::GenericOp op);
};

/// The accumulation of `op`'s body into its init, and the value it
/// accumulates (the yielded value where the init is unread).
std::optional<std::pair<Accumulation, Value>>
getAccumulation(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  Value out = body.getArgument(op.getNumDpsInputs());
  Value yielded = body.getTerminator()->getOperand(0);
  if (out.use_empty())
    return std::make_pair(Accumulation::None, yielded);
  Operation *def = yielded.getDefiningOp();
  if (!def || def->getNumOperands() != 2 || !out.hasOneUse())
    return std::nullopt;
  Value other = def->getOperand(0) == out   ? def->getOperand(1)
                : def->getOperand(1) == out ? def->getOperand(0)
                                            : Value();
  if (!other)
    return std::nullopt;
  if (isa<arith::AddFOp>(def))
    return std::make_pair(Accumulation::Sum, other);
  if (isa<arith::MaximumFOp, arith::MaxNumFOp>(def))
    return std::make_pair(Accumulation::Max, other);
  return std::nullopt;
}

LogicalResult Differentiator::backwardGeneric(OpBuilder &b,
                                              linalg::GenericOp op) {
  Location loc = op.getLoc();
  if (op->getNumResults() != 1)
    return op.emitError("tp-differentiate: a generic with ")
           << op->getNumResults() << " results has no differentiation rule";
  Value y = op->getResult(0);
  Value dy = grads.lookup(y);
  auto accumulation = getAccumulation(op);
  if (!accumulation)
    return op.emitError("tp-differentiate: no differentiation rule for a "
                        "generic that combines its init other than by a sum "
                        "or a max");
  auto [kind, value] = *accumulation;
  Block &body = op.getRegion().front();
  unsigned numInputs = op.getNumDpsInputs();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  AffineMap outMap = maps[numInputs];
  OpOperand &init = op.getDpsInitsMutable()[0];
  // The init reaches y unchanged where the body sums into it.
  if (active.contains(init.get())) {
    if (kind != Accumulation::Sum || !outMap.isIdentity())
      return op.emitError("tp-differentiate: no differentiation rule for a "
                          "generic accumulating into a value that depends "
                          "on a weight");
    accumulate(b, loc, init.get(), dy);
  }
  for (unsigned i = 0; i < numInputs; ++i) {
    Value x = op.getDpsInputs()[i];
    if (!active.contains(x))
      continue;
    auto xType = cast<RankedTensorType>(x.getType());
    AffineMap xMap = maps[i];
    if (!xMap.isProjectedPermutation())
      return op.emitError("tp-differentiate: no differentiation rule for "
                          "input ")
             << i << " (read through a map that is not a plain subset of "
             << "the loops)";
    // The loops x reads are the gradient's parallel loops, the others are
    // summed over; the parallel ones go first (in x's order), as in the
    // forms the code generators know (a matmul's m, n, k).
    unsigned numLoops = op.getNumLoops();
    SmallVector<unsigned> order;
    for (AffineExpr e : xMap.getResults())
      order.push_back(cast<AffineDimExpr>(e).getPosition());
    unsigned numParallel = order.size();
    for (unsigned l = 0; l < numLoops; ++l)
      if (!xMap.isFunctionOfDim(l))
        order.push_back(l);
    SmallVector<unsigned> position(numLoops);
    SmallVector<AffineExpr> renamed(numLoops);
    for (auto [i, l] : llvm::enumerate(order)) {
      position[l] = i;
      renamed[l] = b.getAffineDimExpr(i);
    }
    auto reorder = [&](AffineMap map) {
      return map.replaceDimsAndSymbols(renamed, {}, numLoops, 0);
    };
    SmallVector<utils::IteratorType> iterators(numLoops,
                                               utils::IteratorType::reduction);
    std::fill_n(iterators.begin(), numParallel, utils::IteratorType::parallel);
    SmallVector<Value> inputs(op.getDpsInputs());
    SmallVector<AffineMap> gradMaps;
    for (unsigned j = 0; j < numInputs; ++j)
      gradMaps.push_back(reorder(maps[j]));
    inputs.push_back(dy);
    gradMaps.push_back(reorder(outMap));
    if (kind == Accumulation::Max) {
      inputs.push_back(y);
      gradMaps.push_back(reorder(outMap));
    }
    gradMaps.push_back(reorder(xMap));
    LogicalResult status = success();
    Value init = numParallel == numLoops
                     ? tensor::EmptyOp::create(b, loc, xType.getShape(),
                                               xType.getElementType())
                           .getResult()
                     : zeros(b, loc, xType);
    auto grad = linalg::GenericOp::create(
        b, loc, xType, inputs, ValueRange{init}, gradMaps, iterators,
        [&](OpBuilder &nb, Location nloc, ValueRange args) {
          IRMapping mapping;
          for (unsigned j = 0; j < numInputs; ++j)
            mapping.map(body.getArgument(j), args[j]);
          ScalarDerivative derivative(nb, nloc);
          derivative.seed(args[i]);
          for (Operation &inner : body.without_terminator()) {
            // The accumulation itself is not part of f(ins).
            if (llvm::is_contained(inner.getOperands(),
                                   body.getArgument(numInputs)))
              continue;
            Operation *clone = nb.clone(inner, mapping);
            if (auto index = dyn_cast<linalg::IndexOp>(clone))
              index.setDim(position[index.getDim()]);
            if (failed(derivative.visit(clone)))
              status = failure();
          }
          Value dydx = derivative.tangent(mapping.lookupOrDefault(value));
          Value acc = args.back();
          Value dyArg = args[numInputs];
          Value contribution =
              dydx ? arith::MulFOp::create(nb, nloc, dyArg, dydx).getResult()
                   : Value();
          if (contribution && kind == Accumulation::Max) {
            // Only where this element is the maximum.
            Value isMax = arith::CmpFOp::create(
                nb, nloc, arith::CmpFPredicate::OEQ,
                mapping.lookupOrDefault(value), args[numInputs + 1]);
            contribution = arith::SelectOp::create(
                nb, nloc, isMax, contribution,
                arith::ConstantOp::create(nb, nloc,
                                          nb.getZeroAttr(acc.getType())));
          }
          // Without a reduction loop each element is written once: the
          // body does not read its init (an elementwise op, as the code
          // generators expect one).
          Value result;
          if (numParallel == numLoops)
            result = contribution
                         ? contribution
                         : arith::ConstantOp::create(
                               nb, nloc, nb.getZeroAttr(acc.getType()));
          else
            result = contribution
                         ? arith::AddFOp::create(nb, nloc, acc, contribution)
                               .getResult()
                         : acc;
          linalg::YieldOp::create(nb, nloc, result);
        });
    if (failed(status))
      return op.emitError("tp-differentiate: cannot differentiate the body "
                          "of this op");
    grad = dropUnusedInputs(b, grad);
    accumulate(b, loc, x, grad.getResult(0));
  }
  return success();
}

LogicalResult Differentiator::backward(OpBuilder &b, Operation *op) {
  Location loc = op->getLoc();
  if (auto generic = dyn_cast<linalg::GenericOp>(op))
    return backwardGeneric(b, generic);
  if (op->getNumResults() != 1)
    return op->emitError("tp-differentiate: no differentiation rule for '")
           << op->getName() << "'";
  Value dy = grads.lookup(op->getResult(0));
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op)) {
    accumulate(
        b, loc, expand.getSrc(),
        tensor::CollapseShapeOp::create(b, loc, expand.getSrcType(), dy,
                                        expand.getReassociationIndices()));
    return success();
  }
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op)) {
    accumulate(
        b, loc, collapse.getSrc(),
        tensor::ExpandShapeOp::create(b, loc, collapse.getSrcType(), dy,
                                      collapse.getReassociationIndices()));
    return success();
  }
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    if (slice.getResultType().getRank() != slice.getSourceType().getRank())
      return op->emitError("tp-differentiate: no differentiation rule for a "
                           "rank-reducing slice");
    Value base = zeros(b, loc, slice.getSourceType());
    accumulate(b, loc, slice.getSource(),
               tensor::InsertSliceOp::create(
                   b, loc, dy, base, slice.getMixedOffsets(),
                   slice.getMixedSizes(), slice.getMixedStrides()));
    return success();
  }
  if (auto concat = dyn_cast<tensor::ConcatOp>(op)) {
    auto type = cast<RankedTensorType>(dy.getType());
    int64_t offset = 0;
    for (Value input : concat.getInputs()) {
      auto inputType = cast<RankedTensorType>(input.getType());
      if (active.contains(input)) {
        SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0)),
            sizes, strides(type.getRank(), b.getIndexAttr(1));
        for (int64_t size : inputType.getShape())
          sizes.push_back(b.getIndexAttr(size));
        offsets[concat.getDim()] = b.getIndexAttr(offset);
        accumulate(b, loc, input,
                   tensor::ExtractSliceOp::create(b, loc, inputType, dy,
                                                  offsets, sizes, strides));
      }
      offset += inputType.getDimSize(concat.getDim());
    }
    return success();
  }
  if (auto pad = dyn_cast<tensor::PadOp>(op)) {
    if (!pad.getLow().empty() || !pad.getHigh().empty())
      return op->emitError("tp-differentiate: no differentiation rule for a "
                           "pad by a computed amount");
    auto type = pad.getSourceType();
    SmallVector<OpFoldResult> offsets, sizes,
        strides(type.getRank(), b.getIndexAttr(1));
    for (auto [low, size] :
         llvm::zip_equal(pad.getStaticLow(), type.getShape())) {
      offsets.push_back(b.getIndexAttr(low));
      sizes.push_back(b.getIndexAttr(size));
    }
    accumulate(b, loc, pad.getSource(),
               tensor::ExtractSliceOp::create(b, loc, type, dy, offsets, sizes,
                                              strides));
    return success();
  }
  return op->emitError("tp-differentiate: no differentiation rule for '")
         << op->getName() << "' on the path from a weight to the loss";
}

LogicalResult Differentiator::findActive(ArrayRef<BlockArgument> weights) {
  Block &block = func.getBody().front();
  // Forward: what depends on a weight, read as an operand or inside a body
  // (a Gather's table).
  for (BlockArgument w : weights)
    active.insert(w);
  auto readsActive = [&](Operation &op) {
    bool reads = false;
    op.walk([&](Operation *inner) {
      reads |= llvm::any_of(inner->getOperands(),
                            [&](Value v) { return active.contains(v); });
    });
    return reads;
  };
  for (Operation &op : llvm::make_early_inc_range(block.without_terminator())) {
    if (!readsActive(op))
      continue;
    // A gather from a value that depends on a weight becomes a sum the
    // rule for generics differentiates.
    if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
      FailureOr<tensor::ExtractOp> read = getCapturedRead(generic);
      if (failed(read))
        return generic.emitError("tp-differentiate: no differentiation rule "
                                 "for a generic reading several tensors "
                                 "inside its body");
      if (*read && active.contains(read->getTensor())) {
        OpBuilder b(generic);
        FailureOr<linalg::GenericOp> sum =
            rewriteGatherAsSum(b, generic, *read);
        if (failed(sum))
          return generic.emitError("tp-differentiate: no differentiation "
                                   "rule for this gather from a value that "
                                   "depends on a weight");
        Operation *init = generic.getDpsInits()[0].getDefiningOp();
        generic->replaceAllUsesWith(*sum);
        generic->erase();
        // Its init (an empty, or a fill of one) is dead now; partition
        // cannot leave a dead tensor unannotated.
        while (init && init->use_empty() && isMemoryEffectFree(init)) {
          Operation *next = init->getNumOperands()
                                ? init->getOperands().back().getDefiningOp()
                                : nullptr;
          init->erase();
          init = next;
        }
        active.insert(sum->getResult(0));
        continue;
      }
    }
    for (Value r : op.getResults())
      if (isa<FloatType>(getElementTypeOrSelf(r.getType())))
        active.insert(r);
  }
  return success();
}

LogicalResult Differentiator::run(Value loss, ArrayRef<BlockArgument> weights,
                                  SmallVectorImpl<Value> &results,
                                  Value scale) {
  Block &block = func.getBody().front();
  if (!active.contains(loss))
    return func.emitError("tp-differentiate: the loss does not depend on any "
                          "trainable weight");
  // Backward: from the loss, in reverse order, over what has a gradient.
  OpBuilder b = OpBuilder::atBlockTerminator(&block);
  auto lossType = cast<RankedTensorType>(loss.getType());
  Location loc = loss.getLoc();
  Value seed = tensor::EmptyOp::create(b, loc, lossType.getShape(),
                                       lossType.getElementType());
  if (scale) {
    // The scale, a rank-0 tensor, broadcast to the loss's shape.
    MLIRContext *context = b.getContext();
    AffineMap toScalar = AffineMap::get(lossType.getRank(), 0, context);
    AffineMap identity = b.getMultiDimIdentityMap(lossType.getRank());
    grads[loss] = linalg::GenericOp::create(
                      b, loc, lossType, ValueRange{scale}, ValueRange{seed},
                      ArrayRef<AffineMap>{toScalar, identity},
                      SmallVector<utils::IteratorType>(
                          lossType.getRank(), utils::IteratorType::parallel),
                      [](OpBuilder &nb, Location nloc, ValueRange args) {
                        linalg::YieldOp::create(nb, nloc, args[0]);
                      })
                      .getResult(0);
  } else {
    Value one = arith::ConstantOp::create(
        b, loc, b.getFloatAttr(lossType.getElementType(), 1.0));
    grads[loss] = linalg::FillOp::create(b, loc, one, seed).getResult(0);
  }
  SmallVector<Operation *> forward;
  for (Operation &op : block.without_terminator())
    forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward)) {
    if (op->getNumResults() == 0 ||
        llvm::none_of(op->getResults(),
                      [&](Value r) { return grads.contains(r); }))
      continue;
    if (failed(backward(b, op)))
      return failure();
  }
  for (BlockArgument w : weights) {
    Value g = grads.lookup(w);
    results.push_back(
        g ? g : zeros(b, w.getLoc(), cast<RankedTensorType>(w.getType())));
  }
  return success();
}

struct Differentiate : tp::impl::DifferentiateBase<Differentiate> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func) {
      module.emitError("tp-differentiate: no @main");
      return signalPassFailure();
    }
    if (failed(differentiate(func)))
      signalPassFailure();
  }

  /// The result of `func` that is the loss: the one named --loss, else the
  /// only scalar float result.
  FailureOr<unsigned> findLoss(func::FuncOp func) {
    auto results = func.getResultTypes();
    std::optional<unsigned> found;
    for (unsigned i = 0; i < results.size(); ++i) {
      auto name =
          func.getResultAttrOfType<StringAttr>(i, TPDialect::kOutputAttrName);
      auto type = dyn_cast<RankedTensorType>(results[i]);
      bool scalar = type && type.getNumElements() == 1 &&
                    isa<FloatType>(type.getElementType());
      if (!loss.empty()) {
        if (!name || name.getValue() != loss)
          continue;
        if (!scalar)
          return func.emitError("tp-differentiate: the loss '")
                 << loss << "' is " << results[i] << ", not a scalar";
        return i;
      }
      if (!scalar)
        continue;
      if (found)
        return func.emitError("tp-differentiate: more than one scalar "
                              "output; name the loss with loss=NAME");
      found = i;
    }
    if (!found)
      return loss.empty()
                 ? func.emitError("tp-differentiate: no scalar float "
                                  "output to differentiate (name the loss "
                                  "with loss=NAME)")
                 : func.emitError("tp-differentiate: no output named '")
                       << loss << "'";
    return *found;
  }

  /// Each trainable initializer's name with its gradient: a weight's own,
  /// or the pieces of a fused one concatenated in their order (with
  /// perArgument, each piece's own under its artifact name).
  FailureOr<SmallVector<std::pair<StringAttr, Value>>>
  joinPieces(func::FuncOp func, ArrayRef<BlockArgument> weights,
             ArrayRef<Value> gradients) {
    llvm::MapVector<StringAttr, SmallVector<std::pair<LayoutAttr, Value>>>
        byName;
    for (auto [w, g] : llvm::zip_equal(weights, gradients)) {
      auto name = func.getArgAttrOfType<StringAttr>(w.getArgNumber(),
                                                    TPDialect::kWeightAttrName);
      byName[name].push_back({getLayout(func, w.getArgNumber()), g});
    }
    SmallVector<std::pair<StringAttr, Value>> named;
    OpBuilder b = OpBuilder::atBlockTerminator(&func.getBody().front());
    for (auto &[name, pieces] : byName) {
      LayoutAttr first = pieces.front().first;
      if (perArgument) {
        for (auto &[layout, g] : pieces)
          named.push_back(
              {StringAttr::get(
                   func.getContext(),
                   getPieceName(name.getValue(), layout,
                                cast<RankedTensorType>(g.getType()).getRank())),
               g});
        continue;
      }
      if (pieces.size() == 1 && (!first || !first.isPiece())) {
        named.push_back({name, pieces.front().second});
        continue;
      }
      if (llvm::any_of(pieces, [](const auto &p) {
            return !p.first || !p.first.isPiece();
          }))
        return func.emitError("tp-differentiate: weight '")
               << name.getValue() << "' is both whole and in pieces";
      llvm::sort(pieces, [](const auto &a, const auto &b) {
        return a.first.getSliceOffset() < b.first.getSliceOffset();
      });
      int64_t dim = pieces.front().first.getDim(), next = 0;
      SmallVector<Value> parts;
      for (auto &[layout, g] : pieces) {
        if (layout.getDim() != dim || layout.getSliceOffset() != next)
          return func.emitError("tp-differentiate: the pieces of weight '")
                 << name.getValue() << "' do not tile it along one dim";
        next += layout.getSliceSize();
        parts.push_back(g);
      }
      named.push_back(
          {name, tensor::ConcatOp::create(b, func.getLoc(), dim, parts)});
    }
    return named;
  }

  LogicalResult differentiate(func::FuncOp func) {
    if (!func.getBody().hasOneBlock())
      return func.emitError("tp-differentiate: @main has more than one block");
    FailureOr<unsigned> lossIndex = findLoss(func);
    if (failed(lossIndex))
      return failure();
    // Named ops become generics, whose one rule covers them.
    IRRewriter rewriter(func.getContext());
    SmallVector<linalg::LinalgOp> named;
    func.walk([&](linalg::LinalgOp op) {
      if (!isa<linalg::GenericOp, linalg::FillOp>(op))
        named.push_back(op);
    });
    for (linalg::LinalgOp op : named) {
      rewriter.setInsertionPoint(op);
      if (failed(linalg::generalizeNamedOp(rewriter, op)))
        return op.emitError("tp-differentiate: cannot generalize this op");
    }
    llvm::Regex frozen(freeze);
    if (std::string error; !freeze.empty() && !frozen.isValid(error))
      return func.emitError("tp-differentiate: freeze='")
             << freeze << "': " << error;
    SmallVector<BlockArgument> weights;
    bool froze = false;
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    TPDialect::kWeightAttrName);
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!name || !type || !isa<FloatType>(type.getElementType()))
        continue;
      if (!freeze.empty() && frozen.match(name.getValue())) {
        froze = true;
        continue;
      }
      weights.push_back(arg);
    }
    if (!freeze.empty() && !froze)
      return func.emitError("tp-differentiate: freeze='")
             << freeze << "' matches no weight";
    if (weights.empty())
      return func.emitError("tp-differentiate: no trainable weight");

    Operation *ret = func.getBody().front().getTerminator();
    // Dynamic loss scaling: the backward starts from a new input, the
    // scale, instead of 1, so that every gradient comes out multiplied by
    // it and small ones survive a narrow type; the runtime divides it out.
    Value scale;
    if (scaledLoss) {
      Value loss = ret->getOperand(*lossIndex);
      auto lossType = cast<RankedTensorType>(loss.getType());
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        if (auto name =
                func.getArgAttrOfType<StringAttr>(i, TPDialect::kInputAttrName);
            name && name.getValue() == TPDialect::kLossScaleInputName)
          return func.emitError("tp-differentiate: scaled-loss adds the "
                                "input '")
                 << TPDialect::kLossScaleInputName
                 << "', which the model has already";
      auto type = RankedTensorType::get({}, lossType.getElementType());
      unsigned index = func.getNumArguments();
      Builder b(func.getContext());
      if (failed(func.insertArgument(
              index, type,
              b.getDictionaryAttr(b.getNamedAttr(
                  TPDialect::kInputAttrName,
                  b.getStringAttr(TPDialect::kLossScaleInputName))),
              loss.getLoc())))
        return failure();
      scale = func.getArgument(index);
    }
    Differentiator d;
    d.func = func;
    if (failed(d.findActive(weights)))
      return failure();
    llvm::DenseSet<Operation *> forward;
    for (Operation &op : func.getBody().front())
      forward.insert(&op);
    SmallVector<Value> gradients;
    if (failed(d.run(ret->getOperand(*lossIndex), weights, gradients, scale)))
      return failure();
    // Every op built here is the backward's (marked below): the planner
    // splits the forward and lets the backward follow.
    // The gradients are new results, named after their weights; the
    // pieces of a fused weight (tp-split-fused-weights) are joined back
    // into one gradient of the initializer.
    FailureOr<SmallVector<std::pair<StringAttr, Value>>> outputs =
        joinPieces(func, weights, gradients);
    if (failed(outputs))
      return failure();
    for (Operation &op : func.getBody().front())
      if (!forward.contains(&op) && &op != ret)
        op.setAttr(TPDialect::kBackwardAttrName, rewriter.getUnitAttr());
    SmallVector<Value> operands(ret->getOperands());
    unsigned first = operands.size();
    SmallVector<Type> types(func.getResultTypes());
    SmallVector<DictionaryAttr> attrs;
    for (unsigned i = 0; i < first; ++i)
      attrs.push_back(func.getResultAttrDict(i));
    Builder b(func.getContext());
    for (auto [name, g] : *outputs) {
      operands.push_back(g);
      types.push_back(g.getType());
      attrs.push_back(b.getDictionaryAttr(
          b.getNamedAttr(TPDialect::kOutputAttrName,
                         b.getStringAttr("grad." + name.getValue()))));
    }
    ret->setOperands(operands);
    func.setType(
        FunctionType::get(func.getContext(), func.getArgumentTypes(), types));
    func.setAllResultAttrs(attrs);
    return success();
  }
};

} // namespace
