// Diagnostics of tp-plan-tensor-parallel: bad options, and a module that
// was planned already. Each case runs with its own options, so each is its
// own file.
//
// RUN: rm -rf %t && split-file %s %t
// RUN: tp-opt %t/negative_devices.mlir --tp-plan-tensor-parallel=devices=0 -verify-diagnostics
// RUN: tp-opt %t/negative_strategy.mlir --tp-plan-tensor-parallel=strategy=bogus -verify-diagnostics
// RUN: tp-opt %t/negative_grid_exists.mlir --tp-plan-tensor-parallel -verify-diagnostics
// RUN: tp-opt %t/negative_heads_not_divisible.mlir --tp-plan-tensor-parallel=devices=2 -verify-diagnostics
// RUN: tp-opt %t/negative_piece_dim.mlir --tp-plan-tensor-parallel=devices=2 -verify-diagnostics

//--- negative_devices.mlir
// expected-error @below {{tp-plan-tensor-parallel: devices must be >= 1, got 0}}
module {
  func.func @f(%arg0: tensor<4x8xf32> {tp.weight = "w"}) -> tensor<4x8xf32> {
    return %arg0 : tensor<4x8xf32>
  }
}

//--- negative_strategy.mlir
// expected-error @below {{tp-plan-tensor-parallel: unknown strategy 'bogus' (expected auto or config)}}
module {
  func.func @f(%arg0: tensor<4x8xf32> {tp.weight = "w"}) -> tensor<4x8xf32> {
    return %arg0 : tensor<4x8xf32>
  }
}

//--- negative_grid_exists.mlir
// expected-error @below {{tp-plan-tensor-parallel: the module already has a symbol '@grid'; was it planned already?}}
module {
  shard.grid @grid(shape = 2)
  func.func @f(%arg0: tensor<4x8xf32> {tp.weight = "w"}) -> tensor<4x8xf32> {
    return %arg0 : tensor<4x8xf32>
  }
}

//--- negative_heads_not_divisible.mlir
// 3 heads over 2 devices: the projection is replicated, with a warning.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @negative_heads_not_divisible(%arg0: tensor<2x16x48xf32> {tp.input = "x"}, %arg1: tensor<48x48xf32> {tp.weight = "wq"}) -> tensor<2x16x3x16xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x48xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x48xf32>) -> tensor<2x16x48xf32>
  // expected-warning @below {{tp-plan-tensor-parallel: replicated, its output dim cannot stay split: 'tensor.expand_shape' splits dim 2 into}}
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x48xf32>, tensor<48x48xf32>) outs(%1 : tensor<2x16x48xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x48xf32>
  %3 = tensor.expand_shape %2 [[0], [1], [2, 3]] output_shape [2, 16, 3, 16] : tensor<2x16x48xf32> into tensor<2x16x3x16xf32>
  return %3 : tensor<2x16x3x16xf32>
}

//--- negative_piece_dim.mlir
// The row-parallel weight is a piece of its initializer cut on dim 1 (its
// layout has one dim), so it cannot split on its contracting dim 0.
#map = affine_map<(d0, d1, d2) -> (d0, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  func.func @main(%x: tensor<8x16xf32> {tp.input = "x"},
                  %w1: tensor<16x64xf32> {tp.weight = "fc1"},
                  // expected-error @below {{tp-plan-tensor-parallel: weight 'fc2' is a piece cut on dim 1 and cannot split on dim 0}}
                  %w2: tensor<64x16xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [0, 16]>, tp.weight = "fc2"})
      -> (tensor<8x16xf32> {tp.output = "y"}) {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<8x64xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<8x64xf32>) -> tensor<8x64xf32>
    %2 = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x64xf32>) outs(%1 : tensor<8x64xf32>) -> tensor<8x64xf32>
    %3 = tensor.empty() : tensor<8x16xf32>
    %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %5 = linalg.matmul ins(%2, %w2 : tensor<8x64xf32>, tensor<64x16xf32>) outs(%4 : tensor<8x16xf32>) -> tensor<8x16xf32>
    return %5 : tensor<8x16xf32>
  }
}
