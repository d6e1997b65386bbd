//===- FuseElementwise.cpp - one kernel per elementwise chain -------------===//
//
// On a GPU every generic that is not a GEMM is a kernel launch and a round
// trip of its result through device memory. Upstream's elementwise fusion
// folds an all-parallel producer into its consumer's payload; this runs it
// on the CUDA emitter's input, limited to what keeps the emitter's special
// cases intact:
//  - the producer has no other user, so nothing is computed twice;
//  - the consumer is neither a GEMM (cuBLAS would lose it) nor a one-hot
//    lookup (the lookup's pattern would no longer match).
// The C++ emitter does not fuse: its loops are cheap to keep apart, and its
// output stays a line-by-line image of the partitioned module.
//
//===----------------------------------------------------------------------===//

#include "LinalgMatchers.h"

#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;
using namespace mlir::tp;

static bool shouldFuse(OpOperand *fusedOperand) {
  Operation *producer = fusedOperand->get().getDefiningOp();
  if (!producer || !producer->hasOneUse())
    return false;
  auto consumer = dyn_cast<linalg::GenericOp>(fusedOperand->getOwner());
  if (!consumer)
    return false;
  return failed(emit::matchGemm(consumer)) && !emit::matchLookup(consumer);
}

LogicalResult mlir::tp::prepareForCudaEmission(ModuleOp module) {
  if (failed(prepareForEmission(module)))
    return failure();
  RewritePatternSet patterns(module.getContext());
  linalg::populateElementwiseOpsFusionPatterns(patterns, shouldFuse);
  // Only fusion: folding would rewrite ops the emitters handle as they are.
  GreedyRewriteConfig config;
  config.enableFolding(false).enableConstantCSE(false);
  if (failed(applyPatternsGreedily(module, std::move(patterns), config)))
    return module.emitError("elementwise fusion did not converge");
  return success();
}
