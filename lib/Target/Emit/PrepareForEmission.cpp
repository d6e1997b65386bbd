//===- PrepareForEmission.cpp - tp-prepare-for-emission -------------------===//
//
// What both emitters run on a partitioned module before printing it: named
// linalg ops (but fills) become the generics they compute, which is all
// the emitters match, then elementwise chains fuse (FuseElementwise.cpp).
//
//===----------------------------------------------------------------------===//

#include "LinalgMatchers.h"

#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::tp {
#define GEN_PASS_DEF_PREPAREFOREMISSION
#include "tp/Target/Emit/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

LogicalResult mlir::tp::prepareForEmission(ModuleOp module, StringRef target) {
  SmallVector<linalg::LinalgOp> named;
  module.walk([&](linalg::LinalgOp op) {
    if (!isa<linalg::GenericOp, linalg::FillOp>(op))
      named.push_back(op);
  });
  IRRewriter rewriter(module.getContext());
  for (linalg::LinalgOp op : named) {
    rewriter.setInsertionPoint(op);
    if (failed(linalg::generalizeNamedOp(rewriter, op)))
      return op->emitError("cannot rewrite ")
             << op->getName() << " as linalg.generic for code generation";
  }
  if (failed(emit::fuseElementwiseChains(module)))
    return failure();
  return selectKernels(module, target);
}

namespace {
struct PrepareForEmission
    : tp::impl::PrepareForEmissionBase<PrepareForEmission> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(prepareForEmission(getOperation(), target)))
      signalPassFailure();
  }
};
} // namespace
