// RUN: tp-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(tp-unshare-values))' | FileCheck %s

// An embedding lookup after --canonicalize: its body reads constants that
// were hoisted to the function entry. They are copied back into the body.
// CHECK-LABEL: func.func @hoisted_constants(
// CHECK: linalg.generic
// CHECK-NEXT: ^bb0(
// CHECK-DAG: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[ROWS:.+]] = arith.constant 8 : index
// CHECK: arith.addi %{{.+}}, %[[ROWS]] : index
// CHECK: arith.select %{{.+}}, %{{.+}}, %[[ZERO]] : f32
// CHECK: linalg.yield
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @hoisted_constants(%ids: tensor<3xi64>, %table: tensor<8x4xf32>, %init: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.000000e+00 : f32
  %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<8x4xf32>) outs(%init : tensor<3x4xf32>) attrs = {tp.embedding = 8 : i64} {
  ^bb0(%id: i64, %row: f32, %acc: f32):
    %i = arith.index_cast %id : i64 to index
    %w = arith.addi %i, %c8 : index
    %v = linalg.index 2 : index
    %hit = arith.cmpi eq, %w, %v : index
    %t = arith.select %hit, %row, %zero : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// After --cse two matmuls share one zero-filled init: each gets its own
// fill and its own empty.
// CHECK-LABEL: func.func @shared_inits(
// CHECK: %[[E0:.+]] = tensor.empty() : tensor<4x4xf32>
// CHECK: %[[F0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E0]] : tensor<4x4xf32>)
// CHECK: %[[M0:.+]] = linalg.matmul ins(%arg0, %arg1 : {{.*}}) outs(%[[F0]] : tensor<4x4xf32>)
// CHECK: %[[E1:.+]] = tensor.empty() : tensor<4x4xf32>
// CHECK: %[[F1:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E1]] : tensor<4x4xf32>)
// CHECK: linalg.matmul ins(%[[M0]], %arg2 : {{.*}}) outs(%[[F1]] : tensor<4x4xf32>)
func.func @shared_inits(%x: tensor<4x4xf32>, %w1: tensor<4x4xf32>, %w2: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m0 = linalg.matmul ins(%x, %w1 : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m1 = linalg.matmul ins(%m0, %w2 : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %m1 : tensor<4x4xf32>
}

// -----

// A tensor constant a body reads is left where it is (a copy per body could
// be large); tp-check-partitionable reports it if partition would lose it.
// CHECK-LABEL: func.func @tensor_constant(
// CHECK: %[[T:.+]] = arith.constant dense<{{.*}}> : tensor<2xf32>
// CHECK: linalg.generic
// CHECK-NOT: arith.constant dense
// CHECK: tensor.extract %[[T]]
#id = affine_map<(d0) -> (d0)>
func.func @tensor_constant(%x: tensor<2xindex>) -> tensor<2xf32> {
  %t = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %e = tensor.empty() : tensor<2xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%x : tensor<2xindex>) outs(%e : tensor<2xf32>) {
  ^bb0(%in: index, %out: f32):
    %v = tensor.extract %t[%in] : tensor<2xf32>
    linalg.yield %v : f32
  } -> tensor<2xf32>
  return %g : tensor<2xf32>
}

// -----

#xt = affine_map<(i, j, k) -> (i, k)>
#yt = affine_map<(i, j, k) -> (j, k)>
#out = affine_map<(i, j, k) -> (i, j)>

// X · Xᵀ reads one tensor through two operands with different maps: the
// second reads an identity copy, so that propagation can give the two their
// own shardings (found by fuzzing: partition built an op whose shapes
// disagreed). Operands with the same map stay shared.
// CHECK-LABEL: func.func @gram
// CHECK: %[[COPY:.+]] = linalg.generic {{.*}} ins(%[[X:[^ ]+]] : tensor<8x24xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.+]]: f32, %{{.*}}: f32):
// CHECK-NEXT: linalg.yield %[[IN]] : f32
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[COPY]] : tensor<8x24xf32>, tensor<8x24xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[G:[^,]+]], %[[G]] : tensor<8x8xf32>, tensor<8x8xf32>)
func.func @gram(%x: tensor<8x24xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %g = linalg.generic {indexing_maps = [#xt, #yt, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %x : tensor<8x24xf32>, tensor<8x24xf32>) outs(%z : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x8xf32>
  %e2 = tensor.empty() : tensor<8x8xf32>
  %sq = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%g, %g : tensor<8x8xf32>, tensor<8x8xf32>) outs(%e2 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<8x8xf32>
  return %sq : tensor<8x8xf32>
}
