//===- PlanTensorParallel.cpp - tp-plan-tensor-parallel -------------------===//
//
// Writes the tensor-parallel plan as upstream shard annotations: a 1-D
// `shard.grid`, and an annotate_for_users `shard.shard` on each weight that
// splits. Sharding propagation and partition do the rest.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "tp/Dialect/TP/TPAttrs.h"

namespace mlir::tp {
#define GEN_PASS_DEF_PLANTENSORPARALLEL
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

constexpr StringLiteral kGridName = "grid";

/// `shard.sharding @grid split_axes = [[], ..., [0]]` splitting `dim`.
Value createSplitSharding(OpBuilder &b, Location loc, int64_t dim) {
  SmallVector<shard::GridAxesAttr> axes;
  for (int64_t d = 0; d < dim; ++d)
    axes.push_back(b.getDenseI16ArrayAttr({}));
  axes.push_back(b.getDenseI16ArrayAttr({0}));
  return shard::ShardingOp::create(
      b, loc, FlatSymbolRefAttr::get(b.getContext(), kGridName), axes);
}

struct PlanTensorParallel
    : tp::impl::PlanTensorParallelBase<PlanTensorParallel> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (devices < 1) {
      module.emitError() << "tp-plan-tensor-parallel: devices must be >= 1, "
                            "got "
                         << static_cast<int64_t>(devices);
      return signalPassFailure();
    }
    if (strategy != "auto" && strategy != "config") {
      module.emitError() << "tp-plan-tensor-parallel: unknown strategy '"
                         << strategy << "' (expected auto or config)";
      return signalPassFailure();
    }
    if (SymbolTable::lookupSymbolIn(module, kGridName)) {
      module.emitError() << "tp-plan-tensor-parallel: the module already has "
                            "a symbol '@"
                         << kGridName << "'; was it planned already?";
      return signalPassFailure();
    }
    OpBuilder b(module.getBodyRegion());
    setGridRole(shard::GridOp::create(b, module.getLoc(), kGridName,
                                      ArrayRef<int64_t>{devices}),
                GridRole::Tensor);
    // One device: the grid is all there is to plan.
    if (devices == 1)
      return;
    if (strategy == "config" && config.empty()) {
      module.emitError() << "tp-plan-tensor-parallel: strategy=config needs "
                            "config=FILE";
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      TensorParallelPlan plan = planTensorParallel(func, devices);
      if (strategy == "config" &&
          failed(applyConfigRules(func, config, devices, plan)))
        return signalPassFailure();
      if (failed(annotate(func, plan)))
        return signalPassFailure();
    }
  }

  /// Splits each `grad.<weight>` result of tp-differentiate as `plan`
  /// splits its weight (or, for a fused weight's concatenated pieces, each
  /// piece's gradient as its piece).
  void annotateGradients(func::FuncOp func, const TensorParallelPlan &plan,
                         OpBuilder &b) {
    // By initializer (the pieces of a fused weight together), and by
    // argument as the artifact names it (a piece's own gradient).
    llvm::StringMap<SmallVector<std::pair<Value, int64_t>>> splitWeights;
    llvm::StringMap<std::pair<Value, int64_t>> splitArguments;
    for (auto [weight, split] : plan.splits) {
      auto arg = dyn_cast<BlockArgument>(weight);
      if (!arg)
        continue;
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    TPDialect::kWeightAttrName);
      if (!name)
        continue;
      splitWeights[name.getValue()].push_back({weight, split.dim});
      splitArguments[getPieceName(
          name.getValue(), getLayout(func, arg.getArgNumber()),
          cast<RankedTensorType>(arg.getType()).getRank())] = {weight,
                                                               split.dim};
    }
    auto split = [&](Value grad, Value weight, int64_t dim) {
      if (grad.getType() != weight.getType() || !grad.getDefiningOp() ||
          !grad.getDefiningOp()->hasAttr(TPDialect::kBackwardAttrName))
        return;
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointAfterValue(grad);
      auto shardOp = shard::ShardOp::create(
          b, grad.getLoc(), grad, createSplitSharding(b, grad.getLoc(), dim),
          /*annotate_for_users=*/false);
      grad.replaceAllUsesExcept(shardOp.getResult(), shardOp);
    };
    Operation *ret = func.getBody().front().getTerminator();
    for (OpOperand &operand : ret->getOpOperands()) {
      auto name = func.getResultAttrOfType<StringAttr>(
          operand.getOperandNumber(), TPDialect::kOutputAttrName);
      if (!name || !name.getValue().starts_with("grad."))
        continue;
      Value grad = operand.get();
      StringRef weightName = name.getValue().drop_front(5);
      if (auto arg = splitArguments.find(weightName);
          arg != splitArguments.end()) {
        split(grad, arg->second.first, arg->second.second);
        continue;
      }
      auto it = splitWeights.find(weightName);
      if (it == splitWeights.end())
        continue;
      if (it->second.size() == 1) {
        split(grad, it->second.front().first, it->second.front().second);
        continue;
      }
      // tp-differentiate concatenates the pieces in their order.
      auto concat = grad.getDefiningOp<tensor::ConcatOp>();
      SmallVector<std::pair<Value, int64_t>> pieces(it->second);
      if (!concat || concat.getInputs().size() != pieces.size() ||
          llvm::any_of(pieces, [](auto &p) {
            LayoutAttr layout = getLayout(p.first);
            return !layout || !layout.isPiece();
          }))
        continue;
      llvm::sort(pieces, [](auto &a, auto &b) {
        return getLayout(a.first).getSliceOffset() <
               getLayout(b.first).getSliceOffset();
      });
      for (auto [piece, weight] : llvm::zip_equal(concat.getInputs(), pieces))
        split(piece, weight.first, weight.second);
    }
  }

  LogicalResult annotate(func::FuncOp func, const TensorParallelPlan &plan) {
    OpBuilder b(func.getBody());
    MLIRContext *ctx = &getContext();
    for (auto [weight, split] : plan.splits) {
      OpBuilder::InsertionGuard guard(b);
      if (auto arg = dyn_cast<BlockArgument>(weight)) {
        // A piece of a fused weight keeps the range it holds; it can only
        // split along the dim it was cut on.
        LayoutAttr layout = getLayout(func, arg.getArgNumber());
        if (layout && layout.isPiece() && layout.getDim() != split.dim)
          return emitError(arg.getLoc())
                 << "tp-plan-tensor-parallel: weight '"
                 << func.getArgAttrOfType<StringAttr>(
                            arg.getArgNumber(), TPDialect::kWeightAttrName)
                        .getValue()
                 << "' is a piece cut on dim " << layout.getDim()
                 << " and cannot split on dim " << split.dim;
        setLayout(
            func, arg.getArgNumber(),
            layout ? layout.withSplit(split.role, split.dim, split.block)
                   : LayoutAttr::get(ctx, split.role, split.dim, split.block));
      } else {
        b.setInsertionPointAfterValue(weight);
        weight.getDefiningOp()->setAttr(
            TPDialect::kLayoutAttrName,
            LayoutAttr::get(ctx, split.role, split.dim, split.block));
      }
      Value sharding = createSplitSharding(b, weight.getLoc(), split.dim);
      auto shardOp =
          shard::ShardOp::create(b, weight.getLoc(), weight, sharding,
                                 /*annotate_for_users=*/true);
      weight.replaceAllUsesExcept(shardOp.getResult(), shardOp);
    }
    // A KV cache splits by heads, as the keys or values written into it.
    for (auto [cache, dim] : plan.caches) {
      OpBuilder::InsertionGuard guard(b);
      Value sharding = createSplitSharding(b, cache.getLoc(), dim);
      auto shardOp = shard::ShardOp::create(b, cache.getLoc(), cache, sharding,
                                            /*annotate_for_users=*/true);
      cache.replaceAllUsesExcept(shardOp.getResult(), shardOp);
    }
    // A sum or max over a split dim reads its operand split, so that
    // sharding propagation splits its reduction loop (a partial result,
    // all-reduced) rather than gathering the operand; a model input read
    // with a split value is read split rather than gathering the value.
    for (auto [operand, dim] : plan.splitOperands) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(operand->getOwner());
      Location loc = operand->getOwner()->getLoc();
      auto shardOp = shard::ShardOp::create(b, loc, operand->get(),
                                            createSplitSharding(b, loc, dim),
                                            /*annotate_for_users=*/true);
      operand->set(shardOp.getResult());
    }
    // A weight's gradient splits as the weight: each rank computes its
    // part (an embedding's scatter-add into its rows of the vocabulary).
    annotateGradients(func, plan, b);
    // The backward keeps the splits of the forward values it reads.
    for (auto [value, dim] : plan.backwardSplits) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointAfterValue(value);
      Location loc = value.getLoc();
      auto shardOp = shard::ShardOp::create(b, loc, value,
                                            createSplitSharding(b, loc, dim),
                                            /*annotate_for_users=*/false);
      value.replaceAllUsesExcept(shardOp.getResult(), shardOp);
    }
    // A split that reaches a result is gathered there, after the
    // elementwise ops on the way (a scale of the logits), not before them.
    for (auto [value, dim] : plan.resultSplits) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointAfterValue(value);
      Location loc = value.getLoc();
      auto shardOp = shard::ShardOp::create(b, loc, value,
                                            createSplitSharding(b, loc, dim),
                                            /*annotate_for_users=*/false);
      value.replaceAllUsesExcept(shardOp.getResult(), shardOp);
    }
    // Windows on split channels: tp-outline-unpartitionable gives each rank
    // its part.
    for (auto [op, loop] : plan.splitLoops)
      op->setAttr(TPDialect::kSplitLoopAttrName,
                  b.getI64IntegerAttr(static_cast<int64_t>(loop)));
    // A prefill's cache write has no user (attention reads the step's own
    // entries), but partition needs every result annotated: the cache's.
    func.walk([&](CacheUpdateOp update) {
      if (!update.getResult().use_empty())
        return;
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointAfter(update);
      auto it = plan.caches.find(update.getCache());
      Value sharding =
          it != plan.caches.end()
              ? createSplitSharding(b, update.getLoc(), it->second)
              : shard::ShardingOp::create(
                    b, update.getLoc(), FlatSymbolRefAttr::get(ctx, kGridName),
                    ArrayRef<shard::GridAxesAttr>{b.getDenseI16ArrayAttr({})})
                    .getResult();
      shard::ShardOp::create(b, update.getLoc(), update.getResult(), sharding,
                             /*annotate_for_users=*/false);
    });
    // Upstream partition needs every tensor argument read through exactly
    // one shard.shard (it crashes on an unused argument and rejects one that
    // an op reads inside its body, like an embedding table), so everything
    // the plan does not split is annotated as replicated.
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() == 0 || plan.splits.count(arg) ||
          plan.caches.count(arg))
        continue;
      auto sharding = shard::ShardingOp::create(
          b, arg.getLoc(), FlatSymbolRefAttr::get(ctx, kGridName),
          ArrayRef<shard::GridAxesAttr>{b.getDenseI16ArrayAttr({})});
      auto shardOp = shard::ShardOp::create(b, arg.getLoc(), arg, sharding,
                                            /*annotate_for_users=*/true);
      arg.replaceAllUsesExcept(shardOp.getResult(), shardOp);
    }
    // Partition copies constants whole; pinning them replicated makes a
    // split consumer slice its part instead of reading the whole tensor.
    func.walk([&](arith::ConstantOp cst) {
      auto type = dyn_cast<RankedTensorType>(cst.getType());
      if (!type || type.getRank() == 0)
        return;
      OpBuilder cb(cst->getContext());
      cb.setInsertionPointAfter(cst);
      auto sharding = shard::ShardingOp::create(
          cb, cst.getLoc(), FlatSymbolRefAttr::get(ctx, kGridName),
          ArrayRef<shard::GridAxesAttr>{cb.getDenseI16ArrayAttr({})});
      auto shardOp =
          shard::ShardOp::create(cb, cst.getLoc(), cst.getResult(), sharding,
                                 /*annotate_for_users=*/false);
      cst.getResult().replaceAllUsesExcept(shardOp.getResult(), shardOp);
    });
    // Partition keeps a body's linalg.index local to the shard; record the
    // loop sizes so that tp-offset-split-indices can add the rank's offset
    // for the loops that end up split (a CumSum over a split sequence, an
    // indexed read). Embedding lookups have their own offset pass.
    func.walk([&](linalg::GenericOp op) {
      if (op->hasAttr(TPDialect::kEmbeddingAttrName) ||
          op.getBody()->getOps<linalg::IndexOp>().empty())
        return;
      SmallVector<int64_t> sizes = op.getStaticLoopRanges();
      if (llvm::any_of(sizes, ShapedType::isDynamic))
        return;
      op->setAttr(TPDialect::kLoopSizesAttrName,
                  DenseI64ArrayAttr::get(ctx, sizes));
    });
    // Outputs are whole on every rank: a split result is gathered here.
    func.walk([&](func::ReturnOp ret) {
      OpBuilder rb(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        auto type = dyn_cast<RankedTensorType>(operand.get().getType());
        if (!type || type.getRank() == 0)
          continue;
        auto sharding = shard::ShardingOp::create(
            rb, ret.getLoc(), FlatSymbolRefAttr::get(ctx, kGridName),
            ArrayRef<shard::GridAxesAttr>{rb.getDenseI16ArrayAttr({})});
        auto shardOp =
            shard::ShardOp::create(rb, ret.getLoc(), operand.get(), sharding,
                                   /*annotate_for_users=*/true);
        operand.set(shardOp.getResult());
      }
    });
    // A weight left whole costs memory and speed on every rank (a dim that
    // does not divide is the user's device count to revisit; a structure
    // without a rule is attention or an MLP running whole): a warning, not
    // only a line in tp-explain.
    for (const auto &entry : plan.replicated) {
      entry.op->setAttr(TPDialect::kReplicatedAttrName,
                        StringAttr::get(ctx, entry.reason));
      if (!entry.intended)
        emitWarning(entry.op->getLoc())
            << "tp-plan-tensor-parallel: replicated, " << entry.reason;
    }
    return success();
  }
};

} // namespace
