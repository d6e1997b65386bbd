// RUN: tp-opt --tp-select-kernels=target=cpu %S/Inputs/attention-gqa-cache.mlir | FileCheck %s --check-prefix=ATTN
// RUN: env TP_FUSED_ATTENTION=0 tp-opt --tp-select-kernels %S/Inputs/attention-gqa-cache.mlir | FileCheck %s --check-prefix=UNFUSED
// RUN: tp-opt --tp-select-kernels=target=cpu %s | FileCheck %s --check-prefix=CPU
// RUN: tp-opt --tp-select-kernels=target=cuda %s | FileCheck %s --check-prefix=CUDA
// RUN: not tp-opt --tp-select-kernels=target=tpu %s 2>&1 | FileCheck %s --check-prefix=BAD

// How each op runs, recorded for both emitters to follow. The grouped-query
// attention of Inputs/attention-gqa-cache.mlir is one fused chain: the
// repeats of K and V, K's transpose and the softmax steps run inside the
// P V product that ends it.
// ATTN-COUNT-2: tp.kernel = #tp.kernel<in_attention>} : tensor<1x2x2x40x8xf32> into tensor<1x4x40x8xf32>
// ATTN: attrs = {tp.kernel = #tp.kernel<in_attention>}
// ATTN: ins(%{{.*}}, %{{.*}} : tensor<1x4x1x8xf32>, tensor<1x4x8x40xf32>) {{.*}} attrs = {tp.kernel = #tp.kernel<in_attention>}
// ATTN: ins(%{{.*}}, %{{.*}} : tensor<1x4x1x40xf32>, tensor<1x4x40x8xf32>) {{.*}} attrs = {tp.kernel = #tp.kernel<attention>}
// ATTN-NOT: loop_nest
// Without fusion the products are GEMMs and the rest loop nests.
// UNFUSED-NOT: attention
// UNFUSED: ins(%{{.*}}, %{{.*}} : tensor<1x4x1x8xf32>, tensor<1x4x8x40xf32>) {{.*}} attrs = {tp.kernel = #tp.kernel<gemm>}

// An embedding lookup (one-hot sum over the vocabulary) and its gradient
// (a scatter-add of rows at their tokens): the C++ target reads the one
// and adds the other in place; CUDA runs the scatter as a loop nest.
#ids = affine_map<(t, h, v) -> (t)>
#table = affine_map<(t, h, v) -> (v, h)>
#rows = affine_map<(t, h) -> (t, h)>
#out = affine_map<(t, h, v) -> (t, h)>
#sids = affine_map<(t, v, h) -> (t)>
#sdy = affine_map<(t, v, h) -> (t, h)>
#sout = affine_map<(t, v, h) -> (v, h)>
// CPU-LABEL: func.func @lookups
// CPU: tp.kernel = #tp.kernel<lookup>
// CPU: tp.kernel = #tp.kernel<scatter_add>
// CUDA-LABEL: func.func @lookups
// CUDA: tp.kernel = #tp.kernel<lookup>
// CUDA: tp.kernel = #tp.kernel<loop_nest>
// BAD: error: tp-select-kernels: unknown target 'tpu' (expected cpu or cuda)
func.func @lookups(%ids: tensor<4xi64>, %table: tensor<10x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<10x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %rows = linalg.generic {indexing_maps = [#ids, #table, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ids, %table : tensor<4xi64>, tensor<10x8xf32>) outs(%z : tensor<4x8xf32>) {
  ^bb0(%id: i64, %w: f32, %acc: f32):
    %v = linalg.index 2 : index
    %key = arith.index_cast %id : i64 to index
    %hit = arith.cmpi eq, %v, %key : index
    %c0 = arith.constant 0.0 : f32
    %x = arith.select %hit, %w, %c0 : f32
    %r = arith.addf %acc, %x : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %ge = tensor.empty() : tensor<10x8xf32>
  %gz = linalg.fill ins(%zero : f32) outs(%ge : tensor<10x8xf32>) -> tensor<10x8xf32>
  %grad = linalg.generic {indexing_maps = [#sids, #sdy, #sout], iterator_types = ["reduction", "parallel", "parallel"]}
      ins(%ids, %dy : tensor<4xi64>, tensor<4x8xf32>) outs(%gz : tensor<10x8xf32>) {
  ^bb0(%id: i64, %d: f32, %acc: f32):
    %v = linalg.index 1 : index
    %key = arith.index_cast %id : i64 to index
    %hit = arith.cmpi eq, %v, %key : index
    %c0 = arith.constant 0.0 : f32
    %x = arith.select %hit, %d, %c0 : f32
    %r = arith.addf %acc, %x : f32
    linalg.yield %r : f32
  } -> tensor<10x8xf32>
  return %rows, %grad : tensor<4x8xf32>, tensor<10x8xf32>
}
