// RUN: tp-opt %s -split-input-file --tp-outline-unpartitionable | FileCheck %s
// RUN: tp-opt %s -split-input-file --pass-pipeline='builtin.module(tp-outline-unpartitionable,func.func(sharding-propagation,tp-check-partitionable,shard-partition),inline,symbol-dce)' | FileCheck %s --check-prefix=ROUNDTRIP

// A 1-D convolution (map d1 + d2 is not a projected permutation) moves into
// a private function called with replicated operands and result; partition
// copies the call, and inlining puts the convolution back.
#x = affine_map<(d0, d1, d2) -> (d0, d1 + d2)>
#w = affine_map<(d0, d1, d2) -> (d2)>
#y = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  shard.grid @grid(shape = 2)
  // CHECK-LABEL: func.func private @tp_replicated_0(
  // CHECK-SAME: tensor<2x10xf32>, %{{.*}}: tensor<3xf32>, %{{.*}}: tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: linalg.generic
  // CHECK-LABEL: func.func @conv(
  // CHECK: %[[X:.+]] = shard.shard %sharding_annotated to %{{.+}} annotate_for_users : tensor<2x10xf32>
  // CHECK: %[[C:.+]] = call @tp_replicated_0(%[[X]],
  // CHECK: shard.shard %[[C]] to %{{.+}} : tensor<2x8xf32>
  // CHECK-NOT: linalg.generic

  // ROUNDTRIP-LABEL: func.func @conv(
  // ROUNDTRIP: linalg.generic
  // ROUNDTRIP-NOT: call
  // ROUNDTRIP-NOT: func.func private
  func.func @conv(%x: tensor<2x10xf32>, %w: tensor<3xf32>, %init: tensor<2x8xf32>) -> tensor<2x8xf32> {
    %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %s annotate_for_users : tensor<2x10xf32>
    %ws = shard.shard %w to %s annotate_for_users : tensor<3xf32>
    %is = shard.shard %init to %s annotate_for_users : tensor<2x8xf32>
    %0 = linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "reduction"]} ins(%xs, %ws : tensor<2x10xf32>, tensor<3xf32>) outs(%is : tensor<2x8xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s2 = arith.addf %acc, %m : f32
      linalg.yield %s2 : f32
    } -> tensor<2x8xf32>
    %r = shard.shard %0 to %s annotate_for_users : tensor<2x8xf32>
    return %r : tensor<2x8xf32>
  }
}

// -----

// Without a grid nothing is planned, so nothing moves.
#x = affine_map<(d0, d1, d2) -> (d0, d1 + d2)>
#w = affine_map<(d0, d1, d2) -> (d2)>
#y = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  // CHECK-LABEL: func.func @unplanned(
  // CHECK-NOT: call
  // CHECK: linalg.generic
  func.func @unplanned(%x: tensor<2x10xf32>, %w: tensor<3xf32>, %init: tensor<2x8xf32>) -> tensor<2x8xf32> {
    %0 = linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<2x10xf32>, tensor<3xf32>) outs(%init : tensor<2x8xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s2 = arith.addf %acc, %m : f32
      linalg.yield %s2 : f32
    } -> tensor<2x8xf32>
    return %0 : tensor<2x8xf32>
  }
}

// -----

// A depthwise convolution planned to split on its channels (tp.split_loop,
// a loop no window reads): the call reads and writes split channels, and a
// second callee with one rank's channels is what partition calls; after
// inlining, each rank convolves its own channels, with no collective.
#x = affine_map<(d0, d1, d2, d3) -> (d0 + d3, d1 + d2)>
#w = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
#y = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
module {
  shard.grid @grid(shape = 2)
  // CHECK-LABEL: func.func private @tp_replicated_0(
  // CHECK-SAME: tensor<10x4xf32>, %{{.*}}: tensor<4x1x3xf32>, %{{.*}}: tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NOT: tp.split_loop
  // CHECK-LABEL: func.func private @tp_replicated_0_local(
  // CHECK-SAME: tensor<10x2xf32>, %{{.*}}: tensor<2x1x3xf32>, %{{.*}}: tensor<8x2xf32>) -> tensor<8x2xf32>
  // CHECK: } -> tensor<8x2xf32>
  // CHECK-LABEL: func.func @depthwise(
  // CHECK: %[[X:.+]] = shard.shard %sharding_annotated to %{{.+}} annotate_for_users : tensor<10x4xf32>
  // CHECK: %[[C:.+]] = call @tp_replicated_0(%[[X]], {{.*}} {tp.local_callee = @tp_replicated_0_local}
  // CHECK: %[[SC:.+]] = shard.sharding @grid split_axes = {{\[\[}}], [0]]
  // CHECK-NEXT: shard.shard %[[C]] to %[[SC]] : tensor<8x4xf32>

  // ROUNDTRIP-LABEL: func.func @depthwise(
  // ROUNDTRIP-NOT: shard.all
  // ROUNDTRIP: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<10x2xf32>, tensor<2x1x3xf32>) outs(%{{.*}} : tensor<8x2xf32>)
  // ROUNDTRIP-NOT: shard.all
  // ROUNDTRIP: return %{{.*}} : tensor<8x2xf32>
  // ROUNDTRIP-NOT: func.func private
  func.func @depthwise(%x: tensor<10x4xf32>, %w: tensor<4x1x3xf32>, %init: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
    %s = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
    %s0 = shard.sharding @grid split_axes = [[0]] : !shard.sharding
    %xs = shard.shard %x to %s annotate_for_users : tensor<10x4xf32>
    %ws = shard.shard %w to %s0 annotate_for_users : tensor<4x1x3xf32>
    %is = shard.shard %init to %s annotate_for_users : tensor<8x4xf32>
    %0 = linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%xs, %ws : tensor<10x4xf32>, tensor<4x1x3xf32>) outs(%is : tensor<8x4xf32>) attrs = {tp.split_loop = 1 : i64} {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s2 = arith.addf %acc, %m : f32
      linalg.yield %s2 : f32
    } -> tensor<8x4xf32>
    %y = shard.shard %0 to %s : tensor<8x4xf32>
    %ys = shard.shard %y to %s annotate_for_users : tensor<8x4xf32>
    return %ys : tensor<8x4xf32>
  }
}
