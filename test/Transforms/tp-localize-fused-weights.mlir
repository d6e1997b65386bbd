// RUN: tp-opt %s --tp-localize-fused-weights --split-input-file | FileCheck %s

// A fused [8, 12] weight cut into three projections of 4 columns, each kept
// per rank with an all_slice: the argument becomes the rank's 2 columns of
// each piece, 6 in all, and each projection a plain slice of it.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @fused(
// CHECK-SAME: %[[W:.*]]: tensor<8x6xf32> {tp.parallel = "fused-column", tp.pieces = array<i64: 4, 4, 4>, tp.weight = "qkv"})
func.func @fused(%w: tensor<8x12xf32> {tp.weight = "qkv"}) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>) {
  // CHECK-NOT: all_slice
  // CHECK: tensor.extract_slice %[[W]][0, 0] [8, 2] [1, 1] : tensor<8x6xf32> to tensor<8x2xf32>
  // CHECK: tensor.extract_slice %[[W]][0, 2] [8, 2] [1, 1] : tensor<8x6xf32> to tensor<8x2xf32>
  // CHECK: tensor.extract_slice %[[W]][0, 4] [8, 2] [1, 1] : tensor<8x6xf32> to tensor<8x2xf32>
  %q = tensor.extract_slice %w[0, 0] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %lq = shard.all_slice %q on @grid grid_axes = [0] slice_axis = 1 : tensor<8x4xf32> -> tensor<8x2xf32>
  %k = tensor.extract_slice %w[0, 4] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %lk = shard.all_slice %k on @grid grid_axes = [0] slice_axis = 1 : tensor<8x4xf32> -> tensor<8x2xf32>
  %v = tensor.extract_slice %w[0, 8] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %lv = shard.all_slice %v on @grid grid_axes = [0] slice_axis = 1 : tensor<8x4xf32> -> tensor<8x2xf32>
  return %lq, %lk, %lv : tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>
}

// -----

// One projection stays whole (replicated key/value heads, say): the weight
// cannot be cut per rank and is left alone.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @negative_partly_replicated(
// CHECK-SAME: tensor<8x12xf32> {tp.weight = "qkv"}
// CHECK: shard.all_slice
func.func @negative_partly_replicated(%w: tensor<8x12xf32> {tp.weight = "qkv"}) -> (tensor<8x4xf32>, tensor<8x8xf32>) {
  %q = tensor.extract_slice %w[0, 0] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %lq = shard.all_slice %q on @grid grid_axes = [0] slice_axis = 1 : tensor<8x4xf32> -> tensor<8x2xf32>
  %kv = tensor.extract_slice %w[0, 4] [8, 8] [1, 1] : tensor<8x12xf32> to tensor<8x8xf32>
  %0 = tensor.empty() : tensor<8x4xf32>
  %1 = tensor.concat dim(1) %lq, %lq : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x4xf32>
  return %1, %kv : tensor<8x4xf32>, tensor<8x8xf32>
}
