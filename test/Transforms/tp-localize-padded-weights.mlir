// RUN: tp-opt %s --tp-localize-padded-weights --split-input-file | FileCheck %s

// After partition a padded weight is read whole, padded and sliced per
// rank. The argument becomes this rank's rows of the padded weight; its
// layout takes the plan's role, dim and block from the pad and records the
// padding.
shard.grid @grid(shape = 4)
// CHECK-LABEL: func.func @vocab(
// CHECK-SAME: %[[W:.*]]: tensor<3x8xf32> {tp.layout = #tp.layout<role = vocab, dim = 0, block = 0, padded = [10, 12]>, tp.weight = "wte"})
// CHECK-NOT: tensor.pad
// CHECK-NOT: shard.all_slice
// CHECK: return %[[W]]
func.func @vocab(%w: tensor<10x8xf32> {tp.weight = "wte"}) -> tensor<3x8xf32> {
  %zero = arith.constant 0.0 : f32
  %p = tensor.pad %w low[0, 0] high[2, 0] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } {tp.layout = #tp.layout<role = vocab, dim = 0, block = 0>} : tensor<10x8xf32> to tensor<12x8xf32>
  %l = shard.all_slice %p on @grid grid_axes = [0] slice_axis = 0 : tensor<12x8xf32> -> tensor<3x8xf32>
  return %l : tensor<3x8xf32>
}

// -----

// A piece of a fused weight keeps its range: V is the piece's size.
shard.grid @grid(shape = 4)
// CHECK-LABEL: func.func @piece(
// CHECK-SAME: tensor<8x2xf32> {tp.layout = #tp.layout<role = column, dim = 1, block = 1, slice = [6, 6], padded = [6, 8]>, tp.weight = "qkv"})
func.func @piece(%w: tensor<8x6xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [6, 6]>, tp.weight = "qkv"}) -> tensor<8x2xf32> {
  %zero = arith.constant 0.0 : f32
  %p = tensor.pad %w low[0, 0] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } {tp.layout = #tp.layout<role = column, dim = 1, block = 1>} : tensor<8x6xf32> to tensor<8x8xf32>
  %l = shard.all_slice %p on @grid grid_axes = [0] slice_axis = 1 : tensor<8x8xf32> -> tensor<8x2xf32>
  return %l : tensor<8x2xf32>
}

// -----

// A pad that no plan rule split (sharding propagation did) is localized
// too, with the role `propagated`; a piece padded across its cut dim is
// left alone (its layout has one dim).
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @unplanned(
// CHECK-SAME: tensor<5xf32> {tp.layout = #tp.layout<role = propagated, dim = 0, padded = [9, 10]>, tp.weight = "b"}
// CHECK-SAME: tensor<6x6xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [0, 6]>, tp.weight = "piece"}
// CHECK: tensor.pad
// CHECK-NOT: tensor.pad
func.func @unplanned(%b: tensor<9xf32> {tp.weight = "b"},
                     %w: tensor<6x6xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [0, 6]>, tp.weight = "piece"})
    -> (tensor<5xf32>, tensor<4x6xf32>) {
  %zero = arith.constant 0.0 : f32
  %p = tensor.pad %b low[0] high[1] {
  ^bb0(%i: index):
    tensor.yield %zero : f32
  } : tensor<9xf32> to tensor<10xf32>
  %l = shard.all_slice %p on @grid grid_axes = [0] slice_axis = 0 : tensor<10xf32> -> tensor<5xf32>
  %q = tensor.pad %w low[0, 0] high[2, 0] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<6x6xf32> to tensor<8x6xf32>
  %m = shard.all_slice %q on @grid grid_axes = [0] slice_axis = 0 : tensor<8x6xf32> -> tensor<4x6xf32>
  return %l, %m : tensor<5xf32>, tensor<4x6xf32>
}

// -----

// A weight that several layers share (ALBERT's) is padded once per use; if
// every use pads and slices it alike, each rank stores its slice once. One
// use that slices differently leaves the weight whole.
shard.grid @grid(shape = 4)
// CHECK-LABEL: func.func @shared(
// CHECK-SAME: %[[W:.*]]: tensor<8x2xf32> {tp.layout = #tp.layout<role = column, dim = 1, block = 1, padded = [6, 8]>, tp.weight = "q"}
// CHECK-SAME: tensor<8x6xf32> {tp.weight = "k"}
// CHECK: return %[[W]], %[[W]]
func.func @shared(%w: tensor<8x6xf32> {tp.weight = "q"}, %k: tensor<8x6xf32> {tp.weight = "k"})
    -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<3x6xf32>) {
  %zero = arith.constant 0.0 : f32
  %p = tensor.pad %w low[0, 0] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } {tp.layout = #tp.layout<role = column, dim = 1, block = 1>} : tensor<8x6xf32> to tensor<8x8xf32>
  %l = shard.all_slice %p on @grid grid_axes = [0] slice_axis = 1 : tensor<8x8xf32> -> tensor<8x2xf32>
  %q = tensor.pad %w low[0, 0] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } {tp.layout = #tp.layout<role = column, dim = 1, block = 1>} : tensor<8x6xf32> to tensor<8x8xf32>
  %m = shard.all_slice %q on @grid grid_axes = [0] slice_axis = 1 : tensor<8x8xf32> -> tensor<8x2xf32>
  %r = tensor.pad %k low[0, 0] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<8x6xf32> to tensor<8x8xf32>
  %n = shard.all_slice %r on @grid grid_axes = [0] slice_axis = 1 : tensor<8x8xf32> -> tensor<8x2xf32>
  %s = tensor.pad %k low[0, 0] high[4, 0] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<8x6xf32> to tensor<12x6xf32>
  %o = shard.all_slice %s on @grid grid_axes = [0] slice_axis = 0 : tensor<12x6xf32> -> tensor<3x6xf32>
  return %l, %m, %n, %o : tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<3x6xf32>
}
