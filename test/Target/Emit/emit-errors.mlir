// RUN: tp-translate --emit-cpp --split-input-file --verify-diagnostics %s
// RUN: tp-translate --emit-cuda --split-input-file --verify-diagnostics %s

// What code generation refuses, on both targets, with the op it names: a
// module that did not come out of tp-compile's pipeline (hand-written or
// from another tool through tp-translate) gets an error, never a crash or
// wrong code. (A KV cache written by something else:
// emit-cache-update.mlir; a fused attention chain broken after kernel
// selection: tp-select-kernels.mlir.)

// expected-error @below {{code generation needs a body for @ext}}
func.func private @ext(tensor<2xf32>) -> tensor<2xf32>
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = func.call @ext(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// expected-error @below {{code generation supports tensor arguments only}}
func.func @main(%a: f32) -> tensor<2xf32> {
  %e = tensor.empty() : tensor<2xf32>
  %f = linalg.fill ins(%a : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  return %f : tensor<2xf32>
}

// -----

func.func @main(%x: tensor<2xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %v = tensor.extract %x[%c0] : tensor<2xf32>
  // expected-error @below {{code generation supports tensor results only}}
  return %v : f32
}

// -----

// expected-error @below {{code generation does not support element type 'complex<f32>'}}
func.func @main(%x: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
  return %x : tensor<2xcomplex<f32>>
}

// -----

func.func @main(%x: tensor<8xf32>, %i: tensor<index>) -> tensor<2xf32> {
  %o = tensor.extract %i[] : tensor<index>
  // expected-error @below {{code generation needs static slice bounds}}
  %s = tensor.extract_slice %x[%o] [2] [1] : tensor<8xf32> to tensor<2xf32>
  return %s : tensor<2xf32>
}

// -----

func.func @main(%x: tensor<2xf32>, %v: tensor<f32>) -> tensor<4xf32> {
  // expected-error @below {{code generation supports tensor.pad with a constant padding value only}}
  %p = tensor.pad %x low[1] high[1] {
  ^bb0(%i: index):
    %c = tensor.extract %v[] : tensor<f32>
    %d = arith.addf %c, %c : f32
    tensor.yield %d : f32
  } : tensor<2xf32> to tensor<4xf32>
  return %p : tensor<4xf32>
}

// -----

func.func @main() -> tensor<2xf32> {
  // expected-error @below {{code generation supports dense tensor constants only}}
  %c = arith.constant dense_resource<blob> : tensor<2xf32>
  return %c : tensor<2xf32>
}
{-#
  dialect_resources: {
    builtin: {
      blob: "0x040000000000803F00000040"
    }
  }
#-}

// -----

func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  // expected-error @below {{code generation does not support scf.for}}
  %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%a = %x) -> tensor<2xf32> {
    scf.yield %a : tensor<2xf32>
  }
  return %r : tensor<2xf32>
}

// -----

shard.grid @grid(shape = 2x2x2)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{code generation needs collectives over adjacent grid axes}}
  %y = shard.all_reduce %x on @grid grid_axes = [0, 2] : tensor<2xf32> -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

shard.grid @grid(shape = 2)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf64> {
  // expected-error-re @below {{code generation needs {{(a tensor )?}}all_reduce without a type change}}
  %y = shard.all_reduce %x on @grid grid_axes = [0] : tensor<2xf32> -> tensor<2xf64>
  return %y : tensor<2xf64>
}

// -----

shard.grid @grid(shape = 2)
func.func @main(%x: tensor<2xi64>) -> tensor<2xi64> {
  // expected-error @below {{code generation does not support reduction bitwise_xor}}
  %y = shard.all_reduce %x on @grid grid_axes = [0] reduction = bitwise_xor : tensor<2xi64> -> tensor<2xi64>
  return %y : tensor<2xi64>
}


// -----

func.func @main(%x: tensor<2xf32>, %i: tensor<index>) -> tensor<?xf32> {
  %o = tensor.extract %i[] : tensor<index>
  %c = arith.constant 0.0 : f32
  // expected-error @below {{code generation needs static padding}}
  %p = tensor.pad %x low[%o] high[1] {
  ^bb0(%j: index):
    tensor.yield %c : f32
  } : tensor<2xf32> to tensor<?xf32>
  return %p : tensor<?xf32>
}

// -----

func.func @main(%x: tensor<2xf32>, %y: tensor<8xf32>, %i: tensor<index>) -> tensor<8xf32> {
  %o = tensor.extract %i[] : tensor<index>
  // expected-error @below {{code generation needs static insert_slice bounds}}
  %r = tensor.insert_slice %x into %y[%o] [2] [1] : tensor<2xf32> into tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

shard.grid @grid(shape = 4)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{code generation needs one static source}}
  %y = shard.recv %x on @grid grid_axes = [0] : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

shard.grid @grid(shape = ?)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{code generation needs a static grid shape}}
  %y = shard.all_reduce %x on @grid grid_axes = [0] : tensor<2xf32> -> tensor<2xf32>
  return %y : tensor<2xf32>
}
