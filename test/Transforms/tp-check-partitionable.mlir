// RUN: tp-opt %s -split-input-file -verify-diagnostics --tp-check-partitionable | FileCheck %s

// Fully annotated, as sharding-propagation leaves a function: no diagnostic,
// no change.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @annotated(
// CHECK: linalg.matmul
func.func @annotated(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %a = shard.shard %arg0 to %s annotate_for_users : tensor<4x8xf32>
  %b = shard.shard %arg1 to %s annotate_for_users : tensor<8x16xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %es = shard.shard %e to %s : tensor<4x16xf32>
  %ei = shard.shard %es to %s annotate_for_users : tensor<4x16xf32>
  %f = linalg.fill ins(%cst : f32) outs(%ei : tensor<4x16xf32>) -> tensor<4x16xf32>
  %fs = shard.shard %f to %s : tensor<4x16xf32>
  %fi = shard.shard %fs to %s annotate_for_users : tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%fi : tensor<4x16xf32>) -> tensor<4x16xf32>
  %ms = shard.shard %m to %s : tensor<4x16xf32>
  %mi = shard.shard %ms to %s annotate_for_users : tensor<4x16xf32>
  return %mi : tensor<4x16xf32>
}

// -----

shard.grid @grid(shape = 2)
// expected-error @below {{cannot partition: argument 1 must be read by exactly one shard.shard}}
func.func @negative_argument_not_annotated(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %a = shard.shard %arg0 to %s annotate_for_users : tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.add ins(%a, %arg1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// The init of the add is the result annotation of tensor.empty, not an
// annotate_for_users shard.shard.
shard.grid @grid(shape = 2)
func.func @negative_operand_not_annotated(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %a = shard.shard %arg0 to %s annotate_for_users : tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %es = shard.shard %e to %s : tensor<4x8xf32>
  // expected-error @below {{cannot partition: tensor operand 2 has no sharding (no annotate_for_users shard.shard)}}
  %r = linalg.add ins(%a, %a : tensor<4x8xf32>, tensor<4x8xf32>) outs(%es : tensor<4x8xf32>) -> tensor<4x8xf32>
  %rs = shard.shard %r to %s : tensor<4x8xf32>
  %ri = shard.shard %rs to %s annotate_for_users : tensor<4x8xf32>
  return %ri : tensor<4x8xf32>
}

// -----

shard.grid @grid(shape = 2)
func.func @negative_result_two_uses(%arg0: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %a = shard.shard %arg0 to %s annotate_for_users : tensor<4x8xf32>
  // expected-error @below {{cannot partition: result 0 has 2 uses; expected one shard.shard}}
  %e = tensor.empty() : tensor<4x8xf32>
  %es = shard.shard %e to %s : tensor<4x8xf32>
  %ei = shard.shard %es to %s annotate_for_users : tensor<4x8xf32>
  return %ei, %e : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

shard.grid @grid(shape = 2)
func.func @negative_result_not_annotated(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %a = shard.shard %arg0 to %s annotate_for_users : tensor<4x8xf32>
  // expected-error @below {{cannot partition: result 0 has no sharding (no shard.shard)}}
  %e = tensor.empty() : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
}

// -----

// A lookup whose vocabulary (reduction) loop is split, with a body that
// reads a constant from outside, as --canonicalize leaves it: partition
// would rebuild the body with the constant of the erased block.
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
shard.grid @grid(shape = 2)
func.func @negative_split_reduction_reads_outside(%arg0: tensor<3xi64>, %arg1: tensor<8x4xf32>, %arg2: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-note @below {{value defined here}}
  %zero = arith.constant 0.000000e+00 : f32
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %v = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %ids = shard.shard %arg0 to %r annotate_for_users : tensor<3xi64>
  %table = shard.shard %arg1 to %v annotate_for_users : tensor<8x4xf32>
  %init = shard.shard %arg2 to %r annotate_for_users : tensor<3x4xf32>
  // expected-error @below {{cannot partition: the body of this split reduction reads a value defined outside it}}
  %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<8x4xf32>) outs(%init : tensor<3x4xf32>) {
  ^bb0(%id: i64, %row: f32, %acc: f32):
    %i = arith.index_cast %id : i64 to index
    %l = linalg.index 2 : index
    %hit = arith.cmpi eq, %i, %l : index
    %t = arith.select %hit, %row, %zero : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<3x4xf32>
  %rs = shard.shard %0 to %r : tensor<3x4xf32>
  %ri = shard.shard %rs to %r annotate_for_users : tensor<3x4xf32>
  return %ri : tensor<3x4xf32>
}

// -----

// The same body on a replicated table is fine: partition copies the op
// through its whole-function mapping.
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @replicated_reduction_reads_outside(
func.func @replicated_reduction_reads_outside(%arg0: tensor<3xi64>, %arg1: tensor<8x4xf32>, %arg2: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %ids = shard.shard %arg0 to %r annotate_for_users : tensor<3xi64>
  %table = shard.shard %arg1 to %r annotate_for_users : tensor<8x4xf32>
  %init = shard.shard %arg2 to %r annotate_for_users : tensor<3x4xf32>
  %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<8x4xf32>) outs(%init : tensor<3x4xf32>) {
  ^bb0(%id: i64, %row: f32, %acc: f32):
    %i = arith.index_cast %id : i64 to index
    %l = linalg.index 2 : index
    %hit = arith.cmpi eq, %i, %l : index
    %t = arith.select %hit, %row, %zero : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<3x4xf32>
  %rs = shard.shard %0 to %r : tensor<3x4xf32>
  %ri = shard.shard %rs to %r annotate_for_users : tensor<3x4xf32>
  return %ri : tensor<3x4xf32>
}
