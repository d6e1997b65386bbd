//===- TPAttrs.td - attributes of the tp dialect -----------*- tablegen -*-===//
//
// The typed attributes of the tp dialect: how a weight argument is laid out
// across ranks (`#tp.layout`) and the split roles it names.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_TPATTRS_TD
#define TP_DIALECT_TP_TPATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "tp/Dialect/TP/TPDialect.td"

def TP_SplitRole : I32EnumAttr<"SplitRole", "why a weight is split", [
  /// Whole on every rank (a fused piece the plan left whole).
  I32EnumAttrCase<"Replicated", 0, "replicated">,
  /// Output dim of a column-parallel contraction.
  I32EnumAttrCase<"Column", 1, "column">,
  /// Contracting dim of a row-parallel contraction (ends in an all-reduce).
  I32EnumAttrCase<"Row", 2, "row">,
  /// Output dim of a contraction whose result is gathered at a function
  /// result (an LM head).
  I32EnumAttrCase<"ColumnGathered", 3, "column_gathered">,
  /// A bias or scale applied elementwise to a column-parallel result.
  I32EnumAttrCase<"Bias", 4, "bias">,
  /// Split as a config rule says.
  I32EnumAttrCase<"Config", 5, "config">,
  /// Vocabulary dim of an embedding table (the lookup ends in an
  /// all-reduce).
  I32EnumAttrCase<"Vocab", 6, "vocab">,
  /// Output channels of a convolution (tp-split-convolutions).
  I32EnumAttrCase<"ConvOutput", 7, "conv_output">,
  /// Split where sharding propagation put it: a padded weight that no plan
  /// rule split (tp-localize-padded-weights).
  I32EnumAttrCase<"Propagated", 8, "propagated">,
]> {
  let cppNamespace = "::mlir::tp";
  let genSpecializedAttr = 0;
}

def TP_SplitRoleAttr : EnumAttr<TP_Dialect, TP_SplitRole, "role">;

def TP_GridRole : I32EnumAttr<"GridRole", "what a shard.grid is for", [
  /// The tensor-parallel ranks of one pipeline stage (tp-plan-tensor-parallel).
  I32EnumAttrCase<"Tensor", 0, "tensor">,
  /// The pipeline stages (tp-plan-pipeline).
  I32EnumAttrCase<"Pipeline", 1, "pipeline">,
]> {
  let cppNamespace = "::mlir::tp";
  let genSpecializedAttr = 0;
}

def TP_GridRoleAttr : EnumAttr<TP_Dialect, TP_GridRole, "grid_role"> {
  let summary = "What a `shard.grid` is for (the planners write it)";
  let description = [{
    Written as `tp.grid_role` on a `shard.grid` of a planned module:

    ```mlir
    shard.grid @pipeline(shape = 2) {tp.grid_role = #tp.grid_role<pipeline>}
    ```

    Passes, the emitters and the artifact writer find the tensor-parallel
    and the pipeline grid by it (`tp::lookupGrid`), never by symbol name. A
    grid without it is a tensor-parallel grid (hand-written IR).
  }];
  let assemblyFormat = "`<` $value `>`";
}

def TP_Kernel : I32EnumAttr<"Kernel", "how code generation runs an op", [
  /// A loop nest over the op's iteration domain (a kernel launch on CUDA).
  I32EnumAttrCase<"LoopNest", 0, "loop_nest">,
  /// A (batched) GEMM: BLAS or the packed kernel on CPUs, cuBLAS on CUDA.
  I32EnumAttrCase<"Gemm", 1, "gemm">,
  /// A one-hot sum read as one guarded iteration (an embedding lookup).
  I32EnumAttrCase<"Lookup", 2, "lookup">,
  /// Its transpose, out[key] += x (an embedding's gradient; C++ only).
  I32EnumAttrCase<"ScatterAdd", 3, "scatter_add">,
  /// The P V product that ends a fused attention chain, which runs there.
  I32EnumAttrCase<"Attention", 4, "attention">,
  /// An op of a fused attention chain, computed inside it, never stored.
  I32EnumAttrCase<"InAttention", 5, "in_attention">,
]> {
  let cppNamespace = "::mlir::tp";
  let genSpecializedAttr = 0;
}

def TP_KernelAttr : EnumAttr<TP_Dialect, TP_Kernel, "kernel"> {
  let summary = "How code generation runs an op (tp-select-kernels)";
  let assemblyFormat = "`<` $value `>`";
}

def TP_LayoutAttr : AttrDef<TP_Dialect, "Layout"> {
  let mnemonic = "layout";
  let summary = "How a weight argument holds its ONNX initializer";
  let description = [{
    Written as `tp.layout` on a `tp.weight` argument of a function (and, before
    partition, on a `tensor.pad` or `tensor.extract_slice` of one that the
    plan splits):

    ```mlir
    #tp.layout<role = column, dim = 1, block = 0>
    #tp.layout<role = column, dim = 1, block = 0, slice = [64, 64]>
    #tp.layout<role = vocab, dim = 0, block = 0, padded = [50257, 50258]>
    ```

    - `role`: why the weight is split (`replicated`: it is not).
    - `dim`: the dim it is split on, and the dim `slice` and `padded` refer
      to.
    - `block`: the column→row group of the plan (one collective ends each
      block); -1 (not printed): none.
    - `slice = [offset, size]`: the argument holds rows [offset, offset +
      size) of `dim` of the initializer (a piece of a fused weight,
      tp-split-fused-weights); absent: all of them.
    - `padded = [V, P]`: the V rows of `dim` that the argument's range holds
      are padded with zeros to P before the split (tp-localize-padded-weights),
      so each rank holds P / ranks rows.
    - `repeat = [H, R]`: the argument's range on `dim` is H blocks (heads),
      each repeated R times in place before the split, so that the argument
      is R times as long there (grouped-query K/V heads that the ranks do
      not divide, each held by R ranks: tp-repeat-kv-heads).

    An argument without `tp.layout` is whole on every rank.
  }];
  let parameters = (ins
    EnumParameter<TP_SplitRole>:$role,
    "int64_t":$dim,
    "int64_t":$block,
    OptionalArrayRefParameter<"int64_t">:$slice,
    OptionalArrayRefParameter<"int64_t">:$padded,
    OptionalArrayRefParameter<"int64_t">:$repeat
  );
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "SplitRole":$role, "int64_t":$dim,
                     CArg<"int64_t", "-1">:$block,
                     CArg<"::llvm::ArrayRef<int64_t>", "{}">:$slice,
                     CArg<"::llvm::ArrayRef<int64_t>", "{}">:$padded,
                     CArg<"::llvm::ArrayRef<int64_t>", "{}">:$repeat), [{
      return $_get($_ctxt, role, dim, block, slice, padded, repeat);
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True unless every rank holds the whole range.
    bool isSplit() const { return getRole() != SplitRole::Replicated; }
    /// A piece of its initializer: `slice` is present.
    bool isPiece() const { return !getSlice().empty(); }
    int64_t getSliceOffset() const { return getSlice()[0]; }
    int64_t getSliceSize() const { return getSlice()[1]; }
    bool isPadded() const { return !getPadded().empty(); }
    /// V of `padded = [V, P]`: the rows the argument's range holds.
    int64_t getUnpaddedSize() const { return getPadded()[0]; }
    /// P of `padded = [V, P]`: the rows after padding, before the split.
    int64_t getPaddedSize() const { return getPadded()[1]; }

    bool isRepeated() const { return !getRepeat().empty(); }
    /// H of `repeat = [H, R]`: the blocks of the range.
    int64_t getRepeatBlocks() const { return getRepeat()[0]; }
    /// R of `repeat = [H, R]`: how many times each block is repeated.
    int64_t getRepeatTimes() const { return getRepeat()[1]; }

    /// This layout with another role, dim and block; slice, padding and
    /// repeat stay.
    LayoutAttr withSplit(SplitRole role, int64_t dim, int64_t block) const;
    /// This layout with `padded = [unpadded, padded]`.
    LayoutAttr withPadding(int64_t unpadded, int64_t padded) const;
  }];
}

def TP_SplitOutputAttr : AttrDef<TP_Dialect, "SplitOutput"> {
  let mnemonic = "split_output";
  let summary = "A model output that each rank returns its block of";
  let description = [{
    Written as `tp.split_output` on a `tp.output` result of a function
    (tp-split-outputs):

    ```mlir
    #tp.split_output<dim = 2, size = 1001>
    ```

    The result is this rank's block of `dim`: rank t of the stage holds
    entries [t * B, (t + 1) * B) of the whole output, B being the result's
    size on `dim`, and the whole output has `size` entries there (the
    blocks may run past it into padding, a padded vocabulary's logits,
    which belong to no entry). The runtime puts the blocks together, or
    reads them where they are (generation picks the next token from each
    rank's block).
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$size);
  let assemblyFormat = "`<` `dim` `=` $dim `,` `size` `=` $size `>`";
}

def TP_TiedWeightAttr : AttrDef<TP_Dialect, "TiedWeight"> {
  let mnemonic = "tied_weight";
  let summary = "An initializer imported as another one's value";
  let description = [{
    Listed in `tp.tied_weights` on the module (the ONNX importer's
    `tie-weights`, which tp-compile --train sets):

    ```mlir
    #tp.tied_weight<copy = "onnx::MatMul_568", source = "wte.weight",
                    transposed = true>
    ```

    The initializer `copy` holds the same values as `source` (transposed
    when `transposed`): the exporter's second copy of a tied parameter (a
    GPT-2 LM head folded into the embedding's transpose). It is imported
    as `source`'s argument (through a transpose), not as a weight of its
    own, so that training updates one weight with the sum of both uses'
    gradients, as torch does; tp-export-weights writes `copy` from
    `source` again.
  }];
  let parameters = (ins "StringAttr":$copy, "StringAttr":$source,
                        "bool":$transposed);
  let assemblyFormat = [{
    `<` `copy` `=` $copy `,` `source` `=` $source `,` `transposed` `=`
    $transposed `>`
  }];
}

#endif // TP_DIALECT_TP_TPATTRS_TD
