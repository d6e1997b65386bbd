//===- SelectKernels.cpp - tp-select-kernels ------------------------------===//
//
// How code generation runs each linalg op, chosen once and written into the
// IR as #tp.kernel, so that tp-opt shows it and both emitters only follow
// it: a fused attention chain, a GEMM, a one-hot lookup or its scatter-add
// transpose, or a loop nest.
//
//===----------------------------------------------------------------------===//

#include "LinalgMatchers.h"

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/Passes.h"

#include <cstdlib>

namespace mlir::tp {
#define GEN_PASS_DEF_SELECTKERNELS
#include "tp/Target/Emit/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

LogicalResult mlir::tp::selectKernels(ModuleOp module, StringRef target) {
  if (target != "cpu" && target != "cuda")
    return module.emitError("tp-select-kernels: unknown target '")
           << target << "' (expected cpu or cuda)";
  MLIRContext *ctx = module.getContext();
  ctx->getOrLoadDialect<TPDialect>();
  auto mark = [&](Operation *op, Kernel kernel) {
    op->setAttr(TPDialect::kKernelAttrName, KernelAttr::get(ctx, kernel));
  };
  // A choice made before (for another target) is made again.
  module.walk(
      [&](Operation *op) { op->removeAttr(TPDialect::kKernelAttrName); });
  // Fused attention first: its products are GEMMs only outside it.
  // TP_FUSED_ATTENTION=0 keeps the chains as they are (to compare, or to
  // rule the fused code out).
  const char *fused = std::getenv("TP_FUSED_ATTENTION");
  if (!fused || StringRef(fused) != "0") {
    module.walk([&](linalg::GenericOp op) {
      std::optional<emit::FusedAttention> chain = emit::matchAttention(op);
      if (!chain)
        return;
      mark(op, Kernel::Attention);
      for (linalg::GenericOp inner :
           {chain->scores, chain->rounding, chain->max, chain->exp, chain->sum,
            chain->probs, chain->keyTranspose})
        if (inner)
          mark(inner, Kernel::InAttention);
      for (linalg::GenericOp inner : chain->logits)
        mark(inner, Kernel::InAttention);
      for (Operation *inner : chain->reshapes)
        mark(inner, Kernel::InAttention);
      for (Operation *inner : chain->headRepeats)
        mark(inner, Kernel::InAttention);
    });
  }
  module.walk([&](linalg::GenericOp op) {
    if (op->hasAttr(TPDialect::kKernelAttrName))
      return;
    if (succeeded(emit::matchGemm(op)))
      return mark(op, Kernel::Gemm);
    if (std::optional<emit::Lookup> lookup =
            emit::matchLookup(op, /*allowScatter=*/target == "cpu"))
      return mark(op, lookup->scatter ? Kernel::ScatterAdd : Kernel::Lookup);
    mark(op, Kernel::LoopNest);
  });
  return success();
}

namespace {
struct SelectKernels : tp::impl::SelectKernelsBase<SelectKernels> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(selectKernels(getOperation(), target)))
      signalPassFailure();
  }
};
} // namespace
