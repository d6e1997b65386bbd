// RUN: tp-translate --emit-cpp %s | FileCheck %s

// A product of a few rows (up to 128: a decode step's batch, a short encoder
// input) with a weight calls tp::rt::weightGemm, which packs the weight
// once per rank instead of letting BLAS pack it on every call; the weight
// as stored decides the transpose, a reshaped weight is still one, and an
// init the payload reads is accumulated into. More rows, or an operand that
// is not a weight, stay with cblas_sgemm.

#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#rhsT = affine_map<(m, n, k) -> (n, k)>
#out = affine_map<(m, n, k) -> (m, n)>

// CHECK-LABEL: static void fn_main(
// CHECK: // (8 x 32) * (32 x 48)
// CHECK-NEXT: tp::rt::weightGemm(context, 8, 48, 32, a0, 32, a2, 48, false, [[Y:v[0-9]+]], 48, false);
// CHECK: // (8 x 32) * (32 x 48)
// CHECK-NEXT: tp::rt::weightGemm(context, 8, 48, 32, a0, 32, a3, 32, true, [[Y]], 48, true);
// CHECK: // (8 x 32) * (32 x 48)
// CHECK-NEXT: tp::rt::weightGemm(context, 8, 48, 32, a0, 32, a5, 48, false, {{v[0-9]+}}, 48, false);
// CHECK: // (8 x 32) * (32 x 48)
// CHECK-NEXT: cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 8, 48, 32, 1.0f, a0, 32, a4, 48,
// CHECK: // (129 x 32) * (32 x 48)
// CHECK-NEXT: cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 129, 48, 32, 1.0f, a1, 32, a2, 48,
func.func @main(%x: tensor<8x32xf32> {tp.input = "x"},
                %long: tensor<129x32xf32> {tp.input = "long"},
                %w: tensor<32x48xf32> {tp.weight = "w"},
                %wt: tensor<48x32xf32> {tp.weight = "wt"},
                %notWeight: tensor<32x48xf32> {tp.input = "b"},
                %w3: tensor<32x6x8xf32> {tp.weight = "w3"})
    -> (tensor<8x48xf32> {tp.output = "y"}, tensor<8x48xf32> {tp.output = "r"},
        tensor<8x48xf32> {tp.output = "n"}, tensor<129x48xf32> {tp.output = "l"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x48xf32>) -> tensor<8x48xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<8x32xf32>, tensor<32x48xf32>) outs(%init : tensor<8x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  // Accumulated into %y: y + x * wt^T.
  %yy = linalg.generic {indexing_maps = [#lhs, #rhsT, #out],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wt : tensor<8x32xf32>, tensor<48x32xf32>) outs(%y : tensor<8x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  %w2 = tensor.collapse_shape %w3 [[0], [1, 2]] : tensor<32x6x8xf32> into tensor<32x48xf32>
  %r = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w2 : tensor<8x32xf32>, tensor<32x48xf32>) outs(%init : tensor<8x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  %n = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %notWeight : tensor<8x32xf32>, tensor<32x48xf32>) outs(%init : tensor<8x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  %lempty = tensor.empty() : tensor<129x48xf32>
  %linit = linalg.fill ins(%zero : f32) outs(%lempty : tensor<129x48xf32>) -> tensor<129x48xf32>
  %l = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%long, %w : tensor<129x32xf32>, tensor<32x48xf32>) outs(%linit : tensor<129x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<129x48xf32>
  return %yy, %r, %n, %l : tensor<8x48xf32>, tensor<8x48xf32>, tensor<8x48xf32>, tensor<129x48xf32>
}
