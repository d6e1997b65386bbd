// RUN: tp-opt %s -split-input-file --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cuda -split-input-file | FileCheck %s
// RUN: tp-opt %s -split-input-file --tp-convert-dtype=dtype=f16 | tp-translate --emit-cuda -split-input-file | FileCheck %s --check-prefix=F16

// tp-compile --dtype on the CUDA target: a GELU-like activation stored in
// bf16, a row-parallel projection of it with a bf16 weight on the tensor
// cores (cublasGemmStridedBatchedEx, accumulating in f32), its sum rounded
// to bf16 once and all-reduced as ncclBfloat16, and the output extended
// back to f32 for the caller. In bf16 cuBLAS writes the sum rounded (C is
// CUDA_R_16BF) and the rounding's kernel goes; in f16 the sum is f32 and a
// kernel rounds it, saturating (a sum past 65504 stays finite).
shard.grid @grid(shape = 2)

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>

// CHECK: #include <cuda_bf16.h>
// CHECK: using BFloat16 = __nv_bfloat16;
// CHECK-LABEL: __global__ void kernel0(const float *__restrict__ p0, BFloat16 *__restrict__ r0,
// CHECK: const BFloat16 {{v[0-9]+}} = static_cast<BFloat16>(
// CHECK: BFloat16 *[[MM:v[0-9]+]] = tp::cuda::allocate<BFloat16>(context, 64,
// CHECK: // (4 x 8) * (8 x 16), bf16 x bf16 accumulated in f32, written in bf16 (the rounding below), row-major: cuBLAS computes the transpose
// CHECK: TP_CUDA_CHECK(cublasGemmStridedBatchedEx(context->blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 4, 8, &alpha, a1, CUDA_R_16BF, 16, 0, [[ACT:v[0-9]+]], CUDA_R_16BF, 8, 0, &beta, [[MM]], CUDA_R_16BF, 16, 64, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "linalg.generic at {{.*}}");
// CHECK: // linalg.generic
// CHECK-NEXT: // written in bf16 by cuBLAS above
// CHECK-NEXT: // shard.all_reduce
// CHECK-NEXT: TP_CUDA_CHECK(ncclAllReduce([[MM]], [[MM]], 64, ncclBfloat16, ncclSum,
// F16: using Float16 = __half;
// F16: cublasGemmStridedBatchedEx({{.*}}, a1, CUDA_R_16F, 16, 0, {{.*}}, CUDA_R_16F, 8, 0, &beta, [[MM16:v[0-9]+]], CUDA_R_32F,
// F16: kernel1<<<tp::cuda::blocksFor(64), tp::cuda::kThreads, 0, context->stream>>>([[MM16]], [[ROUNDED:v[0-9]+]]);
// F16: ncclAllReduce([[ROUNDED]], [[ROUNDED]], 64, ncclFloat16, ncclSum,
func.func @main(%x: tensor<4x8xf32> {tp.input = "x"},
                %w: tensor<8x16xf32> {tp.weight = "w"})
    -> (tensor<4x16xf32> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %xe = tensor.empty() : tensor<4x8xf32>
  %act = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%xe : tensor<4x8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    %r = arith.mulf %t, %half : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %empty = tensor.empty() : tensor<4x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x16xf32>) -> tensor<4x16xf32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%act, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%init : tensor<4x16xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %sum = shard.all_reduce %mm on @grid grid_axes = [0] : tensor<4x16xf32> -> tensor<4x16xf32>
  return %sum : tensor<4x16xf32>
}

// -----

// A model that is f16 already computes in its own type: __half's
// arithmetic (through float in the CPU emulation).
// CHECK-LABEL: __global__ void kernel0(const Float16 *__restrict__ p0, Float16 *__restrict__ r0) {
// CHECK: const Float16 [[V:s[0-9]+]] = p0[
// CHECK: const Float16 [[S:v[0-9]+]] = [[V]] + [[V]];
func.func @main(%x: tensor<4xf16> {tp.input = "x"}) -> (tensor<4xf16> {tp.output = "y"}) {
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
