// RUN: tp-opt %s --tp-lower-collectives -split-input-file -verify-diagnostics | FileCheck %s

shard.grid @grid(shape = 2)

// CHECK-LABEL: func @all_gather
// CHECK-DAG: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<2x8xf32>
// CHECK-DAG: %[[IDX:.*]] = shard.process_multi_index on @grid axes = [0] : index
// CHECK: %[[OFF:.*]] = arith.muli %{{.*}}, %{{.*}} : index
// CHECK: %[[INS:.*]] = tensor.insert_slice %arg0 into %[[ZERO]][0, %[[OFF]]] [2, 4] [1, 1]
// CHECK: shard.all_reduce %[[INS]] on @grid grid_axes = [0] : tensor<2x8xf32> -> tensor<2x8xf32>
// CHECK-NOT: shard.all_gather
func.func @all_gather(%arg0: tensor<2x4xf32>) -> tensor<2x8xf32> {
  %0 = shard.all_gather %arg0 on @grid grid_axes = [0] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// CHECK-LABEL: func @reduce_scatter
// CHECK: %[[SUM:.*]] = shard.all_reduce %arg0 on @grid grid_axes = [0] reduction = max : tensor<4x3xf32> -> tensor<4x3xf32>
// CHECK: tensor.extract_slice %[[SUM]][%{{.*}}, 0] [2, 3] [1, 1] : tensor<4x3xf32> to tensor<2x3xf32>
func.func @reduce_scatter(%arg0: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %0 = shard.reduce_scatter %arg0 on @grid grid_axes = [0] reduction = max scatter_axis = 0 : tensor<4x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func @all_slice
// CHECK-NOT: shard.all_reduce
// CHECK: tensor.extract_slice %arg0[0, %{{.*}}] [4, 3] [1, 1] : tensor<4x6xf32> to tensor<4x3xf32>
func.func @all_slice(%arg0: tensor<4x6xf32>) -> tensor<4x3xf32> {
  %0 = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 1 : tensor<4x6xf32> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

shard.grid @grid2d(shape = 2x3)

// The rank within a group of two grid axes is row-major over them.
// CHECK-LABEL: func @two_axes
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK: %[[IDX:.*]]:2 = shard.process_multi_index on @grid2d axes = [0, 1] : index, index
// CHECK: %[[ROW:.*]] = arith.muli %[[IDX]]#0, %[[C3]] : index
// CHECK: %[[RANK:.*]] = arith.addi %[[ROW]], %[[IDX]]#1 : index
// CHECK: %[[OFF:.*]] = arith.muli %[[RANK]], %[[C2]] : index
// CHECK: tensor.extract_slice %arg0[%[[OFF]]] [2] [1] : tensor<12xf32> to tensor<2xf32>
func.func @two_axes(%arg0: tensor<12xf32>) -> tensor<2xf32> {
  %0 = shard.all_slice %arg0 on @grid2d grid_axes = [0, 1] slice_axis = 0 : tensor<12xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

shard.grid @grid(shape = ?)

func.func @dynamic_grid(%arg0: tensor<4x6xf32>) -> tensor<4x?xf32> {
  // expected-error @below {{cannot be lowered: needs a static, evenly split shape on a static grid}}
  %0 = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 1 : tensor<4x6xf32> -> tensor<4x?xf32>
  return %0 : tensor<4x?xf32>
}
