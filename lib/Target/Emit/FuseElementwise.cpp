//===- FuseElementwise.cpp - one loop nest per elementwise chain ----------===//
//
// Every generic that is not a GEMM is a loop nest (a kernel launch on a
// GPU) and a round trip of its result through memory. Upstream's
// elementwise fusion folds an all-parallel producer into its consumer's
// payload; both emitters run it on their input, limited to what keeps
// their special cases intact and their output compilable:
//  - the producer has no other user, so nothing is computed twice;
//  - the consumer is neither a GEMM (BLAS would lose it) nor a one-hot
//    lookup (the lookup's pattern would no longer match);
//  - a fused nest has at most kMaxFusedInputs inputs and
//    kMaxFusedPayloadOps payload ops, so that a 10,000-op chain becomes a
//    few hundred moderate loops rather than one the host compiler cannot
//    build.
// Fusion keeps every scalar op and its order: results are bit-identical.
//
//===----------------------------------------------------------------------===//

#include "LinalgMatchers.h"

#include "tp/Target/Emit/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "tp/Target/Emit/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

/// Bounds on one fused loop nest, so that a long chain becomes many loops
/// of moderate size: a 10,000-op chain fused whole is one loop body the
/// host compiler cannot build in memory, and 10,000 weights added in a
/// line one loop with 10,000 operands.
constexpr unsigned kMaxFusedInputs = 8;
constexpr size_t kMaxFusedPayloadOps = 64;

static bool shouldFuse(OpOperand *fusedOperand) {
  auto producer = fusedOperand->get().getDefiningOp<linalg::GenericOp>();
  if (!producer || !producer->hasOneUse())
    return false;
  auto consumer = dyn_cast<linalg::GenericOp>(fusedOperand->getOwner());
  if (!consumer)
    return false;
  if (producer.getNumDpsInputs() + consumer.getNumDpsInputs() - 1 >
          kMaxFusedInputs ||
      producer.getBody()->getOperations().size() +
              consumer.getBody()->getOperations().size() >
          kMaxFusedPayloadOps)
    return false;
  // Never into a product (an elementwise producer fused there would run
  // once per term of the sum), even one of mixed operand types that only
  // the fused attention runs as a GEMM.
  return failed(emit::matchGemm(consumer, emit::GemmOperands::Mixed)) &&
         !emit::matchLookup(consumer, /*allowScatter=*/true);
}

LogicalResult mlir::tp::emit::fuseElementwiseChains(ModuleOp module) {
  RewritePatternSet patterns(module.getContext());
  linalg::populateElementwiseOpsFusionPatterns(patterns, shouldFuse);
  // Only fusion: folding would rewrite ops the emitters handle as they are.
  GreedyRewriteConfig config;
  config.enableFolding(false).enableConstantCSE(false);
  if (failed(applyPatternsGreedily(module, std::move(patterns), config)))
    return module.emitError("elementwise fusion did not converge");
  return success();
}

namespace {
struct FuseElementwise : tp::impl::FuseElementwiseBase<FuseElementwise> {
  void runOnOperation() override {
    if (failed(emit::fuseElementwiseChains(getOperation())))
      signalPassFailure();
  }
};
} // namespace
