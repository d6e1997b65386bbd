// RUN: tp-opt %s -split-input-file --tp-form-reduce-scatter | FileCheck %s

// The end of a row-parallel block whose result is split on the sequence
// dim: all_reduce then all_slice on the same grid axes become one
// reduce_scatter on the sliced dim, with the all_reduce's reduction kind.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @reduce_then_slice(
// CHECK-SAME: %[[ARG:.*]]: tensor<2x16x64xf32>
// CHECK-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[ARG]] on @grid grid_axes = [0] scatter_axis = 1 : tensor<2x16x64xf32> -> tensor<2x8x64xf32>
// CHECK-NEXT: return %[[RS]]
func.func @reduce_then_slice(%arg0: tensor<2x16x64xf32>) -> tensor<2x8x64xf32> {
  %0 = shard.all_reduce %arg0 on @grid grid_axes = [0] : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
  %1 = shard.all_slice %0 on @grid grid_axes = [0] slice_axis = 1 : tensor<2x16x64xf32> -> tensor<2x8x64xf32>
  return %1 : tensor<2x8x64xf32>
}

// -----

// The reduction kind is kept.
shard.grid @grid(shape = 4)
// CHECK-LABEL: func.func @reduce_max_then_slice(
// CHECK-NEXT: shard.reduce_scatter %{{.*}} on @grid grid_axes = [0] reduction = max scatter_axis = 0 : tensor<16x64xf32> -> tensor<4x64xf32>
// CHECK-NOT: shard.all_reduce
// CHECK-NOT: shard.all_slice
func.func @reduce_max_then_slice(%arg0: tensor<16x64xf32>) -> tensor<4x64xf32> {
  %0 = shard.all_reduce %arg0 on @grid grid_axes = [0] reduction = max : tensor<16x64xf32> -> tensor<16x64xf32>
  %1 = shard.all_slice %0 on @grid grid_axes = [0] slice_axis = 0 : tensor<16x64xf32> -> tensor<4x64xf32>
  return %1 : tensor<4x64xf32>
}

// -----

// Reduced over one grid axis, sliced over the other: not a reduce-scatter.
shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @negative_different_grid_axes(
// CHECK-NEXT: shard.all_reduce {{.*}} grid_axes = [0]
// CHECK-NEXT: shard.all_slice {{.*}} grid_axes = [1]
// CHECK-NOT: shard.reduce_scatter
func.func @negative_different_grid_axes(%arg0: tensor<2x16x64xf32>) -> tensor<2x8x64xf32> {
  %0 = shard.all_reduce %arg0 on @grid grid_axes = [0] : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
  %1 = shard.all_slice %0 on @grid grid_axes = [1] slice_axis = 1 : tensor<2x16x64xf32> -> tensor<2x8x64xf32>
  return %1 : tensor<2x8x64xf32>
}

// -----

// The whole reduced value is used again: the all_reduce has to stay.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @negative_all_reduce_second_use(
// CHECK-NEXT: %[[AR:.*]] = shard.all_reduce
// CHECK-NEXT: %[[AS:.*]] = shard.all_slice %[[AR]]
// CHECK-NEXT: return %[[AS]], %[[AR]]
// CHECK-NOT: shard.reduce_scatter
func.func @negative_all_reduce_second_use(%arg0: tensor<2x16x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x16x64xf32>) {
  %0 = shard.all_reduce %arg0 on @grid grid_axes = [0] : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
  %1 = shard.all_slice %0 on @grid grid_axes = [0] slice_axis = 1 : tensor<2x16x64xf32> -> tensor<2x8x64xf32>
  return %1, %0 : tensor<2x8x64xf32>, tensor<2x16x64xf32>
}

// -----

// A slice of something that was not all-reduced stays a slice.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @negative_slice_only(
// CHECK-NEXT: shard.all_slice
// CHECK-NOT: shard.reduce_scatter
func.func @negative_slice_only(%arg0: tensor<2x16x64xf32>) -> tensor<2x8x64xf32> {
  %0 = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 1 : tensor<2x16x64xf32> -> tensor<2x8x64xf32>
  return %0 : tensor<2x8x64xf32>
}
