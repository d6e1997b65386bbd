// RUN: tp-translate --emit-cpp %s | FileCheck %s

// Loop nests over the same rows run as one pass per row (EmitRowGroups.cpp):
// an RMS norm's statistic and normalisation (elementwise fusion has put
// the square root into the last nest), across the reshape between them,
// are one loop over the 2 x 4 rows with each nest's loop over the 8
// features inside; the buffers are set up before it and freed after it.

#x3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#rows3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#stat3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#feat3 = affine_map<(d0, d1, d2) -> (d2)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#tr2 = affine_map<(d0, d1) -> (d1, d0)>

// CHECK-LABEL: static void fn_norm(tp::rt::RankContext *context
// CHECK: std::fill_n([[SUM:v[0-9]+]], 8,
// CHECK-NEXT: // 2 loop nests as one pass per row of [2, 4] (a row group)
// CHECK: // accumulates in place into [[SUM]]
// CHECK: float *[[Y:v[0-9]+]] = static_cast<float *>(results[0]);
// CHECK-NEXT: TP_LOOP_NEST {
// CHECK-NEXT: for (std::int64_t [[B:r[0-9]+_0]] = 0; [[B]] < 2; ++[[B]])
// CHECK-NEXT: for (std::int64_t [[T:r[0-9]+_1]] = 0; [[T]] < 4; ++[[T]])
// CHECK-NEXT: {
// The sum of the row's squares, in its init's buffer...
// CHECK-NEXT: { // emit-cpp-row-groups.mlir:
// CHECK: for (std::int64_t [[F:i[0-9]+_2]] = 0; [[F]] < 8; ++[[F]])
// CHECK: p0[[[B]] * 32LL + [[T]] * 8LL + [[F]]];
// CHECK: p1[[[B]] * 4LL + [[T]]] =
// ...read through the reshape to [2, 4, 1] by the scaling of the row.
// CHECK: { // emit-cpp-row-groups.mlir:
// CHECK: const float *p1 = [[SUM]];
// CHECK: float *__restrict p3 = [[Y]];
// CHECK: for (std::int64_t [[G:i[0-9]+_2]] = 0; [[G]] < 8; ++[[G]])
// CHECK: = p1[[[B]] * 4LL + [[T]]];
// CHECK: std::sqrt(
// CHECK: }();
// CHECK-NEXT: context->release([[SUM]],
// CHECK-NEXT: }
func.func @norm(%x: tensor<2x4x8xf32> {tp.input = "x"},
                %w: tensor<8xf32> {tp.weight = "w"})
    -> (tensor<2x4x8xf32> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  %e2 = tensor.empty() : tensor<2x4xf32>
  %zeros = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x4xf32>) -> tensor<2x4xf32>
  %ss = linalg.generic {indexing_maps = [#x3, #rows3],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x4x8xf32>) outs(%zeros : tensor<2x4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %p = arith.mulf %v, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x4xf32>
  %ss3 = tensor.expand_shape %ss [[0], [1, 2]] output_shape [2, 4, 1]
      : tensor<2x4xf32> into tensor<2x4x1xf32>
  %e3 = tensor.empty() : tensor<2x4x1xf32>
  %r = linalg.generic {indexing_maps = [#x3, #x3],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ss3 : tensor<2x4x1xf32>) outs(%e3 : tensor<2x4x1xf32>) {
  ^bb0(%v: f32, %o: f32):
    %a = arith.addf %v, %eps : f32
    %q = math.sqrt %a : f32
    linalg.yield %q : f32
  } -> tensor<2x4x1xf32>
  %ey = tensor.empty() : tensor<2x4x8xf32>
  %y = linalg.generic {indexing_maps = [#x3, #stat3, #feat3, #x3],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %r, %w : tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<8xf32>)
      outs(%ey : tensor<2x4x8xf32>) {
  ^bb0(%v: f32, %s: f32, %g: f32, %o: f32):
    %d = arith.divf %v, %s : f32
    %m = arith.mulf %d, %g : f32
    linalg.yield %m : f32
  } -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// A nest that reads another's result at other rows (here transposed) runs
// after all of it: two loop nests, no group.
// CHECK-LABEL: static void fn_transposed(tp::rt::RankContext *context
// CHECK-NOT: row group
// CHECK: TP_LOOP_NEST {
// CHECK: }();
// CHECK: TP_LOOP_NEST {
// CHECK: }();
func.func @transposed(%x: tensor<8x8xf32> {tp.input = "x"})
    -> (tensor<8x8xf32> {tp.output = "y"}) {
  %e = tensor.empty() : tensor<8x8xf32>
  %n = linalg.generic {indexing_maps = [#id2, #id2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.negf %v : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %y = linalg.generic {indexing_maps = [#tr2, #id2, #id2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%n, %n : tensor<8x8xf32>, tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}
