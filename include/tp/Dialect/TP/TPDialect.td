//===- TPDialect.td - the tp dialect -----------------------*- tablegen -*-===//
//
// The tp dialect owns the `tp.*` attributes that the importer writes on
// @main (weights, input/output names, where the model lives) and verifies
// them. Computation stays in upstream dialects, but for the one op they
// lack (TPOps.td: the in-place write of a KV cache).
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_TPDIALECT_TD
#define TP_DIALECT_TP_TPDIALECT_TD

include "mlir/IR/DialectBase.td"

def TP_Dialect : Dialect {
  let name = "tp";
  let cppNamespace = "::mlir::tp";
  let summary = "Attributes of tp-mlir: weights, model files, tensor names";
  let description = [{
    Imported models are `func.func @main` in upstream dialects. The tp dialect
    only names and verifies the discardable attributes that carry what the
    compiler must not lose:

    - `tp.weight = "<initializer>"` on an argument: the argument is the ONNX
      initializer of that name; its bytes stay in the model file.
    - `tp.input = "<name>"` / `tp.output = "<name>"` on arguments / results:
      the ONNX graph input or output name.
    - `tp.layout = #tp.layout<role = ..., dim = D, ...>` on a weight
      argument (TPAttrs.td): how the plan split it (role, dim, block), the
      range of its initializer it holds when it is one piece of a fused
      weight (`slice = [offset, size]`, tp-split-fused-weights), and the
      zero padding of that range before the split (`padded = [V, P]`,
      tp-localize-padded-weights). Before partition it may also sit on a
      `tensor.pad` or `tensor.extract_slice` of a weight that the plan
      splits. An argument without one is whole on every rank.
    - `tp.index_bound = N` on an integer input argument that some gather
      reads as an index into a dim of size N (an embedding's vocabulary, a
      position table): the run-time values must lie in [-N, N), as ONNX
      Gather requires; tp-run checks them.
    - `tp.replicated = "<reason>"` on a contraction: why the planner left
      its weight whole.
    - `tp.embedding = V` on the linalg.generic of an embedding lookup
      (written as a reduction over a vocabulary of V).
    - `tp.split_loop = L` on a linalg op that upstream partition cannot
      split (a convolution's window), planned to split on its parallel loop
      L all the same (a depthwise convolution on split channels);
      tp-outline-unpartitionable then calls it through a per-rank callee.
    - `tp.local_callee = @f` on the call tp-outline-unpartitionable made of
      such an op: @f is its callee with this rank's shapes, which partition
      calls instead.
    - `tp.backward` (unit) on an op that tp-differentiate built: part of
      the backward pass. The planner splits the forward; the backward's
      splits follow from it through sharding propagation.
    - `tp.loop_sizes = array<i64: ...>` on a linalg op whose body reads
      `linalg.index`: its loop sizes before partition, so that
      tp-offset-split-indices can make the indices of split loops global.
    - `tp.prefill_stage = K` and `tp.prefill_chunk = C` on stage K of a
      generation artifact's prefill chunk of C tokens (@prefill_<C>, or
      @prefill_<C>_stage<K> under a pipeline), which runs on the same
      ranks, weights and KV caches as decode stage K.
    - `tp.stage = K` on a pipeline stage function, and `tp.pipeline =
      {stages, microbatches, schedule, flops}` on the module
      (tp-plan-pipeline).
    - `tp.grid_role = #tp.grid_role<tensor|pipeline>` on a `shard.grid`:
      what the grid is for (tp-plan-tensor-parallel, tp-plan-pipeline);
      passes find the grids by it (`tp::lookupGrid`), not by name.
    - `tp.cache = "<input name>"` on an argument: a KV cache that the
      runtime owns and keeps between calls (tp-kv-cache): the export's
      `past_key_values` input, grown to every position of the context.
      Only a `tp.cache_update` reads it.
    - `tp.split_output = #tp.split_output<dim = D, size = N>` on a
      `tp.output` result: the rank returns its block of dim D of an output
      with N entries there (tp-split-outputs).
    - `tp.model = "<path>"` and `tp.external_data = ["<file>", ...]` on the
      module: where the weights live.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();

    static constexpr llvm::StringLiteral kWeightAttrName = "tp.weight";
    static constexpr llvm::StringLiteral kInputAttrName = "tp.input";
    static constexpr llvm::StringLiteral kOutputAttrName = "tp.output";
    static constexpr llvm::StringLiteral kModelAttrName = "tp.model";
    static constexpr llvm::StringLiteral kExternalDataAttrName =
        "tp.external_data";
    static constexpr llvm::StringLiteral kOpsetAttrName = "tp.opset";
    static constexpr llvm::StringLiteral kLayoutAttrName = "tp.layout";
    /// On a linalg op or reshape of a module prepared for emission: how
    /// code generation runs it (#tp.kernel, tp-select-kernels).
    static constexpr llvm::StringLiteral kKernelAttrName = "tp.kernel";
    static constexpr llvm::StringLiteral kIndexBoundAttrName =
        "tp.index_bound";
    static constexpr llvm::StringLiteral kReplicatedAttrName =
        "tp.replicated";
    static constexpr llvm::StringLiteral kStageAttrName = "tp.stage";
    static constexpr llvm::StringLiteral kEmbeddingAttrName = "tp.embedding";
    static constexpr llvm::StringLiteral kLoopSizesAttrName = "tp.loop_sizes";
    static constexpr llvm::StringLiteral kPipelineAttrName = "tp.pipeline";
    static constexpr llvm::StringLiteral kGridRoleAttrName = "tp.grid_role";
    static constexpr llvm::StringLiteral kCacheAttrName = "tp.cache";
    static constexpr llvm::StringLiteral kPrefillStageAttrName =
        "tp.prefill_stage";
    static constexpr llvm::StringLiteral kPrefillChunkAttrName =
        "tp.prefill_chunk";
    static constexpr llvm::StringLiteral kSplitOutputAttrName =
        "tp.split_output";
    static constexpr llvm::StringLiteral kSplitLoopAttrName = "tp.split_loop";
    static constexpr llvm::StringLiteral kLocalCalleeAttrName =
        "tp.local_callee";
    static constexpr llvm::StringLiteral kBackwardAttrName = "tp.backward";
    /// The input tp-differentiate scaled-loss adds: the f32 scalar the
    /// backward starts from (dynamic loss scaling).
    static constexpr llvm::StringLiteral kLossScaleInputName = "loss_scale";
    /// Unit, on an op: a copy of a forward op, run again in the backward
    /// (tp-recompute-layers).
    static constexpr llvm::StringLiteral kRecomputedAttrName =
        "tp.recomputed";
    /// i64, on a function: its stash's bytes before tp-recompute-layers.
    static constexpr llvm::StringLiteral kStashWithoutRecomputeAttrName =
        "tp.stash_without_recompute";
    /// Unit, on the module: an optimizer updates the weights in place
    /// between runs (tp-compile --train), so code generation keeps no
    /// copy of a weight across runs (no packed weights).
    static constexpr llvm::StringLiteral kMutableWeightsAttrName =
        "tp.mutable_weights";
    /// On the module: an array of #tp.tied_weight, the initializers
    /// imported as another's value.
    static constexpr llvm::StringLiteral kTiedWeightsAttrName =
        "tp.tied_weights";
  }];
}

#endif // TP_DIALECT_TP_TPDIALECT_TD
