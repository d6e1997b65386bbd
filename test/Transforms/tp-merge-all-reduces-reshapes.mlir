// RUN: tp-opt %s --tp-merge-all-reduces | FileCheck %s

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#gate = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>

// A shared expert in a one-token decode step ([batch 2, 1 token, 8]): its
// reduced output is reshaped to [2, 1, 1, 8] so that its sigmoid gate
// [2, 1, 1] broadcasts over the width, scaled, and reshaped back, then
// added to the routed experts' reduced sum. The reshapes are sums'
// reshapes too: the reduce moves past the reshape to the scale, past the
// scale, and past the reshape back, and the block ends in one all-reduce.
// A reduce whose reshape leads to no scale stays before it.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @gated_shared_expert(
// CHECK-SAME: %[[SHARED:[^:]+]]: tensor<2x1x8xf32>, %[[ROUTED:[^:]+]]: tensor<2x1x8xf32>, %[[GATE:[^:]+]]: tensor<2x1x1xf32>
// CHECK: %[[EXPANDED:.*]] = tensor.expand_shape %[[SHARED]]
// CHECK: %[[SCALED:.*]] = linalg.generic {{.*}} ins(%[[GATE]], %[[EXPANDED]] : tensor<2x1x1xf32>, tensor<2x1x1x8xf32>)
// CHECK: %[[BACK:.*]] = tensor.collapse_shape %[[SCALED]]
// CHECK: %[[PARTIAL:.*]] = linalg.generic {{.*}} ins(%[[ROUTED]], %[[BACK]] : tensor<2x1x8xf32>, tensor<2x1x8xf32>)
// CHECK: shard.all_reduce %[[PARTIAL]]
// CHECK-NOT: shard.all_reduce
func.func @gated_shared_expert(%shared: tensor<2x1x8xf32>, %routed: tensor<2x1x8xf32>,
                               %gate: tensor<2x1x1xf32>) -> tensor<2x1x8xf32> {
  %r0 = shard.all_reduce %shared on @grid grid_axes = [0] : tensor<2x1x8xf32> -> tensor<2x1x8xf32>
  %expanded = tensor.expand_shape %r0 [[0, 1], [2], [3]] output_shape [2, 1, 1, 8] : tensor<2x1x8xf32> into tensor<2x1x1x8xf32>
  %e4 = tensor.empty() : tensor<2x1x1x8xf32>
  %scaled = linalg.generic {indexing_maps = [#gate, #id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%gate, %expanded : tensor<2x1x1xf32>, tensor<2x1x1x8xf32>) outs(%e4 : tensor<2x1x1x8xf32>) {
  ^bb0(%g: f32, %x: f32, %o: f32):
    %m = arith.mulf %g, %x : f32
    linalg.yield %m : f32
  } -> tensor<2x1x1x8xf32>
  %back = tensor.collapse_shape %scaled [[0, 1], [2], [3]] : tensor<2x1x1x8xf32> into tensor<2x1x8xf32>
  %r1 = shard.all_reduce %routed on @grid grid_axes = [0] : tensor<2x1x8xf32> -> tensor<2x1x8xf32>
  %e3 = tensor.empty() : tensor<2x1x8xf32>
  %sum = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%r1, %back : tensor<2x1x8xf32>, tensor<2x1x8xf32>) outs(%e3 : tensor<2x1x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<2x1x8xf32>
  return %sum : tensor<2x1x8xf32>
}

// CHECK-LABEL: func.func @reshape_without_scale(
// CHECK: %[[R:.*]] = shard.all_reduce
// CHECK: tensor.expand_shape %[[R]]
func.func @reshape_without_scale(%p: tensor<2x1x8xf32>) -> tensor<2x1x1x8xf32> {
  %r = shard.all_reduce %p on @grid grid_axes = [0] : tensor<2x1x8xf32> -> tensor<2x1x8xf32>
  %expanded = tensor.expand_shape %r [[0, 1], [2], [3]] output_shape [2, 1, 1, 8] : tensor<2x1x8xf32> into tensor<2x1x1x8xf32>
  return %expanded : tensor<2x1x1x8xf32>
}
