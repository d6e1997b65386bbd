//===- Passes.td - tp-mlir conversion passes ---------------*- tablegen -*-===//
//
// Conversions out of the partitioned (SPMD) form. Every flag starts with
// `tp-`.
//
//===----------------------------------------------------------------------===//

#ifndef TP_CONVERSION_PASSES_TD
#define TP_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerCollectives : Pass<"tp-lower-collectives", "::mlir::ModuleOp"> {
  let summary = "Rewrite shard collectives that upstream convert-shard-to-mpi "
                "cannot lower into all_reduce and local slices";
  let description = [{
    LLVM 22's `convert-shard-to-mpi` lowers `shard.all_reduce` and
    `shard.process_multi_index` but fails on the other collectives that
    `tp-parallelize` emits. This pass rewrites them in terms of those two
    and of tensor slicing, so that a partitioned module can be run on CPU
    processes with MPI and checked against a reference:

    - `shard.all_gather`: a zero tensor of the gathered shape with this
      rank's shard inserted at `rank * local` along `gather_axis`, then a
      sum `shard.all_reduce`. Exact (each element has one non-zero
      contribution) but it moves `group size` times the bytes of a real
      all-gather.
    - `shard.reduce_scatter`: `shard.all_reduce` with the same reduction,
      then this rank's slice. Moves the whole tensor to every rank.
    - `shard.all_slice`: this rank's slice; no communication.

    `rank` is the process's linear index within the collective's group of
    grid axes. The rewrite is for CPU testing only, until the runtime's
    NCCL/MPI collectives exist; it is not bandwidth-optimal.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
}

#endif // TP_CONVERSION_PASSES_TD
