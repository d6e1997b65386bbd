// RUN: tp-opt %s -split-input-file --tp-offset-split-indices --verify-diagnostics | FileCheck %s

#id = affine_map<(d0, d1) -> (d0, d1)>
#scan = affine_map<(d0, d1, d2) -> (d0, d2)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>

// A CumSum over a sequence that partition split (12 positions, 6 per rank):
// the scan compares the global position of its output with the input's, so
// the output loop gets the rank's offset; the reduction loop (whole) does
// not. The record is dropped.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @split_scan(
// CHECK: %[[RANK:.*]] = shard.process_multi_index on @grid axes = [0] : index
// CHECK: %[[C6:.*]] = arith.constant 6 : index
// CHECK: %[[OFFSET:.*]] = arith.muli %[[RANK]], %[[C6]] : index
// CHECK: linalg.generic
// CHECK-NOT: tp.loop_sizes
// CHECK: %[[I:.*]] = linalg.index 1 : index
// CHECK-NEXT: %[[GLOBAL:.*]] = arith.addi %[[I]], %[[OFFSET]] : index
// CHECK-NEXT: %[[J:.*]] = linalg.index 2 : index
// CHECK-NEXT: arith.cmpi ule, %[[J]], %[[GLOBAL]] : index
func.func @split_scan(%x: tensor<2x12xi64>) -> tensor<2x6xi64> {
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<2x6xi64>
  %z = linalg.fill ins(%c0 : i64) outs(%e : tensor<2x6xi64>) -> tensor<2x6xi64>
  %r = linalg.generic {indexing_maps = [#scan, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x12xi64>) outs(%z : tensor<2x6xi64>) attrs = {tp.loop_sizes = array<i64: 2, 12, 12>} {
  ^bb0(%in: i64, %acc: i64):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %le = arith.cmpi ule, %j, %i : index
    %t = arith.select %le, %in, %c0 : i64
    %s = arith.addi %acc, %t : i64
    linalg.yield %s : i64
  } -> tensor<2x6xi64>
  return %r : tensor<2x6xi64>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// Nothing split: the body is unchanged and the record is dropped.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @whole(
// CHECK-NOT: shard.process_multi_index
// CHECK-NOT: tp.loop_sizes
// CHECK-NOT: arith.addi
func.func @whole(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %e = tensor.empty() : tensor<4x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) attrs = {tp.loop_sizes = array<i64: 4, 4>} {
  ^bb0(%in: f32, %o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %le = arith.cmpi ule, %j, %i : index
    %c0 = arith.constant 0.0 : f32
    %t = arith.select %le, %in, %c0 : f32
    linalg.yield %t : f32
  } -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// A split that the grid does not explain is an error, not a guess.
shard.grid @grid(shape = 2)
func.func @bad_split(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %e = tensor.empty() : tensor<4x3xf32>
  // expected-error @+1 {{tp-offset-split-indices: loop 1 of size 12 is split into 3 without a 1-D tensor-parallel grid to place it}}
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x3xf32>) outs(%e : tensor<4x3xf32>) attrs = {tp.loop_sizes = array<i64: 4, 12>} {
  ^bb0(%in: f32, %o: f32):
    %j = linalg.index 1 : index
    %c = arith.index_cast %j : index to i64
    %f = arith.sitofp %c : i64 to f32
    linalg.yield %f : f32
  } -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}
