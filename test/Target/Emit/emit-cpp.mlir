// RUN: tp-translate --emit-cpp %s | FileCheck %s

// A row-parallel projection after partition: the contraction becomes one
// product with the weight packed once (4 rows: emit-cpp-packed-weights.mlir),
// the bias add a loop nest, the partial sum an all-reduce over
// the 2-rank grid, and a one-hot lookup a single guarded iteration.

shard.grid @grid(shape = 2)

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#ids = affine_map<(d0, d1, d2) -> (d0)>
#table = affine_map<(d0, d1, d2) -> (d2, d1)>

// CHECK: #include "tp_runtime.h"
// CHECK: static void fn_main(tp::rt::RankContext *context, void *const *args, void *const *results) {
// CHECK: float *a0 = static_cast<float *>(args[0]); // input "x"
// CHECK: float *a1 = static_cast<float *>(args[1]); // weight "w"
func.func @main(%x: tensor<4x8xf32> {tp.input = "x"},
                %w: tensor<8x16xf32> {tp.weight = "w"},
                %b: tensor<16xf32> {tp.weight = "b"},
                %ids: tensor<4xi64> {tp.input = "ids"},
                %emb: tensor<10x16xf32> {tp.weight = "emb"})
    -> (tensor<4x16xf32> {tp.output = "y"}, tensor<4x16xf32> {tp.output = "e"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: tp::rt::weightGemm(context, 4, 16, 8, a0, 8, a1, 16, false, [[MM:v[0-9]+]], 16, false);
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%init : tensor<4x16xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  // CHECK: context->allReduce(tp::rt::Group{2, 1}, [[AR:v[0-9]+]], 64, tp::rt::DType::F32, tp::rt::Reduction::Sum,
  %sum = shard.all_reduce %mm on @grid grid_axes = [0] : tensor<4x16xf32> -> tensor<4x16xf32>
  // A returned value is made in the caller's result buffer.
  // CHECK: float *[[Y:v[0-9]+]] = static_cast<float *>(results[0]);
  // CHECK: float *__restrict p2 = [[Y]];
  // CHECK: for (std::int64_t [[I:i[0-9]+_0]] = 0; [[I]] < 4; ++[[I]])
  // CHECK: const float [[X:s[0-9]+]] = p0[[[I]] * 16LL + {{.*}}];
  // CHECK: const float [[B:s[0-9]+]] = p1[{{.*}}];
  // CHECK: = [[X]] + [[B]];
  %y = linalg.generic {indexing_maps = [#id, #row, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%sum, %b : tensor<4x16xf32>, tensor<16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %r = arith.addf %v, %bias : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  // The lookup's init, the fill, has another use (the GEMM's zeros): it
  // starts as a copy of it, made in results[1]; nothing is copied at the
  // return.
  // CHECK: float *[[E:v[0-9]+]] = static_cast<float *>(results[1]);
  // CHECK-NEXT: std::memcpy([[E]],
  // The lookup: no loop over the 10 table rows.
  // CHECK-NOT: < 10; ++
  // CHECK: if ([[R:i[0-9]+_2]] >= 0 && [[R]] < 10) {
  %e = linalg.generic {indexing_maps = [#ids, #table, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ids, %emb : tensor<4xi64>, tensor<10x16xf32>) outs(%init : tensor<4x16xf32>) {
  ^bb0(%id: i64, %t: f32, %acc: f32):
    %k = arith.index_cast %id : i64 to index
    %r = linalg.index 2 : index
    %eq = arith.cmpi eq, %k, %r : index
    %v = arith.select %eq, %t, %zero : f32
    %s = arith.addf %acc, %v : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  // CHECK-NOT: results[
  return %y, %e : tensor<4x16xf32>, tensor<4x16xf32>
}
// CHECK: const tp::rt::ModelEntries &tp::rt::modelEntries() {
// CHECK: static const StageEntry stages[] = {{[{][{]}}"main", fn_main}};
