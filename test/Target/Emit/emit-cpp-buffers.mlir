// RUN: tp-translate --emit-cpp %s | FileCheck %s

// Buffers the C++ emitter saves (docs/design.md, "Buffers"): a reduction
// accumulates into its init's own buffer when nothing else uses it; a
// value returned once is made in the caller's result buffer; a value
// returned twice, or an init with another use, is copied.

#id = affine_map<(d0, d1) -> (d0, d1)>
#rows = affine_map<(d0, d1) -> (d0)>

// CHECK-LABEL: static void fn_main(
// The max's -inf: filled once, and the max taken in that buffer.
// CHECK: float *[[MAXINIT:v[0-9]+]] = static_cast<float *>(context->allocate(4 * sizeof(float)));
// CHECK-NEXT: std::fill_n([[MAXINIT]], 4,
// The three reductions run as one pass per row (a row group, whose
// buffers are set up before its loop).
// CHECK: 3 loop nests as one pass per row of [4] (a row group)
// CHECK: // accumulates in place into [[MAXINIT]]
// CHECK-NOT: memcpy
// The sum's zeros feed two sums: each starts from a copy, made straight
// in its result buffer.
// CHECK: float *[[S1:v[0-9]+]] = static_cast<float *>(results[1]);
// CHECK-NEXT: std::memcpy([[S1]],
// CHECK: float *[[S2:v[0-9]+]] = static_cast<float *>(results[2]);
// CHECK-NEXT: std::memcpy([[S2]],
// CHECK: float *__restrict p1 = [[MAXINIT]];
// The max is returned twice: it is copied into both slots.
// CHECK: std::memcpy(results[0], [[MAXINIT]],
// CHECK-NEXT: std::memcpy(results[3], [[MAXINIT]],
// CHECK-NOT: memcpy(results
func.func @main(%x: tensor<4x8xf32> {tp.input = "x"})
    -> (tensor<4xf32> {tp.output = "max"}, tensor<4xf32> {tp.output = "sum"},
        tensor<4xf32> {tp.output = "sum2"}, tensor<4xf32> {tp.output = "max2"}) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4xf32>
  %minit = linalg.fill ins(%ninf : f32) outs(%empty : tensor<4xf32>) -> tensor<4xf32>
  %max = linalg.generic {indexing_maps = [#id, #rows],
                         iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x8xf32>) outs(%minit : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %m = arith.maximumf %acc, %v : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  %zeros = linalg.fill ins(%zero : f32) outs(%empty : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#id, #rows],
                         iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x8xf32>) outs(%zeros : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %s = arith.addf %acc, %v : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %sum2 = linalg.generic {indexing_maps = [#id, #rows],
                          iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x8xf32>) outs(%zeros : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %p = arith.mulf %v, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %max, %sum, %sum2, %max : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
