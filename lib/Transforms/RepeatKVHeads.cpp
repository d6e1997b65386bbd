//===- RepeatKVHeads.cpp - tp-repeat-kv-heads -----------------------------===//
//
// Grouped-query attention with fewer K/V heads than ranks (2 K/V heads on
// 4 ranks) leaves the K/V projections whole on every rank: the ranks do not
// divide the heads. As Megatron-LM and vLLM do, this pass repeats each K/V
// head R = ranks / heads times before planning, so that each rank holds the
// one K/V head its query heads read: the K/V projections' weights (and
// biases) become new arguments holding each head's columns R times
// (`#tp.layout<..., repeat = [heads, R]>`, which the artifact writer deals
// so that rank r gets head r / R), everything from them to the broadcast of
// each K/V head to its query heads computes on the repeated heads (the KV
// caches hold them too), and that broadcast repeats R times fewer. The
// merged heads the attention reads are the same values as before.
//
// The closure is HeadBlock's (HeadBlock.h) in its Repeat mode; a block is
// rewritten only if it holds everywhere: nothing may sum over the K/V
// heads, read their index, or return them.
//
//===----------------------------------------------------------------------===//

#include "HeadBlock.h"

#include "tp/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_REPEATKVHEADS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The dims [kv, group] of a broadcast of each K/V head to the query heads
/// of its group ([.., kv, S, d] -> [.., kv, g, S, d], then merged by one
/// collapse), when `op` is one; the input dim of kv is the first.
std::optional<std::pair<int64_t, int64_t>>
matchQueryBroadcast(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumLoops() != op.getNumParallelLoops() ||
      !op.getMatchingIndexingMap(op.getDpsInitOperand(0)).isIdentity())
    return std::nullopt;
  Block &body = op.getRegion().front();
  if (body.getTerminator()->getOperand(0) != body.getArgument(0))
    return std::nullopt;
  AffineMap in = op.getMatchingIndexingMap(op.getDpsInputOperand(0));
  if (!in.isProjectedPermutation() || in.getNumResults() + 1 != in.getNumDims())
    return std::nullopt;
  // The loop the input does not read, right after one it does.
  for (unsigned group = 1; group < in.getNumDims(); ++group) {
    if (in.isFunctionOfDim(group))
      continue;
    for (auto [r, expr] : llvm::enumerate(in.getResults()))
      if (expr == getAffineDimExpr(group - 1, op.getContext()))
        return std::make_pair(int64_t(r), int64_t(group - 1));
    return std::nullopt;
  }
  return std::nullopt;
}

struct RepeatKVHeads : tp::impl::RepeatKVHeadsBase<RepeatKVHeads> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (devices < 2 || func.isExternal())
      return;
    SmallVector<linalg::GenericOp> seeds;
    func.walk([&](linalg::GenericOp op) { seeds.push_back(op); });
    for (linalg::GenericOp op : seeds) {
      std::optional<std::pair<int64_t, int64_t>> dims = matchQueryBroadcast(op);
      if (!dims)
        continue;
      auto [inputDim, kvDim] = *dims;
      ArrayRef<int64_t> shape =
          cast<RankedTensorType>(op.getResult(0).getType()).getShape();
      int64_t kv = shape[kvDim], group = shape[kvDim + 1];
      // Heads the ranks divide need nothing; only heads that divide the
      // ranks can each be held by ranks / heads of them.
      if (kv % devices == 0 || devices % kv != 0 || group % (devices / kv) != 0)
        continue;
      heads::HeadBlock block(kv, devices / kv);
      if (failed(block.widen(op.getDpsInputs()[0],
                             {inputDim, kv * (devices / kv)})) ||
          !block.isWorthRepeating())
        continue;
      block.apply();
      func.setType(FunctionType::get(&getContext(),
                                     func.getBody().getArgumentTypes(),
                                     func.getResultTypes()));
    }
  }
};

} // namespace
