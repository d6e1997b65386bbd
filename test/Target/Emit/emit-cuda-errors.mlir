// RUN: tp-translate --emit-cuda --split-input-file --verify-diagnostics %s

// What the CUDA target alone refuses (emit-errors.mlir: both targets).

shard.grid @grid(shape = 2)
func.func @main(%x: tensor<2xi16>) -> tensor<2xi16> {
  // expected-error @below {{NCCL reductions do not support element type 'i16'}}
  %y = shard.all_reduce %x on @grid grid_axes = [0] : tensor<2xi16> -> tensor<2xi16>
  return %y : tensor<2xi16>
}

// -----

func.func @main(%x: tensor<2x2x2x2x2x2x2x2x2xf32>) -> tensor<1x2x2x2x2x2x2x2x2xf32> {
  // expected-error @below {{CUDA code generation supports copies of rank up to 8}}
  %s = tensor.extract_slice %x[1, 0, 0, 0, 0, 0, 0, 0, 0] [1, 2, 2, 2, 2, 2, 2, 2, 2] [1, 1, 1, 1, 1, 1, 1, 1, 1] : tensor<2x2x2x2x2x2x2x2x2xf32> to tensor<1x2x2x2x2x2x2x2x2xf32>
  return %s : tensor<1x2x2x2x2x2x2x2x2xf32>
}
