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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/BitVector.h"

namespace mlir::tp {
#define GEN_PASS_DEF_KVCACHE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The input the runtime sets to the first position a call writes.
constexpr llvm::StringLiteral kPositionInput = "cache_position";

/// One past/present pair: the input, the concat of it with the step's
/// entries, and that concat returned.
struct CachePair {
  BlockArgument past;
  tensor::ConcatOp concat;
};

std::optional<CachePair> matchPair(func::FuncOp func, BlockArgument arg) {
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
  return CachePair{arg, concat};
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
      if (std::optional<CachePair> pair = matchPair(func, arg))
        pairs.push_back(*pair);
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
    for (CachePair &pair : pairs) {
      int64_t dim = pair.concat.getDim();
      auto pastType = cast<RankedTensorType>(pair.past.getType());
      Value step = pair.concat.getInputs()[1];
      auto stepType = cast<RankedTensorType>(step.getType());
      int64_t past = pastType.getDimSize(dim), count = stepType.getDimSize(dim);
      auto name = func.getArgAttrOfType<StringAttr>(pair.past.getArgNumber(),
                                                    TPDialect::kInputAttrName);
      if (past != 0 && past + count != slots)
        return pair.concat.emitError()
               << "tp-kv-cache: input '" << name.getValue() << "' has " << past
               << " past positions and the step " << count << "; with max-seq "
               << slots << " a step of " << count << " needs " << slots - count
               << " (or 0, a prefill)";
      if (count > slots)
        return pair.concat.emitError()
               << "tp-kv-cache: a step of " << count
               << " positions does not fit max-seq " << slots;
      SmallVector<int64_t> shape(pastType.getShape());
      shape[dim] = slots;
      auto cacheType = RankedTensorType::get(shape, pastType.getElementType());
      pair.past.setType(cacheType);
      unsigned index = pair.past.getArgNumber();
      func.removeArgAttr(index, TPDialect::kInputAttrName);
      func.removeArgAttr(index, TPDialect::kIndexBoundAttrName);
      func.setArgAttr(index, TPDialect::kCacheAttrName, name);

      OpBuilder b(pair.concat);
      auto update = CacheUpdateOp::create(b, pair.concat.getLoc(), cacheType,
                                          step, pair.past, positionArg,
                                          b.getI64IntegerAttr(dim));
      for (OpOperand &use : pair.concat->getUses())
        if (use.getOwner() == returnOp)
          dropped.set(use.getOperandNumber());
      // A prefill's attention reads its own entries; a step's, the cache.
      pair.concat.replaceAllUsesWith(past == 0 ? step : update.getResult());
      pair.concat.erase();
    }
    returnOp->eraseOperands(dropped);
    SmallVector<Type> argTypes(func.getBody().getArgumentTypes());
    if (failed(func.eraseResults(dropped)))
      return func.emitError("tp-kv-cache: cannot drop the present results");
    func.setType(FunctionType::get(ctx, argTypes, func.getResultTypes()));
    return success();
  }
};

} // namespace
