// RUN: tp-translate --emit-cuda %s -verify-diagnostics

// Half precision has no device type in the generated code yet.
func.func @main(%x: tensor<4xf16> {tp.input = "x"}) -> tensor<4xf16> {
  // expected-error @+1 {{CUDA code generation does not support 'f16' yet}}
  %empty = tensor.empty() : tensor<4xf16>
  %y = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<4xf16>) outs(%empty : tensor<4xf16>) {
  ^bb0(%v: f16, %o: f16):
    %r = arith.addf %v, %v : f16
    linalg.yield %r : f16
  } -> tensor<4xf16>
  return %y : tensor<4xf16>
}
