//===- Passes.td - passes that prepare a module for emission -*- tablegen -*-===//
//
// The passes both emitters run on a partitioned module before printing it,
// each visible on its own in tp-opt.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_EMIT_PASSES
#define TP_TARGET_EMIT_PASSES

include "mlir/Pass/PassBase.td"

def FuseElementwise : Pass<"tp-fuse-elementwise", "::mlir::ModuleOp"> {
  let summary = "Fuse each all-parallel generic into its one consumer, "
                "within the emitters' bounds";
  let description = [{
    Every generic that is not a GEMM becomes a loop nest (a kernel launch
    on a GPU) and a round trip of its result through memory. This pass runs
    upstream's elementwise fusion, limited to what keeps the emitters'
    special cases and their output compilable:
    - the producer has no other user, so nothing is computed twice;
    - the consumer is neither a GEMM (BLAS would lose it) nor a one-hot
      lookup or scatter-add (its pattern would no longer match);
    - a fused nest has at most 8 inputs and 64 payload ops, so that a long
      chain becomes several moderate loops.
    Fusion keeps every scalar op and its order: results are bit-identical.
    Nothing is folded.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def PrepareForEmission : Pass<"tp-prepare-for-emission", "::mlir::ModuleOp"> {
  let summary = "Generalize named linalg ops and fuse elementwise chains, "
                "as both emitters need";
  let description = [{
    What `tp-translate --emit-cpp/--emit-cuda` and the artifact's library
    build run on the partitioned module before printing it: every named
    linalg op but `linalg.fill` becomes the `linalg.generic` it computes
    (the emitters match generics only), then `tp-fuse-elementwise`. A named
    op that cannot be generalized is an error at it. Then
    `tp-select-kernels{target=...}`.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "The emitter: cpu or cuda">
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tp::TPDialect"];
}

def SelectKernels : Pass<"tp-select-kernels", "::mlir::ModuleOp"> {
  let summary = "Record how code generation runs each linalg op (#tp.kernel)";
  let description = [{
    Writes `tp.kernel` on every `linalg.generic` (and on the reshapes a
    fused attention chain folds in), which both emitters then only follow:
    - `attention` on the P V product that ends a chain S = Q Kᵀ, X = f(S),
      softmax, O = P V that no reader outside needs (MatchAttention.cpp),
      and `in_attention` on the chain's other ops: the key transpose and
      the repeat of K/V heads it reads through, the softmax steps and the
      reshapes between them (`TP_FUSED_ATTENTION=0` in the environment
      turns fusion off);
    - `gemm` on a contraction whose operands are row-major matrices up to a
      transpose;
    - `lookup` on a one-hot sum (an embedding lookup), and with
      `target=cpu` `scatter_add` on its transpose (an embedding's
      gradient), which the CUDA target runs as a loop nest;
    - `loop_nest` on the rest.
    Runs last in `tp-prepare-for-emission`. Row groups and GEMM epilogues
    are still chosen by the C++ emitter as it prints.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "The emitter: cpu or cuda">
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

#endif // TP_TARGET_EMIT_PASSES
