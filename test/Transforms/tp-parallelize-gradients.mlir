// RUN: tp-opt %s --tp-differentiate --tp-parallelize=devices=2 | FileCheck %s
// RUN: tp-opt %s --tp-differentiate --tp-parallelize=devices=2 | grep -c shard.all_reduce | FileCheck %s --check-prefix=TWO
// RUN: tp-opt %s --tp-parallelize="devices=2 gradients=true" | FileCheck %s
// RUN: tp-opt %s --tp-parallelize="devices=2 gradients=true" --tp-explain -o /dev/null | FileCheck %s --check-prefix=EXPLAIN

// The forward and its backward planned together (Megatron's f/g pair):
// w1 column-parallel, w2 row-parallel, as in inference; the backward reads
// them split. One all-reduce ends the forward block (the row-parallel
// product), one the backward (the input gradient of the column-parallel
// product, which reduces over the split columns). The gradients of w1 and
// w2 come out split as their weights are; they are gathered only because
// they are outputs.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: tensor<8x8xf32> {tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tensor<8x8xf32> {tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK: shard.all_reduce {{.*}} : tensor<4x8xf32>
// CHECK: shard.all_gather {{.*}} gather_axis = 0 : tensor<8x8xf32> -> tensor<16x8xf32>
// CHECK: shard.all_reduce {{.*}} : tensor<4x8xf32>
// CHECK: shard.all_gather {{.*}} gather_axis = 1 : tensor<8x8xf32> -> tensor<8x16xf32>
// TWO: 2
// Each rank holds the gradients of its part of the weights (g whole, 32 B;
// w1 and w2 halves, 256 B each) and the forward values the backward reads:
// the scaled input, the hidden pre- and post-ReLU, the output and the
// loss's seed.
// EXPLAIN: per device: weights 544 B (whole model 1056 B)
// EXPLAIN: training per device: gradients 544 B (of the weights above), optimizer states 0 B, stash {{[0-9]+}} B ({{[0-9]+}} forward values the backward reads)

#id = affine_map<(m, n) -> (m, n)>
#col = affine_map<(m, n) -> (n)>
#all = affine_map<(m, n) -> ()>
func.func @main(%x: tensor<4x8xf32> {tp.input = "x"}, %g: tensor<8xf32> {tp.weight = "g"}, %w1: tensor<8x16xf32> {tp.weight = "w1"}, %w2: tensor<16x8xf32> {tp.weight = "w2"}) -> (tensor<f32> {tp.output = "loss"}) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4x8xf32>
  %n = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %g : tensor<4x8xf32>, tensor<8xf32>) outs(%e0 : tensor<4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.mulf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %e1 = tensor.empty() : tensor<4x16xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = linalg.matmul ins(%n, %w1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%h : tensor<4x16xf32>) outs(%e2 : tensor<4x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.maximumf %a, %zero : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %e3 = tensor.empty() : tensor<4x8xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = linalg.matmul ins(%r, %w2 : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f3 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %e4 = tensor.empty() : tensor<f32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<f32>) -> tensor<f32>
  %l = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%y : tensor<4x8xf32>) outs(%f4 : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %sq = arith.mulf %a, %a : f32
    %s = arith.addf %o, %sq : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %l : tensor<f32>
}
