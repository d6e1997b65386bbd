//===- SplitOutputs.cpp - tp-split-outputs --------------------------------===//
//
// A model output gathered just before the return (an LM head's logits,
// split by vocabulary) becomes each rank's block of it, tagged with the
// dim it was gathered on and its whole size: the runtime, not a collective,
// puts the blocks together, and generation picks tokens from them where
// they are.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::tp {
#define GEN_PASS_DEF_SPLITOUTPUTS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The gather of a returned value `v`, and the size of its gathered dim in
/// `v`: `all_gather(x)` itself, or a slice of it from 0 that drops padding
/// on the gathered dim only.
std::optional<std::pair<shard::AllGatherOp, int64_t>> getGather(Value v,
                                                                bool dimZero) {
  Value gathered = v;
  auto slice = v.getDefiningOp<tensor::ExtractSliceOp>();
  if (slice)
    gathered = slice.getSource();
  auto gather = gathered.getDefiningOp<shard::AllGatherOp>();
  if (!gather || !gathered.hasOneUse() || gather.getGridAxes().size() != 1)
    return std::nullopt;
  // Dim 0 is the batch, which micro-batches cut: the runtime joins those
  // (unless dimZero says that no micro-batches cut it).
  int64_t dim = gather.getGatherAxis().getSExtValue();
  if (dim == 0 && !dimZero)
    return std::nullopt;
  auto type = cast<RankedTensorType>(gather.getResult().getType());
  if (!slice)
    return std::pair(gather, type.getDimSize(dim));
  if (!slice.hasUnitStride() || !slice.hasZeroOffset() ||
      slice.getType().getRank() != type.getRank() ||
      !slice.getType().hasStaticShape())
    return std::nullopt;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d != dim && slice.getType().getDimSize(d) != type.getDimSize(d))
      return std::nullopt;
  return std::pair(gather, slice.getType().getDimSize(dim));
}

struct SplitOutputs : tp::impl::SplitOutputsBase<SplitOutputs> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    llvm::StringSet<> wanted;
    for (const std::string &name : names)
      wanted.insert(name);
    bool all = wanted.contains("*");
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    MLIRContext *ctx = &getContext();
    bool changed = false;
    for (OpOperand &operand : ret->getOpOperands()) {
      unsigned index = operand.getOperandNumber();
      auto name = func.getResultAttrOfType<StringAttr>(
          index, TPDialect::kOutputAttrName);
      if (!name || !(all || wanted.contains(name.getValue())))
        continue;
      auto found = getGather(operand.get(), dimZero);
      if (!found)
        continue;
      auto [gather, size] = *found;
      Value returned = operand.get();
      operand.set(gather.getInput());
      func.setResultAttr(index, TPDialect::kSplitOutputAttrName,
                         SplitOutputAttr::get(
                             ctx, gather.getGatherAxis().getSExtValue(), size));
      if (auto slice = returned.getDefiningOp<tensor::ExtractSliceOp>();
          slice && slice->use_empty())
        slice.erase();
      if (gather->use_empty())
        gather.erase();
      changed = true;
    }
    if (changed)
      func.setType(FunctionType::get(ctx, func.getArgumentTypes(),
                                     ret.getOperandTypes()));
  }
};

} // namespace
