// RUN: tp-opt %s -split-input-file --tp-parallelize="devices=2 split-outputs=logits" | FileCheck %s

// Shapes of encoder-decoder exports (T5, BART, Whisper) that decoder-only
// models do not have, each cut down to the ops that matter.

// An LM head plus a bias kept as [1, vocab] and read through a reshape
// (BART's final_logits_bias): the bias splits with the head and is read
// split, so the logits stay split; nothing is gathered.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @head_bias_through_reshape(
// CHECK-SAME: tensor<64x64xf32> {tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 0>, tp.weight = "w"}
// CHECK-SAME: tensor<1x64xf32> {tp.layout = #tp.layout<role = bias, dim = 1, block = 0>, tp.weight = "b"}
// CHECK-SAME: -> (tensor<2x8x64xf32> {tp.output = "logits", tp.split_output = #tp.split_output<dim = 2, size = 128>})
// CHECK-NOT: shard.all_gather
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1]] : tensor<1x64xf32> into tensor<64xf32>
// CHECK-NOT: shard.all_gather
// CHECK: return %{{.*}} : tensor<2x8x64xf32>
func.func @head_bias_through_reshape(%x: tensor<2x8x64xf32> {tp.input = "x"}, %w: tensor<64x128xf32> {tp.weight = "w"}, %b: tensor<1x128xf32> {tp.weight = "b"}) -> (tensor<2x8x128xf32> {tp.output = "logits"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x8x128xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x8x128xf32>) -> tensor<2x8x128xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<2x8x64xf32>, tensor<64x128xf32>) outs(%1 : tensor<2x8x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x8x128xf32>
  %c = tensor.collapse_shape %b [[0, 1]] : tensor<1x128xf32> into tensor<128xf32>
  %3 = tensor.empty() : tensor<2x8x128xf32>
  %4 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2, %c : tensor<2x8x128xf32>, tensor<128xf32>) outs(%3 : tensor<2x8x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %a = arith.addf %in, %in_0 : f32
    linalg.yield %a : f32
  } -> tensor<2x8x128xf32>
  return %4 : tensor<2x8x128xf32>
}
