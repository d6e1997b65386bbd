//===- ConvertDType.cpp - tp-convert-dtype --------------------------------===//
//
// Mixed precision: f32 weights and activations are stored in bf16 or f16,
// arithmetic and accumulation stay in f32. The pass walks each function
// once, in order; a value's type says how it is stored, and each op that
// reads a narrowed value either takes it as it is (a linalg.generic, which
// extends it in its body; a reshape, slice or collective, which only moves
// it) or is given an f32 copy.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::tp {
#define GEN_PASS_DEF_CONVERTDTYPE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

bool isF32Tensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getElementType().isF32();
}

/// Ops that only move elements: they take a narrowed operand as it is, and
/// their result is narrowed with it.
bool movesElements(Operation *op) {
  return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
             tensor::ExtractSliceOp, tensor::CastOp, shard::AllReduceOp,
             shard::AllGatherOp, shard::AllSliceOp, shard::ReduceScatterOp,
             shard::AllToAllOp, shard::BroadcastOp>(op);
}

bool hasReduction(linalg::GenericOp op) {
  return llvm::any_of(op.getIteratorTypesArray(), [](utils::IteratorType t) {
    return t == utils::IteratorType::reduction;
  });
}

class Converter {
public:
  Converter(FloatType narrow, bool masterWeights)
      : narrow(narrow), masterWeights(masterWeights) {}

  void run(func::FuncOp func);

private:
  Type narrowedType(Type type) const {
    auto tensor = cast<RankedTensorType>(type);
    return tensor.clone(narrow);
  }
  /// Whether the pass narrowed `value` (a model that holds f16 values of
  /// its own keeps them as they are).
  bool isNarrow(Value value) const { return narrowed.contains(value); }
  void setNarrow(Value value) {
    value.setType(narrowedType(value.getType()));
    narrowed.insert(value);
  }
  /// `value` (f32) rounded to the narrow type, finite values saturating
  /// unless `overflow` (then they round to infinities, as IEEE does).
  Value round(OpBuilder &b, Location loc, Value value, bool overflow = false);
  /// An elementwise generic that converts `value` to `element`.
  Value convert(OpBuilder &b, Location loc, Value value, Type element,
                bool overflow = false);
  void convertGeneric(linalg::GenericOp op);
  void widenOperands(Operation *op);
  /// Whether some reader of `value` accumulates into it (a reduction's
  /// init): such a value stays f32.
  static bool initsReduction(Value value);

  FloatType narrow;
  /// Weights stay f32 arguments, rounded where the function starts.
  bool masterWeights;
  DenseSet<Value> narrowed;
};

/// Rounds to nearest even. A finite value beyond the narrow type's range
/// becomes its largest finite value (PTX's cvt.satfinite) instead of an
/// infinity: exports mask attention by adding f32's lowest value, -3.4e38,
/// which is past bf16's range and far past f16's, and must stay finite
/// for a row that is all padding not to become NaN. Infinities and NaN
/// stay as they are. The backward of a training step (`overflow`) rounds
/// without saturating: a gradient past the narrow range must become an
/// infinity that dynamic loss scaling sees, not a wrong finite value.
Value Converter::round(OpBuilder &b, Location loc, Value value, bool overflow) {
  if (overflow)
    return arith::TruncFOp::create(b, loc, narrow, value);
  Type f32 = b.getF32Type();
  APFloat largest = APFloat::getLargest(narrow.getFloatSemantics());
  bool lost = false;
  largest.convert(APFloat::IEEEsingle(), APFloat::rmTowardZero, &lost);
  auto constant = [&](APFloat v) {
    return arith::ConstantOp::create(b, loc, f32, b.getFloatAttr(f32, v));
  };
  Value high = constant(largest), low = constant(-largest);
  Value infinity = constant(APFloat::getInf(APFloat::IEEEsingle()));
  Value clamped = arith::MinimumFOp::create(
      b, loc, arith::MaximumFOp::create(b, loc, value, low), high);
  Value isInfinite =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                            math::AbsFOp::create(b, loc, value), infinity);
  Value kept = arith::SelectOp::create(b, loc, isInfinite, value, clamped);
  return arith::TruncFOp::create(b, loc, narrow, kept);
}

Value Converter::convert(OpBuilder &b, Location loc, Value value, Type element,
                         bool overflow) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, value);
  Value init = tensor::EmptyOp::create(b, loc, sizes, element);
  AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{value}, ValueRange{init},
      ArrayRef<AffineMap>{identity, identity}, iterators,
      [&](OpBuilder &nested, Location nestedLoc, ValueRange args) {
        Value result;
        if (element.getIntOrFloatBitWidth() >
            type.getElementType().getIntOrFloatBitWidth())
          result = arith::ExtFOp::create(nested, nestedLoc, element, args[0]);
        else
          result = round(nested, nestedLoc, args[0], overflow);
        linalg::YieldOp::create(nested, nestedLoc, result);
      });
  if (element == narrow)
    narrowed.insert(generic.getResult(0));
  return generic.getResult(0);
}

bool Converter::initsReduction(Value value) {
  for (OpOperand &use : value.getUses()) {
    auto generic = dyn_cast<linalg::GenericOp>(use.getOwner());
    if (generic && generic.isDpsInit(&use) && hasReduction(generic))
      return true;
  }
  return false;
}

void Converter::widenOperands(Operation *op) {
  OpBuilder b(op);
  Type f32 = b.getF32Type();
  for (OpOperand &operand : op->getOpOperands())
    if (isNarrow(operand.get()))
      operand.set(convert(b, op->getLoc(), operand.get(), f32));
}

void Converter::convertGeneric(linalg::GenericOp op) {
  bool reduction = hasReduction(op);
  bool backward = op->hasAttr(TPDialect::kBackwardAttrName);
  // Decided on the body as the import wrote it, before it reads extensions.
  bool contraction = reduction && linalg::isaContractionOpInterface(op);
  // A product of a narrowed value with an f32 one (a model input times a
  // weight) takes the f32 operand rounded, as a bf16/f16 model takes its
  // inputs: both operands narrow, it is a tensor-core GEMM on CUDA and the
  // packed kernel's on the CPU, instead of a loop nest on both.
  if (contraction) {
    SmallVector<OpOperand *> inputs = op.getDpsInputOperands();
    if (llvm::any_of(
            inputs, [&](OpOperand *input) { return isNarrow(input->get()); })) {
      OpBuilder before(op);
      for (OpOperand *input : inputs)
        if (isF32Tensor(input->get()) && !isNarrow(input->get()))
          input->set(
              convert(before, op.getLoc(), input->get(), narrow, backward));
    }
  }
  Block &body = op.getRegion().front();
  OpBuilder b(op.getContext());
  b.setInsertionPointToStart(&body);
  Type f32 = b.getF32Type();

  // Narrowed inputs (and a reduction's narrowed init, widened below) are
  // read through an extension at the top of the body.
  auto extendArgument = [&](BlockArgument arg) {
    arg.setType(narrow);
    if (arg.use_empty())
      return;
    auto ext = arith::ExtFOp::create(b, op.getLoc(), f32, arg);
    arg.replaceAllUsesExcept(ext, ext);
  };
  for (OpOperand *input : op.getDpsInputOperands())
    if (isNarrow(input->get()) &&
        op.getMatchingBlockArgument(input).getType().isF32())
      extendArgument(op.getMatchingBlockArgument(input));

  // Reductions accumulate in f32: an init that arrives narrowed is widened.
  if (reduction) {
    OpBuilder before(op);
    for (OpOperand &init : op.getDpsInitsMutable())
      if (isNarrow(init.get()))
        init.set(convert(before, op.getLoc(), init.get(), f32));
  } else {
    // Elementwise results are stored narrowed, unless a reduction
    // accumulates into them.
    auto yield = cast<linalg::YieldOp>(body.getTerminator());
    for (OpOperand &init : op.getDpsInitsMutable()) {
      OpResult result = op.getTiedOpResult(&init);
      if (!isF32Tensor(result) || initsReduction(result))
        continue;
      if (auto empty = init.get().getDefiningOp<tensor::EmptyOp>()) {
        // A fresh empty: the init may be shared (CSE) with other ops.
        OpBuilder before(op);
        init.set(tensor::EmptyOp::create(before, empty.getLoc(),
                                         empty.getMixedSizes(), narrow));
        if (empty.use_empty()) // visited already: it dominates `op`
          empty.erase();
      } else if (!isNarrow(init.get())) {
        continue;
      }
      BlockArgument arg = op.getMatchingBlockArgument(&init);
      if (arg.getType().isF32())
        extendArgument(arg);
      OpOperand &yielded = yield->getOpOperand(result.getResultNumber());
      OpBuilder atYield(yield);
      yielded.set(round(atYield, op.getLoc(), yielded.get(), backward));
      setNarrow(result);
    }
  }
  // A contraction's sum is rounded once, after the last term.
  if (contraction && isF32Tensor(op.getResult(0)) &&
      !initsReduction(op.getResult(0))) {
    OpBuilder after(op.getContext());
    after.setInsertionPointAfter(op);
    Value rounded =
        convert(after, op.getLoc(), op.getResult(0), narrow, backward);
    op.getResult(0).replaceAllUsesExcept(rounded, rounded.getDefiningOp());
  }
}

void Converter::run(func::FuncOp func) {
  if (func.isExternal())
    return;
  // Weights and KV caches (the runtime's own buffers, which no binding of
  // the user's sees) are stored narrowed; every other argument keeps its
  // type.
  // With master weights (training), a weight stays an f32 argument, the
  // copy the optimizer updates, and the program reads it rounded once.
  Block &entry = func.getBody().front();
  SmallVector<Type> argTypes(func.getArgumentTypes());
  OpBuilder atEntry = OpBuilder::atBlockBegin(&entry);
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    BlockArgument arg = entry.getArgument(i);
    if ((!func.getArgAttr(i, TPDialect::kWeightAttrName) &&
         !func.getArgAttr(i, TPDialect::kCacheAttrName)) ||
        !isF32Tensor(arg))
      continue;
    if (masterWeights && func.getArgAttr(i, TPDialect::kWeightAttrName)) {
      if (arg.use_empty())
        continue;
      Value rounded = convert(atEntry, arg.getLoc(), arg, narrow);
      arg.replaceAllUsesExcept(rounded, rounded.getDefiningOp());
      continue;
    }
    setNarrow(arg);
    argTypes[i] = arg.getType();
  }
  func.setType(
      FunctionType::get(func.getContext(), argTypes, func.getResultTypes()));

  // Named linalg ops (a transpose, a broadcast) as generics, which take
  // narrowed operands as they are; code generation generalizes them anyway.
  SmallVector<linalg::LinalgOp> named;
  func.walk([&](linalg::LinalgOp op) {
    if (!isa<linalg::GenericOp, linalg::FillOp>(op))
      named.push_back(op);
  });
  IRRewriter rewriter(func.getContext());
  for (linalg::LinalgOp op : named) {
    rewriter.setInsertionPoint(op);
    (void)linalg::generalizeNamedOp(rewriter, op);
  }

  // Ops in order, nested ones included (an embedding's tensor.extract sits
  // in a generic's body); ops the conversion creates are already right.
  SmallVector<Operation *> ops;
  func.getBody().walk<WalkOrder::PreOrder>(
      [&](Operation *op) { ops.push_back(op); });
  for (Operation *op : ops) {
    if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
      convertGeneric(generic);
      continue;
    }
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      if (!isNarrow(extract.getTensor()))
        continue;
      extract.getResult().setType(narrow);
      OpBuilder after(op->getContext());
      after.setInsertionPointAfter(op);
      auto ext = arith::ExtFOp::create(after, op->getLoc(), after.getF32Type(),
                                       extract.getResult());
      extract.getResult().replaceAllUsesExcept(ext, ext);
      continue;
    }
    if (auto update = dyn_cast<tp::CacheUpdateOp>(op);
        update && isNarrow(update.getCache())) {
      // A narrowed cache takes the step's keys or values rounded, as any
      // stored activation is.
      if (!isNarrow(update.getUpdate())) {
        OpBuilder b(op);
        update.getUpdateMutable().assign(
            convert(b, op->getLoc(), update.getUpdate(), narrow));
      }
      setNarrow(update.getResult());
      continue;
    }
    if (llvm::none_of(op->getOperands(), [&](Value v) { return isNarrow(v); }))
      continue;
    bool allNarrow = llvm::all_of(op->getOperands(), [&](Value v) {
      return !isF32Tensor(v) || isNarrow(v);
    });
    if (movesElements(op) && allNarrow) {
      for (OpResult result : op->getResults())
        if (isF32Tensor(result))
          setNarrow(result);
      continue;
    }
    // Returns, caches, sends and anything else read f32, as before.
    widenOperands(op);
  }
}

struct ConvertDType : tp::impl::ConvertDTypeBase<ConvertDType> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *context = &getContext();
    FloatType narrow;
    if (dtype == "bf16")
      narrow = BFloat16Type::get(context);
    else if (dtype == "f16")
      narrow = Float16Type::get(context);
    else if (dtype == "f32")
      return;
    else {
      getOperation().emitError("tp-convert-dtype: dtype must be bf16, f16 "
                               "or f32, not '")
          << dtype << "'";
      return signalPassFailure();
    }
    Converter converter(narrow, masterWeights);
    for (auto func : getOperation().getOps<func::FuncOp>())
      converter.run(func);
  }
};

} // namespace
