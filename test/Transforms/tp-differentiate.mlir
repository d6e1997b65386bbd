// RUN: tp-opt %s --tp-differentiate | FileCheck %s
// RUN: tp-opt %s --tp-differentiate=freeze=^b$ | FileCheck %s --check-prefix=FROZEN
// RUN: tp-opt %s --tp-differentiate=scaled-loss=true | FileCheck %s --check-prefix=SCALED

// loss = sum((x w + b)^2). The gradients are appended in argument order and
// named grad.<weight>: d/db sums dy over the tokens (a generic whose
// parallel loop is b's, the others reduced), d/dw contracts x with dy over
// the tokens (w's loops first, then the tokens'). Each reads only what its
// derivative needs: d/db dy alone, d/dw x and dy, not w. The input x gets
// none. Every op built carries tp.backward.
#x = affine_map<(m, n, k) -> (m, k)>
#w = affine_map<(m, n, k) -> (k, n)>
#y = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
#col = affine_map<(m, n) -> (n)>
#all = affine_map<(m, n) -> ()>
// CHECK-LABEL: func.func @main(
// CHECK-SAME: -> (tensor<f32> {tp.output = "loss"}, tensor<3x2xf32> {tp.output = "grad.w"}, tensor<2xf32> {tp.output = "grad.b"})
// The square's gradient: 2 * y * dy, elementwise (no init read).
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: math.powf
// CHECK: arith.mulf
// The bias: summed over the tokens.
// CHECK: %[[DB:.*]] = linalg.generic {indexing_maps = [#{{.*}}, #[[COL:.*]]], iterator_types = ["parallel", "reduction"]}
// CHECK: arith.addf %out
// The weight: dW[k, n] = sum_m x[m, k] dy[m, n].
// CHECK: %[[DW:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %{{.*}} : tensor<4x3xf32>, tensor<4x2xf32>) outs(%{{.*}} : tensor<3x2xf32>)
// CHECK: return %{{.*}}, %[[DW]], %[[DB]]
// FROZEN-LABEL: func.func @main(
// FROZEN-SAME: -> (tensor<f32> {tp.output = "loss"}, tensor<3x2xf32> {tp.output = "grad.w"})
// Dynamic loss scaling: the backward starts from a new input, loss_scale,
// broadcast to the loss's shape, instead of a fill of 1.
// SCALED-LABEL: func.func @main(
// SCALED-SAME: %[[SCALE:[^:]*]]: tensor<f32> {tp.input = "loss_scale"})
// SCALED-NOT: arith.constant 1.0
// SCALED: linalg.generic {{.*}} ins(%[[SCALE]] : tensor<f32>) outs(%{{.*}} : tensor<f32>) attrs = {tp.backward}
func.func @main(%x: tensor<4x3xf32> {tp.input = "x"}, %w: tensor<3x2xf32> {tp.weight = "w"}, %b: tensor<2xf32> {tp.weight = "b"}) -> (tensor<f32> {tp.output = "loss"}) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4x2xf32>
  %f0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<4x2xf32>) -> tensor<4x2xf32>
  %p = linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x3xf32>, tensor<3x2xf32>) outs(%f0 : tensor<4x2xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x2xf32>
  %e1 = tensor.empty() : tensor<4x2xf32>
  %q = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%p, %b : tensor<4x2xf32>, tensor<2xf32>) outs(%e1 : tensor<4x2xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<4x2xf32>
  %e2 = tensor.empty() : tensor<4x2xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%q : tensor<4x2xf32>) outs(%e2 : tensor<4x2xf32>) {
  ^bb0(%a: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %s = math.powf %a, %two : f32
    linalg.yield %s : f32
  } -> tensor<4x2xf32>
  %e3 = tensor.empty() : tensor<f32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<f32>) -> tensor<f32>
  %l = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%r : tensor<4x2xf32>) outs(%f3 : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %o, %a : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %l : tensor<f32>
}
