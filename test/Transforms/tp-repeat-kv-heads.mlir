// RUN: tp-opt --tp-repeat-kv-heads=devices=4 %s --split-input-file | FileCheck %s

// Grouped-query attention's K side: 2 K/V heads of 4 channels, broadcast to
// the 2 query heads of each group and merged into 4 heads. On 4 ranks each
// K/V head is repeated twice: the projection's weight becomes a new
// argument holding each head's 4 columns twice (the old one goes), the
// K/V values have 4 heads, and the broadcast to the query heads repeats
// once, so the merged heads are the same values.

#x = affine_map<(b, s, n, c) -> (b, s, c)>
#w = affine_map<(b, s, n, c) -> (c, n)>
#o = affine_map<(b, s, n, c) -> (b, s, n)>
#tin = affine_map<(b, h, s, d) -> (b, s, h, d)>
#tout = affine_map<(b, h, s, d) -> (b, h, s, d)>
#rin = affine_map<(b, h, g, s, d) -> (b, h, s, d)>
#rout = affine_map<(b, h, g, s, d) -> (b, h, g, s, d)>
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.*]]: tensor<1x3x16xf32> {tp.input = "x"}, %[[W:.*]]: tensor<16x16xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, repeat = [2, 2]>, tp.weight = "wk"})
// CHECK-SAME: -> (tensor<1x4x3x4xf32> {tp.output = "k"})
// CHECK: %[[K:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[W]] : tensor<1x3x16xf32>, tensor<16x16xf32>) outs(%{{.*}} : tensor<1x3x16xf32>)
// CHECK: %[[HEADS:.*]] = tensor.expand_shape %[[K]] {{.*}} into tensor<1x3x4x4xf32>
// CHECK: %[[T:.*]] = linalg.generic {{.*}} ins(%[[HEADS]] : tensor<1x3x4x4xf32>) outs(%{{.*}} : tensor<1x4x3x4xf32>)
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[T]] : tensor<1x4x3x4xf32>) outs(%{{.*}} : tensor<1x4x1x3x4xf32>)
// CHECK: %[[Q:.*]] = tensor.collapse_shape %[[R]] {{.*}} into tensor<1x4x3x4xf32>
// CHECK: return %[[Q]]
func.func @main(%x: tensor<1x3x16xf32> {tp.input = "x"}, %wk: tensor<16x8xf32> {tp.weight = "wk"})
    -> (tensor<1x4x3x4xf32> {tp.output = "k"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x3x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x3x8xf32>) -> tensor<1x3x8xf32>
  %k = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wk : tensor<1x3x16xf32>, tensor<16x8xf32>) outs(%z : tensor<1x3x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x3x8xf32>
  %heads = tensor.expand_shape %k [[0], [1], [2, 3]] output_shape [1, 3, 2, 4] : tensor<1x3x8xf32> into tensor<1x3x2x4xf32>
  %te = tensor.empty() : tensor<1x2x3x4xf32>
  %t = linalg.generic {indexing_maps = [#tin, #tout], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%heads : tensor<1x3x2x4xf32>) outs(%te : tensor<1x2x3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x3x4xf32>
  %re = tensor.empty() : tensor<1x2x2x3x4xf32>
  %r = linalg.generic {indexing_maps = [#rin, #rout], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%t : tensor<1x2x3x4xf32>) outs(%re : tensor<1x2x2x3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x2x3x4xf32>
  %q = tensor.collapse_shape %r [[0], [1, 2], [3], [4]] : tensor<1x2x2x3x4xf32> into tensor<1x4x3x4xf32>
  return %q : tensor<1x4x3x4xf32>
}

// -----

// A K/V value that is returned (an export's present.key without
// tp-kv-cache) cannot grow: the block stays as it is.

// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<16x8xf32> {tp.weight = "wk"}
// CHECK-NOT: repeat
func.func @main(%x: tensor<1x3x16xf32> {tp.input = "x"}, %wk: tensor<16x8xf32> {tp.weight = "wk"})
    -> (tensor<1x4x3x4xf32> {tp.output = "k"}, tensor<1x3x8xf32> {tp.output = "present"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x3x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x3x8xf32>) -> tensor<1x3x8xf32>
  %k = linalg.generic {indexing_maps = [affine_map<(b, s, n, c) -> (b, s, c)>, affine_map<(b, s, n, c) -> (c, n)>, affine_map<(b, s, n, c) -> (b, s, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wk : tensor<1x3x16xf32>, tensor<16x8xf32>) outs(%z : tensor<1x3x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x3x8xf32>
  %heads = tensor.expand_shape %k [[0], [1], [2, 3]] output_shape [1, 3, 2, 4] : tensor<1x3x8xf32> into tensor<1x3x2x4xf32>
  %te = tensor.empty() : tensor<1x2x3x4xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(b, h, s, d) -> (b, s, h, d)>, affine_map<(b, h, s, d) -> (b, h, s, d)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%heads : tensor<1x3x2x4xf32>) outs(%te : tensor<1x2x3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x3x4xf32>
  %re = tensor.empty() : tensor<1x2x2x3x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, h, g, s, d) -> (b, h, s, d)>, affine_map<(b, h, g, s, d) -> (b, h, g, s, d)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%t : tensor<1x2x3x4xf32>) outs(%re : tensor<1x2x2x3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x2x3x4xf32>
  %q = tensor.collapse_shape %r [[0], [1, 2], [3], [4]] : tensor<1x2x2x3x4xf32> into tensor<1x4x3x4xf32>
  return %q, %k : tensor<1x4x3x4xf32>, tensor<1x3x8xf32>
}
