//===- Pipelines.h - named tp-mlir pipelines --------------------*- C++ -*-===//
//
// The pipelines tp-opt registers and tp-compile runs, built in one place so
// that every stage a user sees can be rerun by name.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TRANSFORMS_PIPELINES_H
#define TP_TRANSFORMS_PIPELINES_H

#include "mlir/Pass/PassOptions.h"

#include <string>

namespace mlir {
class OpPassManager;
namespace tp {

struct ParallelizeOptions : public PassPipelineOptions<ParallelizeOptions> {
  PassOptions::Option<int64_t> devices{
      *this, "devices", llvm::cl::desc("Number of tensor-parallel ranks"),
      llvm::cl::init(2)};
  PassOptions::Option<std::string> strategy{*this, "strategy",
                                            llvm::cl::desc("auto or config"),
                                            llvm::cl::init("auto")};
  PassOptions::Option<std::string> config{
      *this, "config",
      llvm::cl::desc("JSON rules for strategy=config (regex on weight names "
                     "-> split dim or replicate)"),
      llvm::cl::init("")};
  PassOptions::Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("Also split the activations between blocks on the "
                     "sequence dim (reduce-scatter + all-gather instead of "
                     "all-reduce)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> padding{
      *this, "padding",
      llvm::cl::desc("Pad vocabularies that the device count does not "
                     "divide (false: replicate them, with a warning)"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> stages{
      *this, "stages",
      llvm::cl::desc("Pipeline stages (1: no pipeline parallelism); the "
                     "device grid is stages x devices"),
      llvm::cl::init(1)};
  PassOptions::Option<int64_t> microbatches{
      *this, "microbatches",
      llvm::cl::desc("Micro-batches per step for the 1F1B schedule"),
      llvm::cl::init(1)};
  PassOptions::ListOption<int64_t> pipelineBoundaries{
      *this, "pipeline-boundaries",
      llvm::cl::desc("With stages > 1: cut at these candidate boundaries "
                     "(tp-plan-pipeline boundaries) instead of balancing "
                     "FLOPs")};
  PassOptions::Option<std::string> dtype{
      *this, "dtype",
      llvm::cl::desc("Store f32 weights and activations as bf16 or f16, "
                     "computing in f32 (tp-convert-dtype; empty or f32: "
                     "the model's own types)"),
      llvm::cl::init("")};
  PassOptions::Option<bool> masterWeights{
      *this, "master-weights",
      llvm::cl::desc("With dtype: weights stay f32 (the optimizer's master "
                     "copy), rounded where the program starts "
                     "(tp-convert-dtype master-weights)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> gradients{
      *this, "gradients",
      llvm::cl::desc("Append the gradient of the scalar loss with respect to "
                     "every trainable weight (tp-differentiate), after the "
                     "forward is normalized for planning and before the "
                     "plan, which then splits forward and backward together"),
      llvm::cl::init(false)};
  PassOptions::Option<std::string> loss{
      *this, "loss",
      llvm::cl::desc("With gradients: the output to differentiate"),
      llvm::cl::init("")};
  PassOptions::Option<std::string> freeze{
      *this, "freeze",
      llvm::cl::desc("With gradients: weights whose name matches this regex "
                     "are not trained"),
      llvm::cl::init("")};
  PassOptions::Option<bool> scaledLoss{
      *this, "scaled-loss",
      llvm::cl::desc("With gradients: start the backward from the input "
                     "loss_scale instead of 1 (tp-differentiate "
                     "scaled-loss; dynamic loss scaling)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> perArgumentGradients{
      *this, "per-argument-gradients",
      llvm::cl::desc("With gradients: one gradient per weight argument "
                     "(tp-differentiate per-argument), as training updates "
                     "them"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> recompute{
      *this, "recompute",
      llvm::cl::desc("With gradients: recompute each layer's forward in "
                     "the backward instead of stashing it "
                     "(tp-recompute-layers, last)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> splitDimZero{
      *this, "split-dim-zero",
      llvm::cl::desc("Split outputs gathered on dim 0 too (tp-split-outputs "
                     "dim-zero): no micro-batches cut it"),
      llvm::cl::init(false)};
  PassOptions::ListOption<std::string> splitOutputs{
      *this, "split-outputs",
      llvm::cl::desc("Model outputs that each rank returns its block of "
                     "instead of gathering them (tp-split-outputs)")};
};

/// plan (TP, then SP if asked) → sharding-propagation → shard-partition →
/// cleanup.
void buildParallelizePipeline(OpPassManager &pm,
                              const ParallelizeOptions &options);

/// Registers `tp-parallelize`.
void registerTPPipelines();

} // namespace tp
} // namespace mlir

#endif // TP_TRANSFORMS_PIPELINES_H
