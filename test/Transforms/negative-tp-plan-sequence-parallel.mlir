// tp-plan-sequence-parallel on a module that tp-plan-tensor-parallel has
// not planned: there is no grid to split the sequence on.
//
// RUN: tp-opt %s --tp-plan-sequence-parallel -verify-diagnostics

// expected-error @below {{tp-plan-sequence-parallel: no shard.grid; run tp-plan-tensor-parallel first}}
module {
  func.func @negative_no_grid(%arg0: tensor<2x16x64xf32> {tp.input = "x"}) -> tensor<2x16x64xf32> {
    return %arg0 : tensor<2x16x64xf32>
  }
}
