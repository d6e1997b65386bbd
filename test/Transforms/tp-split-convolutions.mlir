// RUN: tp-opt %s --tp-split-convolutions --split-input-file -verify-diagnostics | FileCheck %s

// A 1-D convolution after partition: each of the 2 ranks computes half of
// the 4 output channels from half of the filters, then gathers them.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @conv(
// CHECK-SAME: %[[X:.*]]: tensor<1x3x10xf32>, %[[W:.*]]: tensor<2x3x3xf32> {tp.layout = #tp.layout<role = conv_output, dim = 0>, tp.weight = "w"})
func.func @conv(%x: tensor<1x3x10xf32>, %w: tensor<4x3x3xf32> {tp.weight = "w"}) -> tensor<1x4x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  // CHECK: %[[INIT:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<1x2x8xf32>)
  // CHECK: %[[LOCAL:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[W]] : tensor<1x3x10xf32>, tensor<2x3x3xf32>) outs(%[[INIT]] : tensor<1x2x8xf32>)
  // CHECK: %[[Y:.*]] = shard.all_gather %[[LOCAL]] on @grid grid_axes = [0] gather_axis = 1 : tensor<1x2x8xf32> -> tensor<1x4x8xf32>
  // CHECK: return %[[Y]]
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<1x3x10xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x8xf32>
  return %y : tensor<1x4x8xf32>
}

// -----

// 3 output channels on 2 ranks: replicated, with a warning.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @negative_uneven(
// CHECK-SAME: tensor<3x3x3xf32> {tp.weight = "w"}
// CHECK-NOT: all_gather
func.func @negative_uneven(%x: tensor<1x3x10xf32>, %w: tensor<3x3x3xf32> {tp.weight = "w"}, %init: tensor<1x3x8xf32>) -> tensor<1x3x8xf32> {
  // expected-warning @below {{tp-split-convolutions: 3 output channels do not divide by 2 devices; the convolution stays replicated (device counts that divide: 1, 3)}}
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<1x3x10xf32>, tensor<3x3x3xf32>) outs(%init : tensor<1x3x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x3x8xf32>
  return %y : tensor<1x3x8xf32>
}

// -----

// Filters that something else also reads stay whole.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @negative_shared_weight(
// CHECK-SAME: tensor<4x3x3xf32> {tp.weight = "w"}
// CHECK-NOT: all_gather
func.func @negative_shared_weight(%x: tensor<1x3x10xf32>, %w: tensor<4x3x3xf32> {tp.weight = "w"}, %init: tensor<1x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<4x3x3xf32>) {
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<1x3x10xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x8xf32>
  return %y, %w : tensor<1x4x8xf32>, tensor<4x3x3xf32>
}

// -----

// The bias add after the convolution works per channel: it runs on this
// rank's 2 channels with its slice of the bias, and the gather moves below it.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
#id = affine_map<(n, f, ow) -> (n, f, ow)>
#ch = affine_map<(n, f, ow) -> (f)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @sink_through_bias(
// CHECK-SAME: tensor<2x3x3xf32> {tp.layout = #tp.layout<role = conv_output, dim = 0>, tp.weight = "w"}, %[[B:.*]]: tensor<2xf32> {tp.layout = #tp.layout<role = conv_output, dim = 0>, tp.weight = "b"})
// CHECK: %[[CONV:.*]] = linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<1x3x10xf32>, tensor<2x3x3xf32>) outs(%{{.*}} : tensor<1x2x8xf32>)
// CHECK: %[[ADD:.*]] = linalg.generic {{.*}} ins(%[[CONV]], %[[B]] : tensor<1x2x8xf32>, tensor<2xf32>)
// CHECK: %[[Y:.*]] = shard.all_gather %[[ADD]] on @grid grid_axes = [0] gather_axis = 1 : tensor<1x2x8xf32> -> tensor<1x4x8xf32>
// CHECK: return %[[Y]]
func.func @sink_through_bias(%x: tensor<1x3x10xf32>, %w: tensor<4x3x3xf32> {tp.weight = "w"}, %b: tensor<4xf32> {tp.weight = "b"}) -> tensor<1x4x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<1x3x10xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x8xf32>
  %z = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y, %b : tensor<1x4x8xf32>, tensor<4xf32>) outs(%e : tensor<1x4x8xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %r = arith.addf %v, %bias : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  return %z : tensor<1x4x8xf32>
}
