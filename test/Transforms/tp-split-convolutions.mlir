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

// -----

// Two convolutions with an activation that reads its input twice (x * x,
// as exact GELU and SiLU do): the gather moves below both readers, and the
// second, strided convolution (result 1x2x4, half of its gathered input
// 1x4x10 at most) sums over the channels the first split: it takes its
// filters split on its input channels and ends in one all-reduce, with no
// gather left.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
#x2 = affine_map<(n, f, ow, c, k) -> (n, c, 2 * ow + k)>
#id = affine_map<(n, c, w) -> (n, c, w)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @conv_pair(
// CHECK-SAME: tensor<2x3x3xf32> {tp.layout = #tp.layout<role = conv_output, dim = 0>, tp.weight = "w1"}
// CHECK-SAME: tensor<2x2x3xf32> {tp.layout = #tp.layout<role = row, dim = 1>, tp.weight = "w2"}
// CHECK: %[[C1:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x10xf32>)
// CHECK: %[[SQ:.*]] = linalg.generic {{.*}} ins(%[[C1]], %[[C1]] : tensor<1x2x10xf32>, tensor<1x2x10xf32>) outs(%{{.*}} : tensor<1x2x10xf32>)
// CHECK: %[[C2:.*]] = linalg.generic {{.*}} ins(%[[SQ]], %{{.*}} : tensor<1x2x10xf32>, tensor<2x2x3xf32>) outs(%{{.*}} : tensor<1x2x4xf32>)
// CHECK: %[[Y:.*]] = shard.all_reduce %[[C2]] on @grid grid_axes = [0] : tensor<1x2x4xf32> -> tensor<1x2x4xf32>
// CHECK-NOT: all_gather
// CHECK: return %[[Y]]
func.func @conv_pair(%x: tensor<1x3x12xf32>, %w1: tensor<4x3x3xf32> {tp.weight = "w1"},
                     %w2: tensor<2x4x3xf32> {tp.weight = "w2"}) -> tensor<1x2x4xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<1x4x10xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x4x10xf32>) -> tensor<1x4x10xf32>
  %c1 = linalg.generic {indexing_maps = [#x, #w, #y],
                        iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w1 : tensor<1x3x12xf32>, tensor<4x3x3xf32>) outs(%i1 : tensor<1x4x10xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x10xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%c1, %c1 : tensor<1x4x10xf32>, tensor<1x4x10xf32>) outs(%e1 : tensor<1x4x10xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<1x4x10xf32>
  %e2 = tensor.empty() : tensor<1x2x4xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  %c2 = linalg.generic {indexing_maps = [#x2, #w, #y],
                        iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%sq, %w2 : tensor<1x4x10xf32>, tensor<2x4x3xf32>) outs(%i2 : tensor<1x2x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x2x4xf32>
  return %c2 : tensor<1x2x4xf32>
}

// -----

// The second convolution widens (8 output channels from 4 at the same
// length): an all-reduce of its result would send more than the gather
// of its input, so the gather stays and it is split on its own output
// channels.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @conv_widening(
// CHECK-SAME: tensor<2x3x3xf32> {tp.layout = #tp.layout<role = conv_output, dim = 0>, tp.weight = "w1"}
// CHECK-SAME: tensor<4x4x3xf32> {tp.layout = #tp.layout<role = conv_output, dim = 0>, tp.weight = "w2"}
// CHECK: shard.all_gather {{.*}} : tensor<1x2x10xf32> -> tensor<1x4x10xf32>
// CHECK: shard.all_gather {{.*}} : tensor<1x4x8xf32> -> tensor<1x8x8xf32>
// CHECK-NOT: all_reduce
func.func @conv_widening(%x: tensor<1x3x12xf32>, %w1: tensor<4x3x3xf32> {tp.weight = "w1"},
                         %w2: tensor<8x4x3xf32> {tp.weight = "w2"}) -> tensor<1x8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<1x4x10xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x4x10xf32>) -> tensor<1x4x10xf32>
  %c1 = linalg.generic {indexing_maps = [#x, #w, #y],
                        iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w1 : tensor<1x3x12xf32>, tensor<4x3x3xf32>) outs(%i1 : tensor<1x4x10xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x10xf32>
  %e2 = tensor.empty() : tensor<1x8x8xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x8x8xf32>) -> tensor<1x8x8xf32>
  %c2 = linalg.generic {indexing_maps = [#x, #w, #y],
                        iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%c1, %w2 : tensor<1x4x10xf32>, tensor<8x4x3xf32>) outs(%i2 : tensor<1x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x8x8xf32>
  return %c2 : tensor<1x8x8xf32>
}

// -----

// A convolution whose output a reduction over the channels reads as well as
// a per-channel op (a layer norm's mean and centring after a vision
// transformer's patch embedding): moving the gather below the centring
// would gather the channels twice, once for the mean and once after it, so
// it stays where the convolution is: one all-gather.
#x = affine_map<(n, f, ow, c, k) -> (n, c, ow + k)>
#w = affine_map<(n, f, ow, c, k) -> (f, c, k)>
#y = affine_map<(n, f, ow, c, k) -> (n, f, ow)>
#id = affine_map<(n, f, ow) -> (n, f, ow)>
#perpos = affine_map<(n, f, ow) -> (n, ow)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @norm_after_conv(
// CHECK: %[[LOCAL:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x8xf32>)
// CHECK: %[[Y:.*]] = shard.all_gather %[[LOCAL]] on @grid grid_axes = [0] gather_axis = 1 : tensor<1x2x8xf32> -> tensor<1x4x8xf32>
// CHECK: %[[MEAN:.*]] = linalg.generic {{.*}} ins(%[[Y]] : tensor<1x4x8xf32>) outs(%{{.*}} : tensor<1x8xf32>)
// CHECK: %[[C:.*]] = linalg.generic {{.*}} ins(%[[Y]], %[[MEAN]] : tensor<1x4x8xf32>, tensor<1x8xf32>) outs(%{{.*}} : tensor<1x4x8xf32>)
// CHECK-NOT: shard.all_gather
// CHECK: return %[[C]]
func.func @norm_after_conv(%x: tensor<1x3x10xf32>, %w: tensor<4x3x3xf32> {tp.weight = "w"}) -> tensor<1x4x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<1x3x10xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x8xf32>
  %e1 = tensor.empty() : tensor<1x8xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x8xf32>) -> tensor<1x8xf32>
  %mean = linalg.generic {indexing_maps = [#id, #perpos],
                          iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%y : tensor<1x4x8xf32>) outs(%z1 : tensor<1x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %q = arith.constant 0.25 : f32
    %m = arith.mulf %a, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x8xf32>
  %e2 = tensor.empty() : tensor<1x4x8xf32>
  %c = linalg.generic {indexing_maps = [#id, #perpos, #id],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y, %mean : tensor<1x4x8xf32>, tensor<1x8xf32>) outs(%e2 : tensor<1x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<1x4x8xf32>
  return %c : tensor<1x4x8xf32>
}
