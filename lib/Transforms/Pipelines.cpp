//===- Pipelines.cpp - named tp-mlir pipelines ----------------------------===//
//
// `tp-parallelize`: the tensor-parallel plan, then upstream sharding
// propagation and partition, then cleanup. The result is one SPMD program
// for every rank, with shard.all_reduce / all_gather where the plan needs
// them.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Pipelines.h"

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::tp;

void mlir::tp::buildParallelizePipeline(OpPassManager &pm,
                                        const ParallelizeOptions &options) {
  PlanTensorParallelOptions plan;
  plan.devices = options.devices;
  plan.strategy = options.strategy;
  plan.config = options.config;
  // A shape fold at import can leave dead ops, and a canonicalizer or CSE
  // run on the input hoists body constants and shares inits; upstream
  // partition handles none of these, so they are undone before planning.
  pm.addNestedPass<func::FuncOp>(createDropDeadOps());
  // Attention on [batch * heads, ...] views: back to separate dims, so that
  // the heads can split.
  if (options.devices > 1)
    pm.addNestedPass<func::FuncOp>(createUnflattenBatchDims());
  pm.addNestedPass<func::FuncOp>(createUnshareValues());
  if (options.devices > 1 && options.padding) {
    PadVocabularyOptions pad;
    pad.devices = options.devices;
    pm.addNestedPass<func::FuncOp>(createPadVocabulary(pad));
  }
  pm.addNestedPass<func::FuncOp>(createSplitFusedProjections());
  // Contractions over concatenated branches: one per branch, summed.
  if (options.devices > 1)
    pm.addNestedPass<func::FuncOp>(createSplitConcatContractions());
  pm.addNestedPass<func::FuncOp>(createSplitFusedWeights());
  // Grouped-query K/V heads fewer than the ranks: repeated, each rank
  // holding one (not when training: a repeated weight's copies would get
  // different gradients).
  if (options.devices > 1 && !options.gradients) {
    RepeatKVHeadsOptions repeat;
    repeat.devices = options.devices;
    pm.addNestedPass<func::FuncOp>(createRepeatKVHeads(repeat));
  }
  // Heads that do not divide: padded, so that attention splits (after the
  // fused weights are pieces, so that each piece is padded on its own).
  if (options.devices > 1 && options.padding) {
    PadAttentionHeadsOptions pad;
    pad.devices = options.devices;
    pm.addNestedPass<func::FuncOp>(createPadAttentionHeads(pad));
  }
  // The backward is built on the forward as the planner reads it (batch
  // dims unflattened, fused projections cut, vocabularies and heads
  // padded), so that the plan splits both together.
  if (options.gradients) {
    DifferentiateOptions differentiate;
    differentiate.loss = options.loss;
    differentiate.freeze = options.freeze;
    differentiate.perArgument = options.perArgumentGradients;
    differentiate.scaledLoss = options.scaledLoss;
    pm.addPass(createDifferentiate(differentiate));
  }
  pm.addPass(createPlanTensorParallel(plan));
  if (options.sequenceParallel)
    pm.addPass(createPlanSequenceParallel());
  // With one device there is nothing to partition: the program stays whole
  // (and ops without a sharding model never meet upstream's partitioner).
  if (options.devices > 1) {
    pm.addPass(createOutlineUnpartitionable());
    OpPassManager &func = pm.nest<func::FuncOp>();
    func.addPass(shard::createShardingPropagation());
    func.addPass(createAnnotateInits());
    func.addPass(createCheckPartitionable());
    func.addPass(shard::createPartition());
    func.addPass(createOffsetVocabLookups());
    func.addPass(createOffsetSplitIndices());
    func.addPass(createLocalizePaddedWeights());
  }
  // Put back what tp-outline-unpartitionable moved out of the way.
  pm.addPass(createInlinerPass());
  pm.addPass(createSymbolDCEPass());
  // Convolutions ran replicated through partition (outlined); split their
  // output channels now that they are back inline.
  if (options.devices > 1)
    pm.addNestedPass<func::FuncOp>(createSplitConvolutions());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.sequenceParallel)
    pm.addNestedPass<func::FuncOp>(createFormReduceScatter());
  // Resharding between two split dims: a gather and a local slice.
  if (options.devices > 1)
    pm.addNestedPass<func::FuncOp>(createDecomposeAllToAll());
  // Parallel-residual blocks: one all-reduce (or reduce-scatter) for
  // attention + MLP.
  if (options.devices > 1)
    pm.addNestedPass<func::FuncOp>(createMergeAllReduces());
  // Pipeline stages are cut from the per-rank program, so each stage keeps
  // its tensor-parallel collectives: PP x TP.
  if (options.stages > 1) {
    PlanPipelineOptions pipeline;
    pipeline.stages = options.stages;
    pipeline.microbatches = options.microbatches;
    pipeline.boundaries.assign(options.pipelineBoundaries.begin(),
                               options.pipelineBoundaries.end());
    pm.addPass(createPlanPipeline(pipeline));
  }
  // Outputs that stay split: each rank returns its block (of every stage
  // function, so after the pipeline cut).
  if (options.devices > 1 && !options.splitOutputs.empty()) {
    SplitOutputsOptions split;
    split.names.assign(options.splitOutputs.begin(),
                       options.splitOutputs.end());
    split.dimZero = options.splitDimZero;
    pm.addNestedPass<func::FuncOp>(createSplitOutputs(split));
  }
  // Mixed precision last: the planning passes match the model's own ops.
  if (!options.dtype.empty() && options.dtype != "f32") {
    ConvertDTypeOptions convert;
    convert.dtype = options.dtype;
    convert.masterWeights = options.masterWeights;
    pm.addPass(createConvertDType(convert));
  }
  // Recomputation on the per-rank program, after every CSE (which would
  // merge the copies back into the forward).
  if (options.gradients && options.recompute)
    pm.addNestedPass<func::FuncOp>(createRecomputeLayers());
}

void mlir::tp::registerTPPipelines() {
  PassPipelineRegistration<ParallelizeOptions>(
      "tp-parallelize",
      "Split @main across devices: tensor-parallel plan, sharding "
      "propagation, partition, cleanup",
      buildParallelizePipeline);
  // The pass's name before it ran ahead of planning.
  PassPipelineRegistration<>(
      "tp-localize-fused-weights", "Alias of tp-split-fused-weights",
      [](OpPassManager &pm) {
        pm.addNestedPass<func::FuncOp>(createSplitFusedWeights());
      });
}
