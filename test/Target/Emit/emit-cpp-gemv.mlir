// RUN: tp-translate --emit-cpp %s | FileCheck %s

// A contraction with one row (a decode step's projection of one token) or
// one column is a matrix-vector product: cblas_sgemv, since sgemm would
// pack the whole weight on every call. The weight as stored decides the
// transpose: [K, N] is read transposed, [N, K] (a Linear's) as it is.

#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#rhsT = affine_map<(m, n, k) -> (n, k)>
#out = affine_map<(m, n, k) -> (m, n)>

// CHECK-LABEL: static void fn_main(
// CHECK: cblas_sgemv(CblasRowMajor, CblasTrans, 8, 16, 1.0f, a1, 16, a0, 1, 0.0f, v{{[0-9]+}}, 1);
// CHECK: cblas_sgemv(CblasRowMajor, CblasNoTrans, 16, 8, 1.0f, a2, 8, a0, 1, 0.0f, v{{[0-9]+}}, 1);
func.func @main(%x: tensor<1x8xf32> {tp.input = "x"},
                %w: tensor<8x16xf32> {tp.weight = "w"},
                %wt: tensor<16x8xf32> {tp.weight = "wt"})
    -> (tensor<1x16xf32> {tp.output = "y"}, tensor<1x16xf32> {tp.output = "z"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x16xf32>) -> tensor<1x16xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<1x8xf32>, tensor<8x16xf32>) outs(%init : tensor<1x16xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<1x16xf32>
  %z = linalg.generic {indexing_maps = [#lhs, #rhsT, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wt : tensor<1x8xf32>, tensor<16x8xf32>) outs(%init : tensor<1x16xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<1x16xf32>
  return %y, %z : tensor<1x16xf32>, tensor<1x16xf32>
}
