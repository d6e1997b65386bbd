// RUN: tp-translate --emit-cpp %s -split-input-file | FileCheck %s

// An elementwise op that is the only reader of a packed product (here a
// bias add and tanh, through a reshape of the product's rows) runs as the
// kernel's epilogue: a lambda over a block of the product's columns, every
// row, that tp::rt::weightGemm calls as each block is final. Its result is
// allocated before the product; the op itself emits nothing where it stood.

#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
#id3 = affine_map<(b, s, n) -> (b, s, n)>
#col3 = affine_map<(b, s, n) -> (n)>

// CHECK-LABEL: static void fn_main(
// CHECK: float *[[P:v[0-9]+]] = static_cast<float *>(context->allocate(384 * sizeof(float)));
// CHECK-NEXT: float *[[R:v[0-9]+]] = static_cast<float *>(results[0]);
// CHECK-NEXT: // (8 x 32) * (32 x 48)
// CHECK-NEXT: // {{.*}}, on each block of the product's columns as it is final
// CHECK-NEXT: auto [[E:epilogue_v[0-9]+]] = [&](std::int64_t first, std::int64_t count) __attribute__((noinline)) {
// CHECK-NEXT: const float *p0 = [[P]];
// CHECK-NEXT: const float *p1 = a2;
// CHECK-NEXT: float *__restrict p2 = [[R]];
// CHECK-NEXT: for (std::int64_t [[B:i[0-9]+_0]] = 0; [[B]] < 2; ++[[B]])
// CHECK-NEXT: for (std::int64_t [[S:i[0-9]+_1]] = 0; [[S]] < 4; ++[[S]])
// CHECK-NEXT: for (std::int64_t [[N:i[0-9]+_2]] = first; [[N]] < first + count; ++[[N]])
// CHECK: tanhF(
// CHECK: };
// CHECK-NEXT: tp::rt::weightGemm(context, 8, 48, 32, a0, 32, a1{{.*}}, 48, false, [[P]], 48, false, tp::rt::Epilogue::of([[E]]));
// CHECK: // computed in the epilogue of the product above
// CHECK-NOT: TP_LOOP_NEST
// CHECK-LABEL: tp::rt::modelEntries()
func.func @main(%x: tensor<8x32xf32> {tp.input = "x"},
                %w: tensor<32x48xf32> {tp.weight = "w"},
                %bias: tensor<48xf32> {tp.weight = "b"})
    -> (tensor<2x4x48xf32> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x48xf32>) -> tensor<8x48xf32>
  %p = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<8x32xf32>, tensor<32x48xf32>) outs(%init : tensor<8x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  %p3 = tensor.expand_shape %p [[0, 1], [2]] output_shape [2, 4, 48] : tensor<8x48xf32> into tensor<2x4x48xf32>
  %e3 = tensor.empty() : tensor<2x4x48xf32>
  %y = linalg.generic {indexing_maps = [#id3, #col3, #id3],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p3, %bias : tensor<2x4x48xf32>, tensor<48xf32>) outs(%e3 : tensor<2x4x48xf32>) {
  ^bb0(%v: f32, %b: f32, %o: f32):
    %a = arith.addf %v, %b : f32
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  } -> tensor<2x4x48xf32>
  return %y : tensor<2x4x48xf32>
}

// -----

// The op also reads a value computed after the product (%x2, which has
// another reader, so elementwise fusion keeps it): it stays where it is, a
// loop nest of its own.
// CHECK-LABEL: static void fn_main(
// CHECK: tp::rt::weightGemm(context, 8, 48, 32, a0, 32, a1{{.*}}, 48, false, {{v[0-9]+}}, 48, false);
// CHECK: TP_LOOP_NEST {
// CHECK-NOT: Epilogue
// CHECK-LABEL: tp::rt::modelEntries()
#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
func.func @main(%x: tensor<8x32xf32> {tp.input = "x"},
                %w: tensor<32x48xf32> {tp.weight = "w"},
                %r: tensor<8x48xf32> {tp.input = "r"})
    -> (tensor<8x48xf32> {tp.output = "y"}, tensor<8x48xf32> {tp.output = "x2"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x48xf32>) -> tensor<8x48xf32>
  %p = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<8x32xf32>, tensor<32x48xf32>) outs(%init : tensor<8x48xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  %e1 = tensor.empty() : tensor<8x48xf32>
  %x2 = linalg.generic {indexing_maps = [#id, #id],
                        iterator_types = ["parallel", "parallel"]}
      ins(%r : tensor<8x48xf32>) outs(%e1 : tensor<8x48xf32>) {
  ^bb0(%v: f32, %o: f32):
    %d = arith.addf %v, %v : f32
    linalg.yield %d : f32
  } -> tensor<8x48xf32>
  %e2 = tensor.empty() : tensor<8x48xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%p, %x2 : tensor<8x48xf32>, tensor<8x48xf32>) outs(%e2 : tensor<8x48xf32>) {
  ^bb0(%v: f32, %u: f32, %o: f32):
    %a = arith.addf %v, %u : f32
    linalg.yield %a : f32
  } -> tensor<8x48xf32>
  return %y, %x2 : tensor<8x48xf32>, tensor<8x48xf32>
}
