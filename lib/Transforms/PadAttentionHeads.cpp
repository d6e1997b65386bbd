//===- PadAttentionHeads.cpp - tp-pad-attention-heads ---------------------===//
//
// A head count the devices do not divide (OPT's 5 heads on 2 ranks, GPT-2's
// 6 on 4, GPT-2 XL's 25 on 2) would leave attention replicated. This pass
// pads the heads, before planning: every value of the attention block that
// has a heads dim grows it to the next multiple of the devices, the
// projections that make them get zero output columns and the projection
// that consumes them zero input rows. Whatever a padded head computes is
// finite, and it meets only zero rows of the output projection, so it adds
// exactly nothing: the result is that of the unpadded model.
//
// The block is found by closure from a reshape that splits a dim into
// (heads, head_dim): a loop of a linalg op that reads a widened dim grows
// with it, and so does every operand and result that it indexes. An operand
// that cannot grow with it (a weight, a constant, K/V heads repeated for
// grouped-query attention) is read through a zero `tensor.pad`. The block
// is rewritten only if the closure holds everywhere and ends in a weight
// contraction over the heads; anything else (a reduction over heads, a
// head index in a body, a heads dim reaching a result) leaves it as it was,
// and the planner explains why it stays replicated.
//
//===----------------------------------------------------------------------===//

#include "HeadBlock.h"

#include "tp/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_PADATTENTIONHEADS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

using heads::firstNonUnit;
using heads::HeadBlock;
using heads::roundUp;
using heads::Widening;

struct PadAttentionHeads : tp::impl::PadAttentionHeadsBase<PadAttentionHeads> {
  using Base::Base;

  void runOnOperation() override {
    if (devices < 2)
      return;
    SmallVector<tensor::ExpandShapeOp> seeds;
    getOperation().walk([&](tensor::ExpandShapeOp op) { seeds.push_back(op); });
    SmallVector<HeadBlock, 0> done;
    for (tensor::ExpandShapeOp expand : seeds) {
      if (llvm::any_of(done, [&](const HeadBlock &block) {
            return block.contains(expand);
          }))
        continue;
      // A split of one dim into (heads, head_dim, ...) with heads that the
      // devices do not divide.
      auto shape = expand.getResultType().getShape();
      for (const ReassociationIndices &group :
           expand.getReassociationIndices()) {
        std::optional<int64_t> heads = firstNonUnit(shape, group);
        if (!heads || shape[*heads] % devices == 0 ||
            llvm::count_if(group, [&](int64_t d) { return shape[d] != 1; }) < 2)
          continue;
        HeadBlock block;
        if (failed(block.widen(expand.getResult(),
                               {*heads, roundUp(shape[*heads], devices)})) ||
            !block.isWorthPadding())
          continue;
        block.apply();
        if (block.changesArguments()) {
          func::FuncOp func = getOperation();
          func.setType(FunctionType::get(&getContext(),
                                         func.getBody().getArgumentTypes(),
                                         func.getResultTypes()));
        }
        done.push_back(std::move(block));
        break;
      }
    }
  }
};

} // namespace
