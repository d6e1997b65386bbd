// RUN: tp-opt %s -split-input-file --tp-split-outputs=names=logits | FileCheck %s

// Padded logits gathered, then the padding sliced off: each rank returns its
// block of 4 (of 8, 7 of them real).
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x1x4xf32>
// CHECK-SAME: -> (tensor<2x1x4xf32> {tp.output = "logits", tp.split_output = #tp.split_output<dim = 2, size = 7>}, tensor<2x8xf32> {tp.output = "hidden"})
// CHECK-NOT: all_gather %[[X]]
// CHECK-NOT: tensor.extract_slice
// CHECK: shard.all_gather %{{.*}} gather_axis = 1
// CHECK: return %[[X]], %{{.*}} : tensor<2x1x4xf32>, tensor<2x8xf32>
shard.grid @grid(shape = 2)
func.func @main(%x: tensor<2x1x4xf32>, %h: tensor<2x4xf32>)
    -> (tensor<2x1x7xf32> {tp.output = "logits"}, tensor<2x8xf32> {tp.output = "hidden"}) {
  %g = shard.all_gather %x on @grid grid_axes = [0] gather_axis = 2 : tensor<2x1x4xf32> -> tensor<2x1x8xf32>
  %s = tensor.extract_slice %g[0, 0, 0] [2, 1, 7] [1, 1, 1] : tensor<2x1x8xf32> to tensor<2x1x7xf32>
  // Not named: still gathered.
  %hg = shard.all_gather %h on @grid grid_axes = [0] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
  return %s, %hg : tensor<2x1x7xf32>, tensor<2x8xf32>
}

// -----

// Gathered without padding: the block, and the whole size 8.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: -> (tensor<2x4xf32> {tp.output = "logits", tp.split_output = #tp.split_output<dim = 1, size = 8>})
shard.grid @grid(shape = 2)
func.func @main(%x: tensor<2x4xf32>) -> (tensor<2x8xf32> {tp.output = "logits"}) {
  %g = shard.all_gather %x on @grid grid_axes = [0] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
  return %g : tensor<2x8xf32>
}

// -----

// Not gathered (replicated logits), or the gather read elsewhere too: as is.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: -> (tensor<2x8xf32> {tp.output = "logits"}, tensor<2x8xf32> {tp.output = "copy"})
// CHECK: shard.all_gather
// CHECK-NOT: tp.split_output
shard.grid @grid(shape = 2)
func.func @main(%x: tensor<2x4xf32>)
    -> (tensor<2x8xf32> {tp.output = "logits"}, tensor<2x8xf32> {tp.output = "copy"}) {
  %g = shard.all_gather %x on @grid grid_axes = [0] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
  return %g, %g : tensor<2x8xf32>, tensor<2x8xf32>
}
