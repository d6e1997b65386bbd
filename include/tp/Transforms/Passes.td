//===- Passes.td - tp-mlir transform passes ----------------*- tablegen -*-===//
//
// Passes over imported models. Every flag starts with `tp-`.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TRANSFORMS_PASSES_TD
#define TP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ModelSummary : Pass<"tp-model-summary", "::mlir::ModuleOp"> {
  let summary = "Print what an imported model holds: inputs, outputs, "
                "weights and ops";
  let description = [{
    Prints, for each function, its inputs and outputs with their ONNX names
    and types, the number of weights and parameters (and their bytes), and
    how many of each op it contains. The IR is not changed. Used by the
    README's first command to show that a model imported.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print the summary as one JSON object">
  ];
}

def SplitFusedProjections : Pass<"tp-split-fused-projections",
                                 "::mlir::func::FuncOp"> {
  let summary = "Split a fused projection (QKV) into one contraction per "
                "slice of its output";
  let description = [{
    A weight contraction whose result (after elementwise ops such as a bias
    add) is only ever cut into slices along its output dim, as a fused QKV
    projection is, computes independent projections side by side. Splitting
    its output dim across devices would hand each rank a mix of Q, K and V.
    This pass rewrites it into one contraction per slice, each reading the
    matching slice of the weight (and of every bias on the way), so that
    each can be planned column-parallel on its own. The arithmetic is
    unchanged.
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def SplitConcatContractions : Pass<"tp-split-concat-contractions",
                                   "::mlir::func::FuncOp"> {
  let summary = "Write a weight contraction over a concatenation as a sum of "
                "contractions, one per piece";
  let description = [{
    `concat(a, b) · W = a · W[:na] + b · W[na:]`: a weight contraction whose
    input is a concatenation along the contracted dim (directly, or through
    a collapse that merges the concatenated dim, outermost, into it: heads
    of two branches concatenated, then [heads, head_dim] merged; ConvBERT's
    attention and dynamic convolution) becomes one contraction per piece,
    each reading its rows of the weight, and their sum. Each piece's
    contraction can then be row-parallel with its own branch's split, and
    the partial sums meet in one all-reduce. The arithmetic is the same up
    to the order of the sum.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def RecomputeLayers : Pass<"tp-recompute-layers", "::mlir::func::FuncOp"> {
  let summary = "Recompute each layer's forward in the backward instead of "
                "stashing it";
  let description = [{
    Activation recomputation (activation checkpointing), on a function that
    tp-differentiate extended with its backward (the backward's ops follow
    the forward's). The forward is cut at its residual adds; the values a
    segment between two residual adds computes are the layer's. Each such
    value that the backward reads is computed again, from the segment's
    inputs (the residual stream, weights, inputs; the stash), by copies of
    the ops that make it, placed just before the first backward op that
    reads any of the segment's values, and the backward reads the copies:
    the forward's own values die at their last forward use. The copies
    carry `tp.recomputed`, and run the segment's collectives again, as
    Megatron-LM's recomputation does. Segments before the first residual
    add (the embeddings) and after the last (the head and the loss) are
    stashed as before. The function gets `tp.stash_without_recompute`, the
    stash's bytes before the pass, which tp-explain prints beside the
    stash after it. Run it last (after partition and CSE, which would merge
    the copies back).
  }];
}

def Differentiate : Pass<"tp-differentiate", "::mlir::ModuleOp"> {
  let summary = "Append to @main the gradient of its loss with respect to "
                "every trainable weight";
  let description = [{
    Reverse mode on the imported IR. The loss is the output named `loss`,
    or the only scalar float output. Every float `tp.weight` argument is
    trainable unless its name matches `freeze` (a regex). Named linalg ops
    are generalized first; one rule then differentiates every
    `linalg.generic` whose body is arith/math on scalars and whose init is
    unread, summed into or maxed into (elementwise ops, broadcasts,
    contractions, sum and max reductions): for an input read through a
    plain map m, a generic over the same loops writes dy times the body's
    derivative (forward mode on its scalars) through m, summing over the
    loops m leaves out. expand/collapse_shape, extract_slice, concat and
    constant pads move the gradient back. The gradients are appended as
    results named `grad.<weight>`, in argument order (with `per-argument`,
    one per argument: `grad.<weight>[a:b]` for a piece). An op on the path
    from a weight to the loss without a rule is an error at its location
    (the ONNX node).
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"",
           "The output to differentiate (default: the only scalar float "
           "output)">,
    Option<"freeze", "freeze", "std::string", /*default=*/"",
           "Weights whose name matches this regex are not trained">,
    Option<"perArgument", "per-argument", "bool", /*default=*/"false",
           "One gradient per weight argument, named after the argument as "
           "the artifact names it (grad.<initializer>[a:b] for a piece of a "
           "fused weight), instead of joining the pieces into one gradient "
           "of the initializer: what an optimizer updating each rank's "
           "arguments in place reads (tp-compile --train)">,
    Option<"scaledLoss", "scaled-loss", "bool", /*default=*/"false",
           "Start the backward from a new scalar input, `loss_scale`, "
           "instead of 1: every gradient comes out multiplied by it "
           "(dynamic loss scaling, tp-compile --train --dtype f16)">,
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def DropDeadOps : Pass<"tp-drop-dead-ops", "::mlir::func::FuncOp"> {
  let summary = "Erase side-effect-free ops whose results are never used";
  let description = [{
    The importer folds shape sub-graphs away, which can leave the op that fed
    them (a `linalg.transpose` read only by an ONNX `Shape`) with no use.
    Sharding propagation gives an unused result no annotation, and upstream
    partition cannot handle an op without one. This pass erases every op
    that `isOpTriviallyDead` (no uses, no side effects), users first, so a
    dead chain goes at once. Block arguments and the function signature are
    left alone. `tp-parallelize` runs it before planning.
  }];
}

def UnshareValues : Pass<"tp-unshare-values", "::mlir::func::FuncOp"> {
  let summary = "Give each use its own copy of the cheap values a "
                "canonicalizer shares";
  let description = [{
    The importer gives every linalg op its own `tensor.empty` and
    `linalg.fill` init and writes scalar constants inside the bodies that
    read them. `--canonicalize` hoists those constants to the function entry
    and `--cse` shares the inits, and upstream partition handles neither:
    - LLVM 22's `shard-partition` rebuilds a linalg op whose reduction loop
      is split (an embedding lookup, a row-parallel contraction) with a
      mapping of its operands only, so a body that reads a value from
      outside keeps reading the erased original: a dangling use, then a
      crash (reported in `arith.cmpi`'s verifier).
    - An init shared by a split and a replicated op gets one sharding, so
      partition reshards it: an all-gather of an empty tensor.
    - An op that reads one tensor through two operands with different
      indexing maps (X · Xᵀ) gets one sharding for both, which a split
      puts on two of its loops: partition builds an op whose shapes
      disagree.
    This pass copies each such scalar constant into every linalg body that
    reads it, gives every use of a `tensor.empty` or a `linalg.fill` its
    own copy, and reads the second operand of such an op through an
    identity `linalg.generic`, which propagation can reshard on its own.
    `tp-parallelize` runs it before planning; the cleanup after partition
    shares them again and folds the copies.
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def AnnotateInits : Pass<"tp-annotate-inits", "::mlir::func::FuncOp"> {
  let summary = "Give a tensor.empty left unannotated the sharding its "
                "users read it with";
  let description = [{
    Run after `sharding-propagation`. Propagation annotates a
    `tensor.empty`'s result from its user, except where the user's chain
    reaches no annotated value downstream (an elementwise op on replicated
    inputs alone that only feeds a rank-0 result, such as a loss's count of
    the targets it does not ignore): the empty is then read through
    `annotate_for_users` `shard.shard` ops but has no result annotation,
    which partition requires. Where every such read agrees, the result is
    annotated with that sharding.
  }];
}

def CheckPartitionable : Pass<"tp-check-partitionable",
                              "::mlir::func::FuncOp"> {
  let summary = "Check that a function is fully annotated before "
                "shard-partition runs";
  let description = [{
    LLVM 22's `shard-partition` assumes, without checking, that every tensor
    argument is read by exactly one `shard.shard`, that every tensor operand
    comes from an `annotate_for_users` `shard.shard`, and that every tensor
    result has exactly one use, a `shard.shard`; otherwise it crashes. This
    pass checks the same rules and reports the first op that breaks them, so
    that a plan that cannot be partitioned is a diagnostic, not a crash.
    It also rejects a linalg op with a split reduction loop whose body reads
    a value defined outside it: partition rebuilds such an op with a mapping
    of its operands only, so the body would keep reading an erased value
    (`tp-unshare-values` removes the scalar-constant case).
  }];
}

def Explain : Pass<"tp-explain", "::mlir::ModuleOp"> {
  let summary = "Explain a partitioned module: splits, collectives, bytes";
  let description = [{
    Run after `tp-parallelize`. Prints, per block (a column→row group; a
    transformer layer is two: attention and MLP), which weights split how
    and their local shapes, and every collective with the activation it
    moves and the bytes each rank sends: A·(t−1)/t for all-gather and
    reduce-scatter, 2·A·(t−1)/t for all-reduce, 0 for a local all_slice.
    Then the contractions left replicated and why, weight and activation
    bytes per device, and the (tensor, sequence, pipeline) support triple
    (what optimum-neuron's `is_model_supported` returns) for this model.
    `--tp-explain=json` prints one JSON object (per function) instead, and
    `output=FILE` prints to FILE instead of stdout (the Python module's
    `explain` reads it from there). For a training program: per rank the
    gradients, the optimizer states (`optimizer-states` copies of the
    gradients; with `zero=1`, 1/D of them), the gradient buffers and the
    stash; with `data-parallel=D` (D > 1), the grid's
    two axes and the gradients' all-reduce over the data axis (buckets,
    bytes sent per rank per step). The IR is unchanged.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print the explanation as one JSON object">,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to print to ('-': stdout)">,
    Option<"optimizerStates", "optimizer-states", "int64_t",
           /*default=*/"0",
           "Copies of each trainable weight's gradient the optimizer keeps "
           "per rank as its states (tp-compile --train: AdamW's two "
           "moments, SGD's momentum)">,
    Option<"gradientBuffers", "gradient-buffers", "int64_t",
           /*default=*/"0",
           "Whole gradient-sized buffers per rank besides (the accumulated "
           "gradient, the one the data axis reduces)">,
    Option<"dataParallel", "data-parallel", "int64_t", /*default=*/"1",
           "Data-parallel replicas of the grid (tp-compile --data-parallel): "
           "the gradients' all-reduce over the data axis per step">,
    Option<"bucketBytes", "bucket-bytes", "int64_t",
           /*default=*/"26214400",
           "With data-parallel: the largest bucket of that all-reduce">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "With data-parallel: ZeRO stage (1: the gradients "
           "reduce-scattered, the weights all-gathered, the optimizer "
           "states split over the data axis)">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"0",
           "Dynamic loss scaling's first scale (tp-compile --loss-scale; "
           "0: none)">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"2000",
           "With loss-scale: steps without overflow before it doubles">
  ];
}

def OutlineUnpartitionable : Pass<"tp-outline-unpartitionable",
                                  "::mlir::ModuleOp"> {
  let summary = "Hide ops that upstream partition cannot handle behind "
                "replicated calls";
  let description = [{
    Upstream `shard-partition` rejects linalg ops whose indexing maps are
    not projected permutations (convolutions, pooling windows) even when
    nothing about them is split. This pass moves each such op into a
    private function, calls it with every tensor operand and result
    annotated as replicated, and marks the callee `tp.outlined`; partition
    then copies the call as it is, and `inline` after partition puts the op
    back. An op the plan splits on a loop that no window reads
    (`tp.split_loop`: a depthwise convolution's channels) is called with
    that split annotated instead, and given a second callee with one rank's
    shapes (`tp.local_callee`), which partition calls. Run after the plan,
    before `sharding-propagation`.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::func::FuncDialect"];
}

def PlanSequenceParallel : Pass<"tp-plan-sequence-parallel",
                                "::mlir::ModuleOp"> {
  let summary = "Split the activations between tensor-parallel blocks on "
                "the sequence dim";
  let description = [{
    Megatron-LM's sequence parallelism, on top of tp-plan-tensor-parallel:
    the residual stream between blocks (the residual adds after each
    row-parallel block, and the norms that follow) is annotated as split on
    its sequence dim (the second-to-last dim, [batch, seq, hidden]).
    Partition then ends each row-parallel block in an all-reduce followed by
    a local slice, which tp-form-reduce-scatter turns into one
    reduce-scatter, and puts an all-gather before each column-parallel
    contraction. Run after tp-plan-tensor-parallel, before
    sharding-propagation.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def PadVocabulary : Pass<"tp-pad-vocabulary", "::mlir::func::FuncOp"> {
  let summary = "Pad vocabularies that the device count does not divide";
  let description = [{
    As Megatron-LM pads the vocabulary to a multiple of the tensor-parallel
    size: a word-embedding table whose rows, or an LM head whose output dim
    (reaching a function result, through a bias add and casts), `devices`
    does not divide is read through a zero `tensor.pad` to the next
    multiple, so that the plan splits it. Padded rows match no token id;
    padded logits are sliced off before the result. After partition,
    `tp-localize-padded-weights` gives each rank only its share.
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"2",
           "Number of tensor-parallel ranks">,
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def RepeatKVHeads : Pass<"tp-repeat-kv-heads", "::mlir::func::FuncOp"> {
  let summary = "Repeat grouped-query K/V heads that the devices do not "
                "divide, so that each rank holds one";
  let description = [{
    Grouped-query attention with K/V heads that the devices do not divide
    but that divide the devices (2 K/V heads on 4 ranks) would keep the
    K/V projections whole on every rank. As Megatron-LM and vLLM do, each
    K/V head is repeated R = devices / heads times: the K/V projections'
    weights and biases become new arguments holding each head's block R
    times (`#tp.layout<role = replicated, dim = D, repeat = [heads, R]>`;
    the artifact writer gives rank r head r / R), every value from them to
    the broadcast of each K/V head to its query heads (the KV caches
    included) has heads x R heads, and that broadcast repeats R times
    fewer, so the query heads read the same values. The plan then splits
    the K/V heads as it splits the query heads.

    Found by closure from each such broadcast (a copy that adds one dim
    after the K/V heads, merged with them by a collapse into the query
    heads); a block is rewritten only if the closure holds everywhere (no
    sum over the K/V heads, no read of their index, no K/V value returned)
    and the query heads per K/V head divide by R. tp-compile runs it before
    planning, except with --gradients (a repeated weight's copies would get
    different gradients).
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"2",
           "Tensor-parallel ranks">
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def PadAttentionHeads : Pass<"tp-pad-attention-heads", "::mlir::func::FuncOp"> {
  let summary = "Pad attention heads that the device count does not divide";
  let description = [{
    A reshape that splits a dim into (heads, head_dim, ...) with a head
    count that `devices` does not divide starts a closure: every value of
    the block with that heads dim grows it to the next multiple of the
    devices, through the ops that index it (elementwise ops, transposes,
    batched matmuls, reshapes). Operands that cannot grow with it (the Q/K/V
    projection weights and biases, constants, K/V heads repeated for
    grouped-query attention) are read through a zero `tensor.pad`; the
    output projection's weight gets zero rows. Padded heads are finite and
    meet the rest of the program only through those zero rows, or as terms
    of a sum over the heads (a norm's statistics over all heads' features),
    which are zero there or are masked to zero (`index < real size`), so
    the result is unchanged. A block whose closure fails (another reduction
    over the heads, a head index read in a body, a heads dim reaching a
    function result, a pad of a weight whose layout repeats it) is left as
    it was.
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"2",
           "Number of tensor-parallel ranks">,
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def LocalizePaddedWeights : Pass<"tp-localize-padded-weights",
                                 "::mlir::func::FuncOp"> {
  let summary = "Each rank's argument is its share of a padded weight";
  let description = [{
    After partition a weight padded by `tp-pad-vocabulary` is read whole,
    padded and sliced per rank (`tensor.pad` then `shard.all_slice`). This
    pass makes the argument the rank's slice of the padded weight and
    records the padding in its `#tp.layout` (`padded = [V, P]`, with the
    role, dim and block the plan wrote on the `tensor.pad`; a piece of a
    fused weight keeps its `slice`, V being its size): the artifact writer
    stores each rank's rows with the padding as zeros, and
    `tp-export-weights` drops it again. A pad that no plan rule split (one
    sharding propagation split) gets the role `propagated`.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def UnflattenBatchDims : Pass<"tp-unflatten-batch-dims", "::mlir::func::FuncOp"> {
  let summary = "Undo exports' flattening of leading dims around batched ops";
  let description = [{
    GPT-NeoX and BLOOM run attention on `[batch * heads, seq, dim]`
    (`baddbmm`), GPT-2's Conv1D multiplies a `[batch * seq, hidden]` view. A
    split of the heads cannot pass such a merge, so attention would stay
    replicated. Every linalg op that reads a collapse of leading dims, or
    whose result is expanded into leading dims, is rewritten on the
    unflattened shape (named ops are generalized first), until collapse and
    expand meet and fold away.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MergeAllReduces : Pass<"tp-merge-all-reduces", "::mlir::func::FuncOp"> {
  let summary = "One all-reduce for the sum of two row-parallel results";
  let description = [{
    In a parallel-residual block (GPT-NeoX, GPT-J, Falcon, Phi) attention
    and MLP read the same input and their outputs are added. After
    partition each ends in a `shard.all_reduce`; their sum is the all-reduce
    of the sum of the two partial results, so each rank adds them first and
    one all-reduce remains: 1 per layer instead of 2. The sum is read
    through any association and order of elementwise adds whose inner adds
    have no other use (`x + (attn + mlp)`, `(x + attn) + mlp`): the summed
    reduces over the same grid axes become one, and the other terms (the
    residual, a row-parallel layer's bias, which must count once) are added
    after it. Run after partition and `tp-form-reduce-scatter`: the same
    holds of reduce-scatters.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
}

def SplitOutputs : Pass<"tp-split-outputs", "::mlir::func::FuncOp"> {
  let summary = "Return each rank's block of a gathered model output";
  let description = [{
    After partition, a model output split across the ranks (an LM head's
    logits, split by vocabulary) is all-gathered just before the return,
    and a padded vocabulary's padding sliced off. For the outputs named in
    `names` this pass removes both: the function returns the rank's block,
    tagged `tp.split_output = #tp.split_output<dim = D, size = N>` (the
    gathered dim and the output's size there). The runtime puts the blocks
    together for a caller that asks for the whole output; generation reads
    them in place, picking the next token from each rank's (max, index)
    or top-k, so that a decode step needs no gather of the logits.
    `names=*` takes every output. Outputs not gathered by a
    `shard.all_gather` stay as they are. Run
    after partition (and after tp-plan-pipeline: on every stage function).
  }];
  let options = [
    ListOption<"names", "names", "std::string",
               "Model outputs (tp.output names) to return as blocks; * for "
               "all">,
    Option<"dimZero", "dim-zero", "bool", /*default=*/"false",
           "Also outputs gathered on dim 0, which is then no batch that "
           "micro-batches cut (a weight's gradient split by rows)">
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def FormReduceScatter : Pass<"tp-form-reduce-scatter", "::mlir::func::FuncOp"> {
  let summary = "Turn an all-reduce followed by a slice into a "
                "reduce-scatter";
  let description = [{
    After partition, a row-parallel block whose result is split on the
    sequence dim reads `shard.all_reduce` then `shard.all_slice` on the same
    grid axes; each rank keeps only its slice of what it reduced. One
    `shard.reduce_scatter` on the sliced dim moves half the bytes.
  }];
}

def DecomposeAllToAll : Pass<"tp-decompose-all-to-all",
                             "::mlir::func::FuncOp"> {
  let summary = "Write shard.all_to_all as an all-gather and a local slice";
  let description = [{
    Partition reshards a value split on one dim to the same value split on
    another with `shard.all_to_all`, which neither runtime runs. This pass
    writes it as what it computes: `shard.all_gather` along its concat axis,
    then `shard.all_slice` along its split axis (each rank keeps its piece).
  }];
}

def PlanPipeline : Pass<"tp-plan-pipeline", "::mlir::ModuleOp"> {
  let summary = "Cut @main into pipeline stages at layer boundaries, "
                "balanced by FLOPs";
  let description = [{
    Finds the places in @main where exactly one activation is live (the
    residual stream between layers, found by liveness, not names), and cuts
    @main there into `stages` functions `@main_stage<k>` whose FLOPs are as
    even as layer granularity allows. Stage k receives its input from stage
    k-1 (`shard.recv`) and sends its output to stage k+1 (`shard.send`) on a
    1-D grid `@pipeline`; weights and model inputs become arguments of the
    stage that reads them. Run after `tp-parallelize` for PP×TP: the stages
    keep their tensor-parallel collectives on `@grid`, so the devices form a
    stages × tp grid. The module records `tp.pipeline` (stages,
    micro-batches, the 1F1B schedule and each stage's FLOPs) for the
    runtime; each micro-batch runs the stage functions at the shapes they
    were imported with.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"2",
           "Number of pipeline stages">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Micro-batches per step (recorded for the 1F1B schedule)">,
    ListOption<"boundaries", "boundaries", "int64_t",
               "Cut at these of the candidate boundaries (0-based, in "
               "program order) instead of balancing FLOPs: a prefill chunk "
               "cut where its decode step was (tp.pipeline's boundaries)">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
}

def SplitFusedWeights : Pass<"tp-split-fused-weights", "::mlir::func::FuncOp"> {
  let summary = "Give each piece of a fused weight its own argument";
  let description = [{
    After `tp-split-fused-projections` a fused weight (QKV in one matrix,
    and its bias) is read only through static `tensor.extract_slice`s, one
    per projection. When every use of a `tp.weight` argument is such a
    slice, all of them cut the same one dim, and their ranges tile it, each
    range becomes an argument of its own: the same `tp.weight` name, the
    slice's type, and `tp.layout = #tp.layout<role = replicated, dim = D,
    slice = [offset, size]>` saying which rows of the initializer it holds.
    The slices are gone, so the plan sees plain weights (each piece splits
    column-parallel like any projection), no rank holds another piece's
    bytes, and generated code copies no weight slice per forward pass.
    `tp-parallelize` runs it right after `tp-split-fused-projections`;
    `tp-localize-fused-weights` is an alias (it used to run after
    partition).
  }];
}

def ConvertDType : Pass<"tp-convert-dtype", "::mlir::ModuleOp"> {
  let summary = "Hold f32 weights and activations in bf16 or f16, "
                "computing and accumulating in f32";
  let description = [{
    Mixed precision as inference engines run it (`tp-compile --dtype`):
    - every f32 `tp.weight` argument becomes `dtype` (the artifact writer
      converts the initializer's values, rounding to nearest even, while it
      streams them into the rank files);
    - the result of every elementwise `linalg.generic` is stored in `dtype`,
      and each contraction's f32 result is rounded to `dtype` once, after
      the whole sum: activations, and the collectives that carry them, move
      half the bytes;
    - a value is rounded to nearest even when it is stored; a finite value
      past `dtype`'s range saturates to its largest finite value instead
      of becoming an infinity (an export's f32 attention mask, -3.4e38,
      must stay finite), while infinities and NaN stay as they are; the
      backward of a training step (ops marked `tp.backward`) does not
      saturate: a gradient past the range becomes an infinity, which
      dynamic loss scaling sees and answers by skipping the step;
    - arithmetic stays in f32: a `linalg.generic` extends each `dtype`
      operand when it reads it (`arith.extf` in its body), so a product
      accumulates in f32 and so do the statistics of norms and softmax
      (reductions keep their f32 accumulator and result).
    - every f32 `tp.cache` argument (a KV cache: a buffer of the runtime's
      that no binding of the user's sees) becomes `dtype` too, and each
      `tp.cache_update` writes the step's keys or values rounded: half the
      memory and half the bytes an attention reads per step.
    Otherwise the function boundary does not change: model inputs, outputs
    and the tensors that pass between pipeline stages stay f32 (converted
    where they meet the program), so inputs, references and the user's
    bindings are the same as without the pass. Any other op that reads a
    `dtype` value it cannot take gets it extended back to f32. `dtype=f32`
    leaves the module unchanged. Run after `tp-parallelize`.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"",
           "Storage type of f32 weights and activations: bf16, f16 or f32">,
    Option<"masterWeights", "master-weights", "bool", /*default=*/"false",
           "Keep f32 weight arguments (the optimizer's master copy) and "
           "round each to the narrow type where the function starts "
           "(tp-compile --train --dtype bf16)">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::tensor::TensorDialect"];
}

def SplitConvolutions : Pass<"tp-split-convolutions", "::mlir::func::FuncOp"> {
  let summary = "Split convolutions on their output channels";
  let description = [{
    Upstream partition cannot split a convolution (its indexing maps are not
    projected permutations), so tp-parallelize runs convolutions replicated
    through partition, and this pass, after it, gives each rank of `@grid`
    its slice of the filters: a convolution whose filter tensor is a weight
    argument (possibly through `tensor.expand_shape`) and whose output-
    channel count divides by the grid size computes only this rank's
    channels, and one `shard.all_gather` on the channel dim rebuilds the
    full output. The weight argument's type becomes the local slice, tagged
    `#tp.layout<role = conv_output, ...>`, so the artifact stores one slice
    per rank.
    The gather then moves down past what works on each channel alone
    (reshapes keeping the channel dim, bias and normalisation with their
    per-channel weights sliced the same way, activations, pooling, padding
    of other dims), so those run on this rank's channels and the gather
    carries the smaller, pooled activation.
    A convolution whose channels do not divide stays replicated, with a
    warning that names it.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
}

def OffsetSplitIndices : Pass<"tp-offset-split-indices",
                              "::mlir::func::FuncOp"> {
  let summary = "Make linalg.index global in loops that partition split";
  let description = [{
    Upstream partition splits a loop but keeps `linalg.index` local to the
    shard, so a body that computes with its position (a CumSum over the
    sequence, a causal mask, an indexed read) would compute as if every rank
    held the first shard. tp-plan-tensor-parallel records the loop sizes of
    such ops as `tp.loop_sizes`; after partition this pass adds
    `rank * local size` to the index of each loop whose size shrank, and
    removes the record. Run after `shard-partition`.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::arith::ArithDialect"];
}

def OffsetVocabLookups : Pass<"tp-offset-vocab-lookups",
                              "::mlir::func::FuncOp"> {
  let summary = "Give each rank's embedding lookup its vocabulary offset";
  let description = [{
    An embedding lookup (`tp.embedding`) compares each id with the
    vocabulary index of its reduction loop. After partition, a rank holding
    rows [r·V/t, (r+1)·V/t) of the table iterates from 0, so this pass adds
    r·V/t to that index. Ids outside the rank's rows then match nothing and
    contribute zero, and the all-reduce that partition put after the lookup
    sums the one row that matched: Megatron's vocabulary-parallel
    embedding. Run after `shard-partition`.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::arith::ArithDialect"];
}

def KVCache : Pass<"tp-kv-cache", "::mlir::ModuleOp"> {
  let summary = "Turn an export's past/present key-value pairs into "
                "persistent caches written in place";
  let description = [{
    A decoder exported with its KV cache (`torch.onnx.export` with
    `use_cache=True`, optimum's `text-generation-with-past` layout) takes
    the keys and values of the tokens before as inputs
    (`past_key_values.{i}.key`), concatenates each with the step's own, and
    returns the concatenation (`present.{i}.key`) for the caller to feed
    back. Run that way, every step copies the whole cache twice.

    This pass finds each such pair by structure — an input whose only use is
    the first operand of a two-operand `tensor.concat` that `@main` returns
    — and rewrites it:
    - the input becomes a `tp.cache` argument holding all `max-seq`
      positions, which the runtime allocates once per rank and keeps
      between calls;
    - the concat becomes `tp.cache_update` of the step's entries at
      `cache_position`, a new scalar i64 input;
    - the returned concatenation is dropped from the results.

    The model must be imported with `max-seq - L` past positions for a
    step of L tokens (a decode step: L = 1), so that the attention that
    reads the concatenation reads the whole cache, its unfilled positions
    masked by `attention_mask`; or with 0 past positions (a prefill), so
    that attention reads the step's own entries and the cache update only
    writes. Any other past length, or no pair at all, is an error.
    Partition then splits each cache as its keys or values split (by heads).

    In the export the step's tokens are the last positions of the
    `[batch, past + L]` attention mask; in a decode step they sit at
    `cache_position`. So a value computed from such a mask and sliced at
    `[past, past + L)` on its sequence dim (OPT's positions, a CumSum over
    the mask read at the new token) is read at `cache_position` instead.
  }];
  let options = [
    Option<"maxSeq", "max-seq", "int64_t", /*default=*/"0",
           "Positions each cache holds (the longest context)">
  ];
  let dependentDialects = ["::mlir::tp::TPDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect"];
}

def SelectLogits : Pass<"tp-select-logits", "::mlir::ModuleOp"> {
  let summary = "Compute a prefill chunk's logits at one position only";
  let description = [{
    A prefill chunk of C tokens computes its logits at all C positions;
    generation reads the last prompt token's alone. This pass adds the
    scalar i64 input `logits_position` to `@main` and returns output
    `output` at that position only: dim `dim` becomes 1.

    The selection is a generic summing `select(p == position, x, 0)` over
    the positions p, which both emitters read as a lookup (one row). It
    moves up through every producer that computes each position from the
    same position of its inputs alone: a `linalg.generic` whose loop over
    that dim is parallel, read by each input as a plain dim and not through
    `linalg.index`, and whose result nothing else reads. Each input that
    reads the position gets its own selection, which moves on the same way.
    So the LM head, and the final norm's scale when the norm's input is
    read only there, run on one position instead of C.

    `tp-compile` runs it on every prefill chunk; the runtime passes the
    position of the prompt's last token in the chunk. An output that is not
    there, not float or already 1 long on `dim` is left as it is.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"logits\"",
           "The output to select from">,
    Option<"dim", "dim", "int64_t", /*default=*/"1",
           "Its position dim">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def PlanTensorParallel : Pass<"tp-plan-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Choose tensor-parallel weight splits and write them as "
                "shard annotations";
  let description = [{
    Adds `shard.grid @grid(shape = devices)` and annotates weights of
    `@main` with `shard.shard ... annotate_for_users`, the input of upstream
    `sharding-propagation`.

    `strategy=auto` finds Megatron-style column→row pairs by graph
    structure, never by names: a contraction with a weight whose output dim
    flows, through elementwise ops, reshapes, transposes, attention
    (activation×activation contractions on other dims) and reductions over
    other dims, into the contracting dim of another weight contraction. The
    first is column-parallel (weight split on its output dim, along with the
    biases added on the way), the second row-parallel (split on its
    contracting dim; partition ends it with one all-reduce). A column
    contraction whose result reaches a function result instead (an LM head)
    is split on its output dim and gathered there. Everything else is
    replicated; each replicated contraction records why in a `tp.replicated`
    attribute, which `tp-explain` prints. Each split weight argument gets a
    `tp.layout` (`#tp.layout<role = column, dim = 1, block = 0>`; a piece of
    a fused weight keeps its `slice`).

    `strategy=config` reads `config=FILE`, a JSON object with a `rules`
    array; each rule has a `pattern` (regex on weight names) and a `split`
    (a dim, or "replicate"). Rules override the automatic plan. A rule that matches no weight, or a split that does not divide the
    dim by the device count, is an error naming the rule.
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"2",
           "Number of devices (ranks) on the tensor-parallel grid axis">,
    Option<"strategy", "strategy", "std::string", /*default=*/"\"auto\"",
           "auto: find splits from the graph; config: also apply rules from "
           "config=FILE">,
    Option<"config", "config", "std::string", /*default=*/"\"\"",
           "JSON file of rules (regex on weight names -> split dim or "
           "replicate)">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

#endif // TP_TRANSFORMS_PASSES_TD
