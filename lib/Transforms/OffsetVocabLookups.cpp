//===- OffsetVocabLookups.cpp - tp-offset-vocab-lookups -------------------===//
//
// Upstream partition splits the vocabulary loop of an embedding lookup but
// keeps its index local; this pass makes it global again by adding the
// rank's first row, so each rank matches only the ids it owns.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

namespace mlir::tp {
#define GEN_PASS_DEF_OFFSETVOCABLOOKUPS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

struct OffsetVocabLookups
    : tp::impl::OffsetVocabLookupsBase<OffsetVocabLookups> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto module = func->getParentOfType<ModuleOp>();
    shard::GridOp grid =
        module ? lookupGrid(module, GridRole::Tensor) : nullptr;
    WalkResult result = func.walk([&](linalg::GenericOp op) {
      auto vocab =
          op->getAttrOfType<IntegerAttr>(TPDialect::kEmbeddingAttrName);
      if (!vocab)
        return WalkResult::advance();
      auto table = cast<RankedTensorType>(op.getDpsInputs()[1].getType());
      int64_t local = table.getDimSize(0);
      if (local == vocab.getInt())
        return WalkResult::advance(); // Not split.
      if (!grid || vocab.getInt() % local != 0) {
        op.emitError()
            << "embedding table of " << vocab.getInt() << " rows is split into "
            << local
            << "-row shards without a 1-D tensor-parallel grid to place them";
        return WalkResult::interrupt();
      }
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value rank = shard::ProcessMultiIndexOp::create(
                       b, loc, grid.getSymName(), ArrayRef<shard::GridAxis>{0})
                       .getResult()[0];
      Value offset = arith::MulIOp::create(
          b, loc, rank, arith::ConstantIndexOp::create(b, loc, local));
      // The vocabulary loop is the last; its linalg.index gets the offset.
      unsigned vocabLoop = op.getNumLoops() - 1;
      op.getBody()->walk([&](linalg::IndexOp index) {
        if (index.getDim() != vocabLoop)
          return;
        OpBuilder ib(index->getContext());
        ib.setInsertionPointAfter(index);
        auto global = arith::AddIOp::create(ib, index.getLoc(), index, offset);
        index.getResult().replaceAllUsesExcept(global, global);
      });
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
