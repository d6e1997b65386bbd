// RUN: tp-opt %s --tp-decompose-all-to-all | FileCheck %s

// A value split on dim 1 resharded to split on dim 0: gathered along dim 1,
// then each rank keeps its slice of dim 0.
shard.grid @grid(shape = 2)

// CHECK-LABEL: func.func @reshard(
// CHECK-SAME: %[[X:.*]]: tensor<4x3xf32>
// CHECK: %[[WHOLE:.*]] = shard.all_gather %[[X]] on @grid grid_axes = [0] gather_axis = 1 : tensor<4x3xf32> -> tensor<4x6xf32>
// CHECK: %[[MINE:.*]] = shard.all_slice %[[WHOLE]] on @grid grid_axes = [0] slice_axis = 0 : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK-NOT: shard.all_to_all
// CHECK: return %[[MINE]]
func.func @reshard(%x: tensor<4x3xf32>) -> tensor<2x6xf32> {
  %0 = shard.all_to_all %x on @grid grid_axes = [0] split_axis = 0 concat_axis = 1 : tensor<4x3xf32> -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}
