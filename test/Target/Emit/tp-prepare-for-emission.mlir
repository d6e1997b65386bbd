// RUN: tp-opt --tp-prepare-for-emission %s | FileCheck %s
// RUN: tp-opt --tp-fuse-elementwise %s | FileCheck %s --check-prefix=FUSE

// What both emitters run before printing. Named ops but fills become the
// generics they compute; an elementwise producer with one user fuses into
// it, unless that user is a product (BLAS would lose it), and the chain's
// scalar ops stay as they were, in order.

#id = affine_map<(i, j) -> (i, j)>
// CHECK-LABEL: func.func @main
// CHECK-NOT: linalg.matmul
// CHECK-NOT: linalg.transpose
// The product: the scale before it is not fused into it.
// CHECK: %[[SCALED:.*]] = linalg.generic {{.*}} {tp.kernel = #tp.kernel<loop_nest>}
// CHECK: arith.mulf
// CHECK: linalg.fill
// CHECK: %[[PRODUCT:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[SCALED]], %arg1 {{.*}} {tp.kernel = #tp.kernel<gemm>}
// The bias, the tanh and the transpose after the product: one nest, which
// writes the transposed result.
// CHECK: %[[T:.*]] = linalg.generic {{.*}} ins(%[[PRODUCT]], %arg2 : tensor<4x16xf32>, tensor<4x16xf32>) outs(%{{.*}} : tensor<16x4xf32>) attrs = {tp.kernel = #tp.kernel<loop_nest>}
// CHECK: arith.addf
// CHECK-NEXT: math.tanh
// CHECK: return %[[T]]

// tp-fuse-elementwise alone leaves named ops as they are.
// FUSE-NOT: tp.kernel
// FUSE-LABEL: func.func @main
// FUSE: linalg.matmul
// FUSE: linalg.generic
// FUSE: arith.addf
// FUSE-NEXT: math.tanh
// FUSE: linalg.transpose
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<4x16xf32>) -> tensor<16x4xf32> {
  %c = arith.constant 0.5 : f32
  %zero = arith.constant 0.0 : f32
  %ex = tensor.empty() : tensor<4x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%ex : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %c : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = linalg.matmul ins(%scaled, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %biased = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p, %b : tensor<4x16xf32>, tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%a: f32, %d: f32, %o: f32):
    %r = arith.addf %a, %d : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%biased : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %et = tensor.empty() : tensor<16x4xf32>
  %tr = linalg.transpose ins(%t : tensor<4x16xf32>) outs(%et : tensor<16x4xf32>) permutation = [1, 0]
  return %tr : tensor<16x4xf32>
}
