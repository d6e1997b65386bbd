// RUN: tp-translate --emit-cpp %s | FileCheck %s
// RUN: %PYTHON %S/Inputs/neg_chain.py 200 | tp-translate --emit-cpp | FileCheck %s --check-prefix=CHAIN

// Elementwise chains become one loop nest each (FuseElementwise.cpp): the
// bias add, tanh and scale below are one nest; a value with two users is
// computed once, in its own nest. The three nests share their rows, so
// they run as one pass per row (a row group, EmitRowGroups.cpp), each
// nest's inner loop of its own inside it.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>

// CHECK-LABEL: static void fn_main(
// CHECK: 3 loop nests as one pass per row of [4] (a row group)
// Both results are made in the caller's buffers: nothing copied at the end.
// CHECK: static_cast<float *>(results[0]);
// CHECK: static_cast<float *>(results[1]);
// CHECK: TP_LOOP_NEST {
// CHECK-NEXT: for (std::int64_t [[ROW:r[0-9]+_0]] = 0; [[ROW]] < 4; ++[[ROW]])
// The shared value `%t` first, on its own.
// CHECK: { // emit-cpp-fusion.mlir:
// CHECK-NEXT: const float *p0 = a0;
// CHECK-NEXT: float *__restrict p1 = [[T:v[0-9]+]];
// CHECK-NEXT: for (std::int64_t {{i[0-9]+_1}} = 0; {{i[0-9]+_1}} < 16;
// CHECK: = tanhF(
// Then each user of it, with the add and the scale fused.
// CHECK: { // emit-cpp-fusion.mlir:
// CHECK-NEXT: const float *p0 = [[T]];
// CHECK: = {{s[0-9]+}} + {{s[0-9]+}};
// CHECK-NEXT: = {{v[0-9]+}} * {{v[0-9]+}};
// CHECK: { // emit-cpp-fusion.mlir:
// CHECK-NEXT: const float *p0 = [[T]];
// CHECK: = -{{s[0-9]+}};
// CHECK: }();
// CHECK-NOT: TP_LOOP_NEST
// CHECK-NOT: memcpy(results
func.func @main(%x: tensor<4x16xf32> {tp.input = "x"},
                %b: tensor<16xf32> {tp.weight = "b"})
    -> (tensor<4x16xf32> {tp.output = "y"}, tensor<4x16xf32> {tp.output = "z"}) {
  %two = arith.constant 2.0 : f32
  %empty = tensor.empty() : tensor<4x16xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = math.tanh %v : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %a = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t, %b : tensor<4x16xf32>, tensor<16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %r = arith.addf %v, %bias : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.mulf %v, %two : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %z = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : tensor<4x16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.negf %v : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %y, %z : tensor<4x16xf32>, tensor<4x16xf32>
}

// A chain of 200 negations is not one nest (its body would grow with the
// chain) but a few of at most 64 payload ops: 200 / 63 rounds up to 4.
// CHAIN-COUNT-4: TP_LOOP_NEST {
// CHAIN-NOT: TP_LOOP_NEST {
