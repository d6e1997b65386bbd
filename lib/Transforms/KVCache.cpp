//===- KVCache.cpp - tp-kv-cache ------------------------------------------===//
//
// Rewrites the past/present pairs of a decoder exported with its KV cache
// into persistent caches: each `concat(past, new)` that @main returns
// becomes a tp.cache_update of a runtime-owned buffer at `cache_position`.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::tp {
#define GEN_PASS_DEF_KVCACHE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The input the runtime sets to the first position a call writes.
constexpr llvm::StringLiteral kPositionInput = "cache_position";

/// One past/present pair: the past input, and either the concat of it with
/// the step's entries (which the function returns), or, for a prefill whose
/// empty past the importer folded away, the returned present itself.
struct CachePair {
  BlockArgument past;
  tensor::ConcatOp concat;
  /// Without a concat: the result that returns the step's entries.
  unsigned result = 0;
  int64_t dim = 0;
};

std::optional<CachePair> matchConcat(func::FuncOp func, BlockArgument arg) {
  if (!func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName) ||
      !arg.hasOneUse())
    return std::nullopt;
  auto concat = dyn_cast<tensor::ConcatOp>(*arg.getUsers().begin());
  if (!concat || concat.getInputs().size() != 2 || concat.getInputs()[0] != arg)
    return std::nullopt;
  bool returned = llvm::any_of(concat->getUsers(), [](Operation *user) {
    return isa<func::ReturnOp>(user);
  });
  if (!returned)
    return std::nullopt;
  return CachePair{arg, concat, 0, static_cast<int64_t>(concat.getDim())};
}

/// A prefill's pair, where concat(empty past, new) folded to `new`: an
/// unused input `past_key_values.X` (or `past.X`) with one dim of size 0,
/// and the result `present.X` of its shape but for that dim. Only the
/// names of optimum's layout tie the two together here.
std::optional<CachePair> matchFolded(func::FuncOp func, BlockArgument arg) {
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                TPDialect::kInputAttrName);
  auto type = dyn_cast<RankedTensorType>(arg.getType());
  if (!name || !type || !arg.use_empty())
    return std::nullopt;
  StringRef suffix = name.getValue();
  if (!suffix.consume_front("past_key_values.") &&
      !suffix.consume_front("past."))
    return std::nullopt;
  auto zero = llvm::find(type.getShape(), 0);
  if (zero == type.getShape().end() || llvm::count(type.getShape(), 0) != 1)
    return std::nullopt;
  int64_t dim = zero - type.getShape().begin();
  for (unsigned r = 0, e = func.getNumResults(); r < e; ++r) {
    auto output =
        func.getResultAttrOfType<StringAttr>(r, TPDialect::kOutputAttrName);
    auto present = dyn_cast<RankedTensorType>(func.getResultTypes()[r]);
    if (!output || output.getValue() != ("present." + suffix).str() ||
        !present || present.getRank() != type.getRank() ||
        present.getElementType() != type.getElementType())
      continue;
    bool same = true;
    for (int64_t d = 0; d < type.getRank(); ++d)
      same &= d == dim || present.getDimSize(d) == type.getDimSize(d);
    if (same)
      return CachePair{arg, nullptr, r, dim};
  }
  return std::nullopt;
}

/// Whether `v` is computed from `input` (through any ops).
bool dependsOn(Value v, BlockArgument input) {
  SmallVector<Value> worklist{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!worklist.empty()) {
    Value next = worklist.pop_back_val();
    if (next == input)
      return true;
    Operation *def = next.getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  return false;
}

/// `source[b, position + i]` for i < `count`, as a [B, count] generic: a
/// sum over the sequence of the entries at that index, so that the read
/// needs no dynamic slice.
Value readAtPosition(OpBuilder &b, Location loc, Value source, Value position,
                     int64_t count) {
  auto type = cast<RankedTensorType>(source.getType());
  Type element = type.getElementType();
  auto resultType = RankedTensorType::get({type.getDimSize(0), count}, element);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
  Value init =
      linalg::FillOp::create(
          b, loc, zero,
          tensor::EmptyOp::create(b, loc, resultType.getShape(), element)
              .getResult())
          .getResult(0);
  MLIRContext *ctx = b.getContext();
  AffineExpr row = getAffineDimExpr(0, ctx), col = getAffineDimExpr(1, ctx),
             seq = getAffineDimExpr(2, ctx);
  SmallVector<AffineMap> maps{AffineMap::get(3, 0, {row, seq}, ctx),
                              AffineMap::get(3, 0, {}, ctx),
                              AffineMap::get(3, 0, {row, col}, ctx)};
  SmallVector<utils::IteratorType> iterators{utils::IteratorType::parallel,
                                             utils::IteratorType::parallel,
                                             utils::IteratorType::reduction};
  auto generic = linalg::GenericOp::create(
      b, loc, resultType, ValueRange{source, position}, ValueRange{init}, maps,
      iterators, [&](OpBuilder &nb, Location nl, ValueRange args) {
        Value i = linalg::IndexOp::create(nb, nl, 1);
        Value j = linalg::IndexOp::create(nb, nl, 2);
        Value at = arith::AddIOp::create(
            nb, nl,
            arith::IndexCastOp::create(nb, nl, nb.getIndexType(), args[1]), i);
        Value hit =
            arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::eq, j, at);
        Value zero = arith::ConstantOp::create(nb, nl, nb.getZeroAttr(element));
        Value picked = arith::SelectOp::create(nb, nl, hit, args[0], zero);
        Value sum =
            isa<FloatType>(element)
                ? arith::AddFOp::create(nb, nl, args[2], picked).getResult()
                : arith::AddIOp::create(nb, nl, args[2], picked).getResult();
        linalg::YieldOp::create(nb, nl, sum);
      });
  return generic.getResult(0);
}

/// The export's sequence axis ends at the step's own tokens: anything it
/// computes over the [B, past + L] attention mask and then slices at
/// [past, past + L) is the step's (OPT's positions: a CumSum over the mask,
/// read at the new token). A decode step puts its token at cache_position
/// instead, so those slices read there.
void relocateStepSlices(func::FuncOp func, Value position, int64_t slots,
                        int64_t count) {
  SmallVector<BlockArgument> masks;
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName) &&
        type && type.getRank() == 2 && type.getDimSize(1) == slots)
      masks.push_back(arg);
  }
  SmallVector<tensor::ExtractSliceOp> slices;
  func.walk([&](tensor::ExtractSliceOp slice) {
    RankedTensorType source = slice.getSourceType();
    if (source.getRank() != 2 || source.getDimSize(1) != slots ||
        slice.getType().getRank() != 2 ||
        slice.getStaticOffsets() != ArrayRef<int64_t>{0, slots - count} ||
        slice.getStaticSizes() !=
            ArrayRef<int64_t>{source.getDimSize(0), count} ||
        !slice.hasUnitStride())
      return;
    if (llvm::any_of(masks, [&](BlockArgument mask) {
          return dependsOn(slice.getSource(), mask);
        }))
      slices.push_back(slice);
  });
  for (tensor::ExtractSliceOp slice : slices) {
    OpBuilder b(slice);
    slice.replaceAllUsesWith(
        readAtPosition(b, slice.getLoc(), slice.getSource(), position, count));
    slice.erase();
  }
}

struct KVCache : tp::impl::KVCacheBase<KVCache> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func || func.isExternal()) {
      module.emitError("tp-kv-cache: the module has no @main with a body");
      return signalPassFailure();
    }
    if (maxSeq < 1) {
      module.emitError("tp-kv-cache: max-seq must be at least 1");
      return signalPassFailure();
    }
    SmallVector<CachePair> pairs;
    for (BlockArgument arg : func.getArguments()) {
      if (auto name = func.getArgAttrOfType<StringAttr>(
              arg.getArgNumber(), TPDialect::kInputAttrName);
          name && name.getValue() == kPositionInput) {
        func.emitError() << "tp-kv-cache: the model already has an input "
                            "named '"
                         << kPositionInput << "'";
        return signalPassFailure();
      }
      if (std::optional<CachePair> pair = matchConcat(func, arg))
        pairs.push_back(*pair);
      else if (std::optional<CachePair> folded = matchFolded(func, arg))
        pairs.push_back(*folded);
    }
    if (pairs.empty()) {
      func.emitError("tp-kv-cache: no KV cache in the model: no input is "
                     "concatenated with the step's keys or values and "
                     "returned (past_key_values.{i}.key -> present.{i}.key); "
                     "export the decoder with use_cache=True");
      return signalPassFailure();
    }
    if (failed(rewrite(func, pairs)))
      return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp func, MutableArrayRef<CachePair> pairs) {
    MLIRContext *ctx = &getContext();
    int64_t slots = maxSeq;
    // The position input goes after the last model input.
    unsigned position = 0;
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName))
        position = arg.getArgNumber() + 1;
    auto positionType = RankedTensorType::get({}, IntegerType::get(ctx, 64));
    NamedAttribute positionName(StringAttr::get(ctx, TPDialect::kInputAttrName),
                                StringAttr::get(ctx, kPositionInput));
    if (failed(func.insertArgument(position, positionType,
                                   DictionaryAttr::get(ctx, {positionName}),
                                   func.getLoc())))
      return func.emitError("tp-kv-cache: cannot add the position input");
    Value positionArg = func.getArgument(position);

    auto returnOp = cast<func::ReturnOp>(func.getBody().front().back());
    llvm::BitVector dropped(func.getNumResults());
    int64_t stepCount = 0;
    for (CachePair &pair : pairs) {
      auto pastType = cast<RankedTensorType>(pair.past.getType());
      Value step = pair.concat ? pair.concat.getInputs()[1]
                               : returnOp.getOperand(pair.result);
      auto stepType = cast<RankedTensorType>(step.getType());
      int64_t past = pastType.getDimSize(pair.dim),
              count = stepType.getDimSize(pair.dim);
      auto name = func.getArgAttrOfType<StringAttr>(pair.past.getArgNumber(),
                                                    TPDialect::kInputAttrName);
      Operation *at = pair.concat ? pair.concat.getOperation() : returnOp;
      if (past != 0 && past + count != slots)
        return at->emitError()
               << "tp-kv-cache: input '" << name.getValue() << "' has " << past
               << " past positions and the step " << count << "; with max-seq "
               << slots << " a step of " << count << " needs " << slots - count
               << " (or 0, a prefill)";
      if (count > slots)
        return at->emitError() << "tp-kv-cache: a step of " << count
                               << " positions does not fit max-seq " << slots;
      if (past != 0)
        stepCount = count;
      SmallVector<int64_t> shape(pastType.getShape());
      shape[pair.dim] = slots;
      auto cacheType = RankedTensorType::get(shape, pastType.getElementType());
      pair.past.setType(cacheType);
      unsigned index = pair.past.getArgNumber();
      func.removeArgAttr(index, TPDialect::kInputAttrName);
      func.removeArgAttr(index, TPDialect::kIndexBoundAttrName);
      func.setArgAttr(index, TPDialect::kCacheAttrName, name);

      // Right after the entries are made, so that a pipeline cut (by
      // program order) keeps the write in the stage that makes them.
      OpBuilder b(at);
      if (!pair.concat)
        b.setInsertionPointAfterValue(step);
      auto update =
          CacheUpdateOp::create(b, at->getLoc(), cacheType, step, pair.past,
                                positionArg, b.getI64IntegerAttr(pair.dim));
      if (!pair.concat) {
        dropped.set(pair.result);
        continue;
      }
      for (OpOperand &use : pair.concat->getUses())
        if (use.getOwner() == returnOp)
          dropped.set(use.getOperandNumber());
      // A prefill's attention reads its own entries; a step's, the cache.
      pair.concat.replaceAllUsesWith(past == 0 ? step : update.getResult());
      pair.concat.erase();
    }
    if (stepCount > 0)
      relocateStepSlices(func, positionArg, slots, stepCount);
    returnOp->eraseOperands(dropped);
    SmallVector<Type> argTypes(func.getBody().getArgumentTypes());
    if (failed(func.eraseResults(dropped)))
      return func.emitError("tp-kv-cache: cannot drop the present results");
    func.setType(FunctionType::get(ctx, argTypes, func.getResultTypes()));
    return success();
  }
};

} // namespace
