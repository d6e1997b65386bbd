// RUN: tp-translate --emit-cpp %s | FileCheck %s

// A weight that only products read, all in one layout the packed kernel
// takes, with columns filling whole panels (a multiple of 32), is packed
// into its own memory on first use: every product with it, of any number of
// rows (one: no sgemv; 200: no sgemm), calls tp::rt::residentWeightGemm,
// across functions (a generation artifact's prefill and decode steps share
// weights by name). A weight also read another way (here gathered, as a
// tied embedding is) or in two layouts keeps its stored layout:
// weightGemm for a few rows, BLAS for more.

#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#rhsT = affine_map<(m, n, k) -> (n, k)>
#out = affine_map<(m, n, k) -> (m, n)>

// CHECK-LABEL: static void fn_decode(tp::rt::RankContext *context
// CHECK: // (1 x 32) * (32 x 64)
// CHECK-NEXT: tp::rt::residentWeightGemm(context, 1, 64, 32, a0, 32, a1, 64, false, {{v[0-9]+}}, 64, false);
// CHECK: // (8 x 32) * (32 x 64)
// CHECK-NEXT: tp::rt::residentWeightGemm(context, 8, 64, 32, a2, 32, a3, 32, true, {{v[0-9]+}}, 64, false);
// CHECK: // (8 x 32) * (32 x 64)
// CHECK-NEXT: tp::rt::weightGemm(context, 8, 64, 32, a2, 32, a4, 64, false, {{v[0-9]+}}, 64, false);
// CHECK-LABEL: static void fn_prefill(tp::rt::RankContext *context
// CHECK: // (200 x 32) * (32 x 64)
// CHECK-NEXT: tp::rt::residentWeightGemm(context, 200, 64, 32, [[LONG:a[0-9]+]], 32, {{a[0-9]+}}, 64, false, {{v[0-9]+}}, 64, false);
// CHECK: // (200 x 32) * (32 x 64)
// CHECK-NEXT: cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 200, 64, 32, 1.0f, [[LONG]], 32, {{a[0-9]+}}, 64,
func.func @decode(%one: tensor<1x32xf32> {tp.input = "one"},
                  %w: tensor<32x64xf32> {tp.weight = "w"},
                  %x: tensor<8x32xf32> {tp.input = "x"},
                  %wt: tensor<64x32xf32> {tp.weight = "wt"},
                  %tied: tensor<32x64xf32> {tp.weight = "tied"})
    -> (tensor<1x64xf32> {tp.output = "a"}, tensor<8x64xf32> {tp.output = "b"},
        tensor<8x64xf32> {tp.output = "c"}, tensor<64xf32> {tp.output = "d"}) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<1x64xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x64xf32>) -> tensor<1x64xf32>
  %a = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%one, %w : tensor<1x32xf32>, tensor<32x64xf32>) outs(%i1 : tensor<1x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x64xf32>
  %e8 = tensor.empty() : tensor<8x64xf32>
  %i8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8x64xf32>) -> tensor<8x64xf32>
  %b = linalg.generic {indexing_maps = [#lhs, #rhsT, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wt : tensor<8x32xf32>, tensor<64x32xf32>) outs(%i8 : tensor<8x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x64xf32>
  %c = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %tied : tensor<8x32xf32>, tensor<32x64xf32>) outs(%i8 : tensor<8x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x64xf32>
  // The same weight read another way: a row of it, as an embedding's gather.
  %row = tensor.extract_slice %tied[3, 0] [1, 64] [1, 1] : tensor<32x64xf32> to tensor<64xf32>
  return %a, %b, %c, %row : tensor<1x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<64xf32>
}
func.func @prefill(%long: tensor<200x32xf32> {tp.input = "long"},
                   %w: tensor<32x64xf32> {tp.weight = "w"},
                   %tied: tensor<32x64xf32> {tp.weight = "tied"})
    -> (tensor<200x64xf32> {tp.output = "l"}, tensor<200x64xf32> {tp.output = "t"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<200x64xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<200x64xf32>) -> tensor<200x64xf32>
  %l = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%long, %w : tensor<200x32xf32>, tensor<32x64xf32>) outs(%i : tensor<200x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<200x64xf32>
  %t = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%long, %tied : tensor<200x32xf32>, tensor<32x64xf32>) outs(%i : tensor<200x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<200x64xf32>
  return %l, %t : tensor<200x64xf32>, tensor<200x64xf32>
}
