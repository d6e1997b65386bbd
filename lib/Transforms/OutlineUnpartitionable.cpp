//===- OutlineUnpartitionable.cpp - tp-outline-unpartitionable ------------===//
//
// Upstream partition knows only linalg ops with projected-permutation maps;
// a convolution (maps like d2 + d6) is rejected outright. Such an op runs
// replicated here: it is moved into a private function and called with
// replicated annotations, which partition copies untouched; `inline` after
// partition restores it.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::tp {
#define GEN_PASS_DEF_OUTLINEUNPARTITIONABLE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

bool isUnpartitionable(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp &&
         llvm::any_of(linalgOp.getIndexingMapsArray(), [](AffineMap map) {
           return !map.isProjectedPermutation();
         });
}

bool isShardedTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() > 0;
}

struct OutlineUnpartitionable
    : tp::impl::OutlineUnpartitionableBase<OutlineUnpartitionable> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module.getOps<shard::GridOp>().empty())
      return; // Nothing is planned, nothing will be partitioned.
    auto grid = *module.getOps<shard::GridOp>().begin();
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isUnpartitionable(op))
        ops.push_back(op);
    });
    SymbolTable symbols(module);
    for (auto [i, op] : llvm::enumerate(ops))
      outline(op, grid, symbols, i);
  }

  Value replicated(OpBuilder &b, Location loc, shard::GridOp grid) {
    return shard::ShardingOp::create(
        b, loc, FlatSymbolRefAttr::get(grid.getSymNameAttr()),
        ArrayRef<shard::GridAxesAttr>{b.getDenseI16ArrayAttr({})});
  }

  void outline(Operation *op, shard::GridOp grid, SymbolTable &symbols,
               size_t index) {
    Location loc = op->getLoc();
    // Arguments: the operands, then values the body reads from outside.
    SetVector<Value> inputs(op->getOperands().begin(), op->getOperands().end());
    for (Region &region : op->getRegions())
      getUsedValuesDefinedAbove(region, inputs);

    OpBuilder moduleBuilder(op->getParentOfType<func::FuncOp>());
    auto type = moduleBuilder.getFunctionType(
        llvm::to_vector(
            llvm::map_range(inputs, [](Value v) { return v.getType(); })),
        op->getResultTypes());
    auto callee = func::FuncOp::create(
        moduleBuilder, loc, ("tp_replicated_" + Twine(index)).str(), type);
    callee.setPrivate();
    symbols.insert(callee);
    Block *entry = callee.addEntryBlock();
    OpBuilder inner = OpBuilder::atBlockEnd(entry);
    IRMapping mapping;
    for (auto [value, arg] : llvm::zip(inputs, entry->getArguments()))
      mapping.map(value, arg);
    Operation *clone = inner.clone(*op, mapping);
    func::ReturnOp::create(inner, loc, clone->getResults());

    // The call reads and writes replicated tensors.
    OpBuilder b(op);
    SmallVector<Value> args;
    for (Value v : inputs) {
      if (!isShardedTensor(v.getType())) {
        args.push_back(v);
        continue;
      }
      args.push_back(shard::ShardOp::create(b, loc, v, replicated(b, loc, grid),
                                            /*annotate_for_users=*/true));
    }
    auto call = func::CallOp::create(b, loc, callee, args);
    for (auto [result, callResult] :
         llvm::zip(op->getResults(), call.getResults())) {
      if (!isShardedTensor(callResult.getType())) {
        result.replaceAllUsesWith(callResult);
        continue;
      }
      auto annotated =
          shard::ShardOp::create(b, loc, callResult, replicated(b, loc, grid),
                                 /*annotate_for_users=*/false);
      result.replaceAllUsesWith(annotated.getResult());
    }
    op->erase();
  }
};

} // namespace
