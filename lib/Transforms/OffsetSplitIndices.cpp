//===- OffsetSplitIndices.cpp - tp-offset-split-indices -------------------===//
//
// A linalg body that reads `linalg.index` (a CumSum's scan, a causal mask,
// an indexed read) computes with the iteration's position. Upstream
// partition splits the loop but keeps the index local to the shard, so a
// rank holding positions [r·n, (r+1)·n) would compute as if it held [0, n).
// tp-plan-tensor-parallel records each such op's loop sizes
// (`tp.loop_sizes`); this pass adds the rank's offset to the index of every
// loop that partition split, and drops the record.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

namespace mlir::tp {
#define GEN_PASS_DEF_OFFSETSPLITINDICES
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

struct OffsetSplitIndices
    : tp::impl::OffsetSplitIndicesBase<OffsetSplitIndices> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto module = func->getParentOfType<ModuleOp>();
    shard::GridOp grid =
        module ? lookupGrid(module, GridRole::Tensor) : nullptr;
    WalkResult result = func.walk([&](linalg::GenericOp op) {
      auto global =
          op->getAttrOfType<DenseI64ArrayAttr>(TPDialect::kLoopSizesAttrName);
      if (!global)
        return WalkResult::advance();
      op->removeAttr(TPDialect::kLoopSizesAttrName);
      SmallVector<int64_t> local = op.getStaticLoopRanges();
      if (local.size() != global.size()) {
        op.emitError() << "tp-offset-split-indices: " << local.size()
                       << " loops after partition, " << global.size()
                       << " before";
        return WalkResult::interrupt();
      }
      Value rank;
      for (auto [loop, sizes] :
           llvm::enumerate(llvm::zip(local, global.asArrayRef()))) {
        auto [localSize, globalSize] = sizes;
        if (localSize == globalSize)
          continue;
        if (!grid || localSize <= 0 || globalSize % localSize != 0 ||
            globalSize / localSize != grid.getShape()[0]) {
          op.emitError() << "tp-offset-split-indices: loop " << loop
                         << " of size " << globalSize << " is split into "
                         << localSize
                         << " without a 1-D tensor-parallel grid to place it";
          return WalkResult::interrupt();
        }
        OpBuilder b(op);
        Location loc = op.getLoc();
        if (!rank)
          rank = shard::ProcessMultiIndexOp::create(
                     b, loc, grid.getSymName(), ArrayRef<shard::GridAxis>{0})
                     .getResult()[0];
        Value offset = arith::MulIOp::create(
            b, loc, rank, arith::ConstantIndexOp::create(b, loc, localSize));
        op.getBody()->walk([&](linalg::IndexOp index) {
          if (index.getDim() != loop)
            return;
          OpBuilder ib(index->getContext());
          ib.setInsertionPointAfter(index);
          auto shifted =
              arith::AddIOp::create(ib, index.getLoc(), index, offset);
          index.getResult().replaceAllUsesExcept(shifted, shifted);
        });
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
