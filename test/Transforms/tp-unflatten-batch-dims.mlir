// RUN: tp-opt %s -split-input-file --tp-unflatten-batch-dims | FileCheck %s

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// GPT-NeoX's attention scores: [batch, heads] merged into one dim for a
// batched matmul, scaled, and split back. After the pass the matmul and the
// scale run on [batch, heads, ...] and no reshape is left.
// CHECK-LABEL: func.func @merged_heads(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x4x12x16xf32>, %[[K:[^:]+]]: tensor<2x4x16x12xf32>
// CHECK-NOT: tensor.collapse_shape
// CHECK-NOT: tensor.expand_shape
// CHECK: %[[S:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%[[Q]], %[[K]] : tensor<2x4x12x16xf32>, tensor<2x4x16x12xf32>) outs(%{{.*}} : tensor<2x4x12x12xf32>)
// CHECK: %[[SCALED:.*]] = linalg.generic {{.*}} ins(%[[S]] : tensor<2x4x12x12xf32>)
// CHECK-NOT: tensor.expand_shape
// CHECK: return %[[SCALED]] : tensor<2x4x12x12xf32>
func.func @merged_heads(%q: tensor<2x4x12x16xf32>, %k: tensor<2x4x16x12xf32>) -> tensor<2x4x12x12xf32> {
  %qm = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<2x4x12x16xf32> into tensor<8x12x16xf32>
  %km = tensor.collapse_shape %k [[0, 1], [2], [3]] : tensor<2x4x16x12xf32> into tensor<8x16x12xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x12x12xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<8x12x12xf32>) -> tensor<8x12x12xf32>
  %s = linalg.batch_matmul ins(%qm, %km : tensor<8x12x16xf32>, tensor<8x16x12xf32>) outs(%init : tensor<8x12x12xf32>) -> tensor<8x12x12xf32>
  %e2 = tensor.empty() : tensor<8x12x12xf32>
  %scaled = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s : tensor<8x12x12xf32>) outs(%e2 : tensor<8x12x12xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.25 : f32
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<8x12x12xf32>
  %r = tensor.expand_shape %scaled [[0, 1], [2], [3]] output_shape [2, 4, 12, 12] : tensor<8x12x12xf32> into tensor<2x4x12x12xf32>
  return %r : tensor<2x4x12x12xf32>
}

// -----

// A reshape that only drops unit dims (a bias broadcast) is left alone.
#map = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @unit_dims(
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1, 2]] : tensor<8x1x1xf32> into tensor<8xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<2x8xf32>, tensor<8xf32>)
func.func @unit_dims(%x: tensor<2x8xf32>, %b: tensor<8x1x1xf32>) -> tensor<2x8xf32> {
  %bc = tensor.collapse_shape %b [[0, 1, 2]] : tensor<8x1x1xf32> into tensor<8xf32>
  %e = tensor.empty() : tensor<2x8xf32>
  %r = linalg.generic {indexing_maps = [#map, #bias, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x, %bc : tensor<2x8xf32>, tensor<8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// GPTBigCode's multi-query view: sequence and heads merged ([B, S*H, D]);
// the scale runs on [B, S, H, D] and the pair of reshapes disappears.
// CHECK-LABEL: func.func @merged_sequence_heads(
// CHECK-NOT: tensor.collapse_shape
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<2x12x4x16xf32>) outs(%{{.*}} : tensor<2x12x4x16xf32>)
// CHECK-NOT: tensor.expand_shape
func.func @merged_sequence_heads(%q: tensor<2x12x4x16xf32>) -> tensor<2x12x4x16xf32> {
  %m = tensor.collapse_shape %q [[0], [1, 2], [3]] : tensor<2x12x4x16xf32> into tensor<2x48x16xf32>
  %e = tensor.empty() : tensor<2x48x16xf32>
  %s = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%m : tensor<2x48x16xf32>) outs(%e : tensor<2x48x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.25 : f32
    %y = arith.mulf %x, %c : f32
    linalg.yield %y : f32
  } -> tensor<2x48x16xf32>
  %r = tensor.expand_shape %s [[0], [1, 2], [3]] output_shape [2, 12, 4, 16] : tensor<2x48x16xf32> into tensor<2x12x4x16xf32>
  return %r : tensor<2x12x4x16xf32>
}

// -----

#kv = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

// Llama's repeat_kv: K/V heads broadcast and merged into the query heads.
// The merged heads already split on any device count that divides them,
// so this merge stays.
// CHECK-LABEL: func.func @repeat_kv(
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2], [3], [4]] : tensor<2x2x2x12x16xf32> into tensor<2x4x12x16xf32>
func.func @repeat_kv(%k: tensor<2x2x12x16xf32>) -> tensor<2x4x12x16xf32> {
  %e = tensor.empty() : tensor<2x2x2x12x16xf32>
  %b = linalg.generic {indexing_maps = [#kv, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%k : tensor<2x2x12x16xf32>) outs(%e : tensor<2x2x2x12x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  } -> tensor<2x2x2x12x16xf32>
  %m = tensor.collapse_shape %b [[0], [1, 2], [3], [4]] : tensor<2x2x2x12x16xf32> into tensor<2x4x12x16xf32>
  %e2 = tensor.empty() : tensor<2x4x12x16xf32>
  %s = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%m : tensor<2x4x12x16xf32>) outs(%e2 : tensor<2x4x12x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.25 : f32
    %y = arith.mulf %x, %c : f32
    linalg.yield %y : f32
  } -> tensor<2x4x12x16xf32>
  return %s : tensor<2x4x12x16xf32>
}
