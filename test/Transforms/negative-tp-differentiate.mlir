// RUN: tp-opt %s -split-input-file -verify-diagnostics --tp-differentiate
// RUN: not tp-opt %s -split-input-file --tp-differentiate=freeze=nothing 2>&1 | FileCheck %s --check-prefix=FREEZE
// RUN: not tp-opt %s -split-input-file --tp-differentiate=loss=y 2>&1 | FileCheck %s --check-prefix=LOSS
// FREEZE: tp-differentiate: freeze='nothing' matches no weight
// LOSS: tp-differentiate: the loss 'y' is 'tensor<2xf32>', not a scalar

// No scalar float output: nothing to differentiate.
// expected-error @+1 {{tp-differentiate: no scalar float output to differentiate (name the loss with loss=NAME)}}
func.func @main(%w: tensor<2xf32> {tp.weight = "w"}) -> (tensor<2xf32> {tp.output = "y"}) {
  return %w : tensor<2xf32>
}

// -----

// A body op without a derivative rule on the path from a weight.
#id = affine_map<(m) -> (m)>
#all = affine_map<(m) -> ()>
func.func @main(%w: tensor<2xf32> {tp.weight = "w"}) -> (tensor<f32> {tp.output = "loss"}) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<2xf32>
  // expected-error @+1 {{tp-differentiate: cannot differentiate the body of this op}}
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%w : tensor<2xf32>) outs(%e0 : tensor<2xf32>) {
  ^bb0(%a: f32, %o: f32):
    // expected-error @+1 {{tp-differentiate: no differentiation rule for 'math.sin' in a generic's body}}
    %r = math.sin %a : f32
    linalg.yield %r : f32
  } -> tensor<2xf32>
  %e1 = tensor.empty() : tensor<f32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<f32>) -> tensor<f32>
  %l = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction"]} ins(%s : tensor<2xf32>) outs(%f1 : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The loss does not depend on the weights.
// expected-error @+1 {{tp-differentiate: the loss does not depend on any trainable weight}}
func.func @main(%w: tensor<2xf32> {tp.weight = "w"}) -> (tensor<f32> {tp.output = "loss"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %l = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A body reading two tensors that depend on weights (a gather from each):
// no rule, an error rather than a silently missing gradient.
#g = affine_map<(d0) -> (d0)>
#s = affine_map<(d0) -> ()>
func.func @main(%ids: tensor<2xi64> {tp.input = "ids"}, %a: tensor<4xf32> {tp.weight = "a"}, %b: tensor<4xf32> {tp.weight = "b"}) -> (tensor<f32> {tp.output = "loss"}) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<2xf32>
  // expected-error @+1 {{tp-differentiate: no differentiation rule for a generic reading several tensors inside its body}}
  %r = linalg.generic {indexing_maps = [#g, #g], iterator_types = ["parallel"]} ins(%ids : tensor<2xi64>) outs(%e0 : tensor<2xf32>) {
  ^bb0(%i: i64, %o: f32):
    %k = arith.index_cast %i : i64 to index
    %x = tensor.extract %a[%k] : tensor<4xf32>
    %y = tensor.extract %b[%k] : tensor<4xf32>
    %z = arith.mulf %x, %y : f32
    linalg.yield %z : f32
  } -> tensor<2xf32>
  %e1 = tensor.empty() : tensor<f32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<f32>) -> tensor<f32>
  %l = linalg.generic {indexing_maps = [#g, #s], iterator_types = ["reduction"]} ins(%r : tensor<2xf32>) outs(%f1 : tensor<f32>) {
  ^bb0(%v: f32, %o: f32):
    %t = arith.addf %o, %v : f32
    linalg.yield %t : f32
  } -> tensor<f32>
  return %l : tensor<f32>
}
