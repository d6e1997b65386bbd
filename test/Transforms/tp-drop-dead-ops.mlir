// RUN: tp-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(tp-drop-dead-ops))' | FileCheck %s

// What a folded ONNX Shape leaves: a transpose (and its init) that nothing
// reads. The whole chain goes; the live matmul and the unused argument stay.
// CHECK-LABEL: func.func @dead_transpose(
// CHECK-SAME: %{{.+}}: tensor<4x8xf32>, %{{.+}}: tensor<8x16xf32>, %{{.+}}: tensor<2x2xf32>)
// CHECK-NOT: linalg.transpose
// CHECK-NOT: tensor<8x4xf32>
// CHECK: linalg.matmul
// CHECK-NEXT: return
func.func @dead_transpose(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %unused: tensor<2x2xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  %cst = arith.constant 0.000000e+00 : f32
  %i = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%cst : f32) outs(%i : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %m : tensor<4x16xf32>
}

// -----

// A dead generic goes with the constant only its body read.
// CHECK-LABEL: func.func @dead_generic(
// CHECK-NOT: linalg.generic
// CHECK-NOT: arith.constant
// CHECK: return %arg0
#id = affine_map<(d0) -> (d0)>
func.func @dead_generic(%x: tensor<4xf32>) -> tensor<4xf32> {
  %two = arith.constant 2.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %x : tensor<4xf32>
}
