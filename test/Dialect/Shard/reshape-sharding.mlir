// RUN: tp-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,canonicalize))' | FileCheck %s

// A split of the merged heads dim lands on the heads dim: local reshape, no
// communication.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @expand_heads(
// CHECK-SAME: %[[ARG:.*]]: tensor<2x16x32xf32>) -> tensor<2x16x2x16xf32>
func.func @expand_heads(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[], [], [0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x64xf32>
  // CHECK-NEXT: %[[E:.*]] = tensor.expand_shape %[[ARG]] {{\[\[}}0], [1], [2, 3]] output_shape [2, 16, 2, 16] : tensor<2x16x32xf32> into tensor<2x16x2x16xf32>
  // CHECK-NEXT: return %[[E]]
  %e = tensor.expand_shape %a [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  return %e : tensor<2x16x4x16xf32>
}

// -----

// Backward: the heads split of the result maps back to the merged dim.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @expand_heads_backward(
// CHECK-SAME: tensor<2x16x32xf32>) -> tensor<2x16x2x16xf32>
// CHECK-NOT: shard.all
func.func @expand_heads_backward(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %e = tensor.expand_shape %arg0 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  %s = shard.sharding @grid split_axes = [[], [], [0]] : !shard.sharding
  %r = shard.shard %e to %s : tensor<2x16x4x16xf32>
  return %r : tensor<2x16x4x16xf32>
}

// -----

// Backward: a split of an inner dim of a group is not a split of the merged
// dim; the source stays whole and the result is sliced locally.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @expand_inner_backward(
// CHECK-SAME: tensor<2x16x64xf32>) -> tensor<2x16x4x8xf32>
// CHECK: tensor.expand_shape {{.*}} : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
// CHECK: shard.all_slice {{.*}} slice_axis = 3
func.func @expand_inner_backward(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  // expected-warning @below {{split of result dim 3 (size 16) on grid axes [0] cannot pass through this reshape; the value is replicated around it}}
  %e = tensor.expand_shape %arg0 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  %s = shard.sharding @grid split_axes = [[], [], [], [0]] : !shard.sharding
  %r = shard.shard %e to %s : tensor<2x16x4x16xf32>
  return %r : tensor<2x16x4x16xf32>
}

// -----

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @collapse_heads(
// CHECK-SAME: %[[ARG:.*]]: tensor<2x16x2x16xf32>) -> tensor<2x16x32xf32>
func.func @collapse_heads(%arg0: tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32> {
  %s = shard.sharding @grid split_axes = [[], [], [0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x4x16xf32>
  // CHECK-NEXT: %[[C:.*]] = tensor.collapse_shape %[[ARG]] {{\[\[}}0], [1], [2, 3]] : tensor<2x16x2x16xf32> into tensor<2x16x32xf32>
  // CHECK-NEXT: return %[[C]]
  %c = tensor.collapse_shape %a [[0], [1], [2, 3]] : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
  return %c : tensor<2x16x64xf32>
}

// -----

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @collapse_heads_backward(
// CHECK-SAME: tensor<2x16x2x16xf32>) -> tensor<2x16x32xf32>
// CHECK-NOT: shard.all
func.func @collapse_heads_backward(%arg0: tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32> {
  %c = tensor.collapse_shape %arg0 [[0], [1], [2, 3]] : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
  %s = shard.sharding @grid split_axes = [[], [], [0]] : !shard.sharding
  %r = shard.shard %c to %s : tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}

// -----

// Forward: an inner-dim split cannot be merged; gather first.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @collapse_inner(
// CHECK: shard.all_gather {{.*}} gather_axis = 3 : tensor<2x16x4x8xf32> -> tensor<2x16x4x16xf32>
// CHECK: tensor.collapse_shape {{.*}} : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
func.func @collapse_inner(%arg0: tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32> {
  %s = shard.sharding @grid split_axes = [[], [], [], [0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x4x16xf32>
  // expected-warning @below {{split of source dim 3 (size 16) on grid axes [0] cannot pass through this reshape}}
  %c = tensor.collapse_shape %a [[0], [1], [2, 3]] : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
  return %c : tensor<2x16x64xf32>
}

// -----

// 4 heads do not divide over 8 devices: refused, gathered before the reshape.
shard.grid @grid(shape = 8)
// CHECK-LABEL: func.func @negative_indivisible_heads(
// CHECK-SAME: tensor<2x16x8xf32>) -> tensor<2x16x4x16xf32>
// CHECK: shard.all_gather {{.*}} gather_axis = 2 : tensor<2x16x8xf32> -> tensor<2x16x64xf32>
// CHECK: tensor.expand_shape {{.*}} : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
func.func @negative_indivisible_heads(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[], [], [0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x64xf32>
  // expected-warning @below {{split of result dim 2 (size 4) on grid axes [0] cannot pass through this reshape; the value is replicated around it}}
  %e = tensor.expand_shape %a [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  return %e : tensor<2x16x4x16xf32>
}

// -----

// A dynamic grid size cannot be proven to divide the heads: refused.
shard.grid @grid(shape = ?)
// CHECK-LABEL: func.func @negative_dynamic_grid(
// CHECK: shard.all_gather
// CHECK: tensor.expand_shape {{.*}} : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
func.func @negative_dynamic_grid(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[], [], [0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x64xf32>
  // expected-warning @below {{split of result dim 2 (size 4) on grid axes [0] cannot pass through this reshape}}
  %e = tensor.expand_shape %a [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  return %e : tensor<2x16x4x16xf32>
}

// -----

// Softmax keepdims: the trailing unit dim is its own group member.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @keepdims(
// CHECK-NEXT: tensor.expand_shape {{.*}} output_shape [2, 2, 16, 1] : tensor<2x2x16xf32> into tensor<2x2x16x1xf32>
func.func @keepdims(%arg0: tensor<2x4x16xf32>) -> tensor<2x4x16x1xf32> {
  %s = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x4x16xf32>
  %e = tensor.expand_shape %a [[0], [1], [2, 3]] output_shape [2, 4, 16, 1] : tensor<2x4x16xf32> into tensor<2x4x16x1xf32>
  return %e : tensor<2x4x16x1xf32>
}

// -----

// Leading unit dims hold no data: the split goes to the first non-unit dim.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @leading_unit_dim(
// CHECK-NEXT: tensor.expand_shape {{.*}} output_shape [1, 2, 16] : tensor<32xf32> into tensor<1x2x16xf32>
func.func @leading_unit_dim(%arg0: tensor<64xf32>) -> tensor<1x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<64xf32>
  %e = tensor.expand_shape %a [[0, 1, 2]] output_shape [1, 4, 16] : tensor<64xf32> into tensor<1x4x16xf32>
  return %e : tensor<1x4x16xf32>
}

// -----

// A split dynamic dim outside any real group takes its local size.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @dynamic_batch(
// CHECK-SAME: %[[ARG:.*]]: tensor<?x64xf32>
// CHECK: %[[DIM:.*]] = tensor.dim %[[ARG]], %c0
// CHECK: tensor.expand_shape %[[ARG]] {{.*}} output_shape [%[[DIM]], 4, 16] : tensor<?x64xf32> into tensor<?x4x16xf32>
func.func @dynamic_batch(%arg0: tensor<?x64xf32>, %n: index) -> tensor<?x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<?x64xf32>
  %e = tensor.expand_shape %a [[0], [1, 2]] output_shape [%n, 4, 16] : tensor<?x64xf32> into tensor<?x4x16xf32>
  return %e : tensor<?x4x16xf32>
}

// -----

// Batch on one grid axis, heads on the other.
shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @two_grid_axes(
// CHECK-NEXT: tensor.expand_shape {{.*}} output_shape [1, 16, 2, 16] : tensor<1x16x32xf32> into tensor<1x16x2x16xf32>
func.func @two_grid_axes(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[0], [], [1]] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x64xf32>
  %e = tensor.expand_shape %a [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  return %e : tensor<2x16x4x16xf32>
}

// -----

// Upstream resharding cannot leave a halo layout and hands back no value;
// partition reports it instead of crashing.
shard.grid @grid(shape = 2)
func.func @negative_halo(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %s = shard.sharding @grid split_axes = [[], [0]] halo_sizes = [1, 1] : !shard.sharding
  %a = shard.shard %arg0 to %s : tensor<2x16x64xf32>
  // expected-error @below {{source could not be resharded to 'tensor<2x16x64xf32>'}}
  %e = tensor.expand_shape %a [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  return %e : tensor<2x16x4x16xf32>
}
