// RUN: tp-translate --emit-cuda %s | FileCheck %s

// A row-parallel projection after partition, as in emit-cpp.mlir: the
// contraction becomes one cuBLAS call (row-major, so with the operands
// swapped), the partial sum an in-place ncclAllReduce on the group's
// communicator, the bias add and tanh one fused kernel, the one-hot lookup a
// kernel running only the contributing iteration, a row sum a kernel with
// the accumulator in a register, and a gather on an inner axis an
// ncclAllGather plus a layout swap. Kernels come first in the file.

// CHECK: #include "tp_cuda_runtime.h"

// CHECK-LABEL: __global__ void kernel0(const float *__restrict__ p0, const float *__restrict__ p1, float *__restrict__ r0) {
// CHECK: for (std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < 64; t += std::int64_t(gridDim.x) * blockDim.x) {
// CHECK: const std::int64_t i1 = t % 16LL;
// CHECK: const std::int64_t i0 = t / 16LL;
// CHECK: const float [[X:s[0-9]+]] = p0[i0 * 16LL + i1];
// CHECK: const float [[B:s[0-9]+]] = p1[i1];
// CHECK: const float [[SUM:v[0-9]+]] = [[X]] + [[B]];
// CHECK: const float [[T:v[0-9]+]] = tanhF([[SUM]]);
// CHECK: r0[i0 * 16LL + i1] = [[T]];

// CHECK-LABEL: __global__ void kernel1(
// CHECK: float acc0 = p2[i0 * 16LL + i1];
// CHECK-NOT: < 10; ++
// CHECK: if (i2 >= 0 && i2 < 10) {
// CHECK: acc0 =
// CHECK: r0[i0 * 16LL + i1] = acc0;

// CHECK-LABEL: __global__ void kernel2(
// CHECK: float acc0 = p1[i0];
// CHECK: for (std::int64_t i1 = 0; i1 < 16; ++i1)
// CHECK: acc0 =
// CHECK: r0[i0] = acc0;

// CHECK-LABEL: static void fn_main(tp::cuda::Rank *context, void *const *args, void *const *results) {
// CHECK: float *a0 = static_cast<float *>(args[0]); // input "x"
// CHECK: float *a1 = static_cast<float *>(args[1]); // weight "w"

shard.grid @grid(shape = 2)

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#col = affine_map<(d0, d1) -> (d0)>
#ids = affine_map<(d0, d1, d2) -> (d0)>
#table = affine_map<(d0, d1, d2) -> (d2, d1)>

func.func @main(%x: tensor<4x8xf32> {tp.input = "x"},
                %w: tensor<8x16xf32> {tp.weight = "w"},
                %b: tensor<16xf32> {tp.weight = "b"},
                %ids: tensor<4xi64> {tp.input = "ids"},
                %emb: tensor<10x16xf32> {tp.weight = "emb"})
    -> (tensor<4x16xf32> {tp.output = "y"}, tensor<4x16xf32> {tp.output = "e"},
        tensor<4xf32> {tp.output = "s"}, tensor<4x32xf32> {tp.output = "g"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x16xf32>
  // The zero fill only feeds a GEMM (beta = 0) and the lookup.
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x16xf32>) -> tensor<4x16xf32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%init : tensor<4x16xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %p = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  // CHECK: float *[[MM:v[0-9]+]] = tp::cuda::allocate<float>(context, 64, "linalg.generic at {{.*}}");
  // CHECK: const float alpha = 1, beta = 0;
  // CHECK: TP_CUDA_CHECK(cublasSgemmStridedBatched(context->blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 4, 8, &alpha, a1, 16, 0, a0, 8, 0, &beta, [[MM]], 16, 64, 1), "linalg.generic at {{.*}}");
  // CHECK: TP_CUDA_CHECK(ncclAllReduce([[MM]], [[MM]], 64, ncclFloat32, ncclSum, context->comm(tp::cuda::Group{2, 1}), context->stream), "shard.all_reduce at {{.*}}");
  %sum = shard.all_reduce %mm on @grid grid_axes = [0] : tensor<4x16xf32> -> tensor<4x16xf32>
  %biased = linalg.generic {indexing_maps = [#id, #row, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%sum, %b : tensor<4x16xf32>, tensor<16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %r = arith.addf %v, %bias : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  // CHECK: float *[[Y:v[0-9]+]] = tp::cuda::allocate<float>(context, 64,
  // CHECK: kernel0<<<tp::cuda::blocksFor(64), tp::cuda::kThreads, 0, context->stream>>>([[MM]], a2, [[Y]]);
  // CHECK: TP_CUDA_CHECK_LAUNCH("linalg.generic at {{.*}}");
  // CHECK: tp::cuda::release(context, [[MM]]);
  %y = linalg.generic {indexing_maps = [#id, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%biased : tensor<4x16xf32>) outs(%empty : tensor<4x16xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = math.tanh %v : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %e = linalg.generic {indexing_maps = [#ids, #table, #out],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ids, %emb : tensor<4xi64>, tensor<10x16xf32>) outs(%init : tensor<4x16xf32>) {
  ^bb0(%id: i64, %t: f32, %acc: f32):
    %k = arith.index_cast %id : i64 to index
    %r = linalg.index 2 : index
    %eq = arith.cmpi eq, %k, %r : index
    %v = arith.select %eq, %t, %zero : f32
    %s = arith.addf %acc, %v : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %rempty = tensor.empty() : tensor<4xf32>
  %rinit = linalg.fill ins(%zero : f32) outs(%rempty : tensor<4xf32>) -> tensor<4xf32>
  %rows = linalg.generic {indexing_maps = [#id, #col],
                       iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<4x16xf32>) outs(%rinit : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %s = arith.addf %acc, %v : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  // CHECK: char *gathered = tp::cuda::allocate<char>(context, 8LL * 16 * sizeof(float),
  // CHECK: ncclAllGather([[Y]], gathered, 4LL * 16 * sizeof(float), ncclUint8, context->comm(tp::cuda::Group{2, 1}), context->stream)
  // CHECK: tp::cuda::swapOuter(context, {{v[0-9]+}}, gathered, 2, 4, 16 * sizeof(float),
  // CHECK: tp::cuda::release(context, gathered);
  %g = shard.all_gather %y on @grid grid_axes = [0] gather_axis = 1 : tensor<4x16xf32> -> tensor<4x32xf32>
  // CHECK: TP_CUDA_CHECK(cudaMemcpyAsync(results[0], [[Y]], 64 * sizeof(float), cudaMemcpyDeviceToDevice, context->stream), "return from @main");
  return %y, %e, %rows, %g : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4xf32>, tensor<4x32xf32>
}

// The table the runtime looks stages up in, and the groups to split.
// CHECK: const bool main_argIsWeight[] = {false, true, true, false, true};
// CHECK: {"main", fn_main, 5, 4, main_argBytes, main_argIsWeight, main_resultBytes}};
// CHECK: const tp::cuda::Group groups[] = {{[{][{]}}2, 1{{[}][}]}};
