//===- LocalizePaddedWeights.cpp - tp-localize-padded-weights -------------===//
//
// tp-pad-vocabulary reads a weight through a zero tensor.pad so that it
// splits evenly; after partition every rank still reads the whole weight,
// pads it and keeps its slice (shard.all_slice). This pass makes the
// argument that slice, so each rank stores only its rows of the padded
// weight, and records the padding in its #tp.layout (the artifact writer
// writes the padding as zeros).
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::tp {
#define GEN_PASS_DEF_LOCALIZEPADDEDWEIGHTS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The dim `pad` pads (at its end only), if exactly one.
std::optional<int64_t> getPaddedDim(tensor::PadOp pad) {
  std::optional<int64_t> dim;
  for (auto [d, low, high] :
       llvm::enumerate(pad.getStaticLow(), pad.getStaticHigh())) {
    if (low != 0 || ShapedType::isDynamic(high))
      return std::nullopt;
    if (high == 0)
      continue;
    if (dim)
      return std::nullopt;
    dim = d;
  }
  return dim;
}

struct LocalizePaddedWeights
    : tp::impl::LocalizePaddedWeightsBase<LocalizePaddedWeights> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *ctx = func.getContext();
    SmallVector<Type> inputs(func.getArgumentTypes());
    for (BlockArgument arg : func.getArguments()) {
      unsigned index = arg.getArgNumber();
      if (!func.getArgAttr(index, TPDialect::kWeightAttrName) ||
          arg.use_empty())
        continue;
      // Every reader pads it the same way (a weight shared by several
      // layers, as ALBERT's, is padded once per use) ...
      SmallVector<tensor::PadOp> pads;
      std::optional<int64_t> dim;
      for (Operation *user : arg.getUsers()) {
        auto pad = dyn_cast<tensor::PadOp>(user);
        std::optional<int64_t> padDim = pad ? getPaddedDim(pad) : std::nullopt;
        if (!padDim || pad->use_empty() ||
            (!pads.empty() &&
             (padDim != dim ||
              pad.getResultType() != pads.front().getResultType()))) {
          pads.clear();
          break;
        }
        dim = padDim;
        pads.push_back(pad);
      }
      if (pads.empty())
        continue;
      // ... and keeps the same slice (a table tied to the LM head is one pad
      // read by both).
      SmallVector<shard::AllSliceOp> keeps;
      bool sameSlices = true;
      for (tensor::PadOp pad : pads) {
        for (Operation *user : pad->getUsers()) {
          auto slice = dyn_cast<shard::AllSliceOp>(user);
          if (!slice || slice.getGridAxes().size() != 1 ||
              slice.getSliceAxis().getSExtValue() != *dim ||
              (!keeps.empty() &&
               (slice.getType() != keeps.front().getType() ||
                slice.getGridAxes() != keeps.front().getGridAxes() ||
                slice.getGrid() != keeps.front().getGrid()))) {
            sameSlices = false;
            break;
          }
          keeps.push_back(slice);
        }
      }
      if (!sameSlices)
        continue;
      tensor::PadOp pad = pads.front();
      shard::AllSliceOp keep = keeps.front();
      // A piece of a fused weight can only be padded along the dim it was
      // cut on: its layout has one dim.
      LayoutAttr layout = getLayout(func, index);
      if (layout && layout.isPiece() && layout.getDim() != *dim)
        continue;
      int64_t original = pad.getSourceType().getDimSize(*dim);
      int64_t padded = pad.getResultType().getDimSize(*dim);
      auto local = cast<RankedTensorType>(keep.getType());
      arg.setType(local);
      inputs[index] = local;
      for (shard::AllSliceOp slice : keeps)
        slice.getResult().replaceAllUsesWith(arg);
      // What the plan said of the padded weight now describes the argument
      // (a piece keeps its range); a pad the plan did not split was split by
      // sharding propagation.
      auto planned = pad->getAttrOfType<LayoutAttr>(TPDialect::kLayoutAttrName);
      SplitRole role = planned ? planned.getRole() : SplitRole::Propagated;
      int64_t block = planned ? planned.getBlock() : -1;
      layout = layout ? layout.withSplit(role, *dim, block)
                      : LayoutAttr::get(ctx, role, *dim, block);
      setLayout(func, index, layout.withPadding(original, padded));
      for (shard::AllSliceOp slice : keeps)
        slice.erase();
      for (tensor::PadOp padOp : pads)
        padOp.erase();
    }
    func.setType(FunctionType::get(ctx, inputs, func.getResultTypes()));
  }
};

} // namespace
