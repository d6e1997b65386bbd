// RUN: tp-translate --emit-cuda %s | FileCheck %s

// A row group (EmitRowGroups.cpp) is one kernel on CUDA
// (EmitCudaRowGroups.cpp): a warp per row, the nests one after another for
// it with __syncwarp() between them. An RMS norm over 2 x 4 rows of 64
// features: the sum of squares is shared by the warp's lanes (shuffles,
// lane 0 writes it), the scaling of the row reads it through the reshape
// after the __syncwarp, each lane taking every 32nd feature. What the
// kernel both writes and reads is passed without __restrict__; the weight
// and the input keep it. A row narrower than a warp keeps a kernel per
// nest.

#x3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#rows3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#stat3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#feat3 = affine_map<(d0, d1, d2) -> (d2)>

// CHECK: // a row group: 2 loop nests, a warp per row of [2, 4]
// CHECK-NEXT: __global__ void [[K:kernel[0-9]+]](const float *__restrict__ n0_p0, const float *__restrict__ n0_p1, float * n0_r0, const float *__restrict__ n1_p0, const float * n1_p1, const float *__restrict__ n1_p2, float * n1_r0, const float n1_q0) {
// CHECK-NEXT: const int lane = threadIdx.x % tp::cuda::kWarpSize;
// CHECK-NEXT: for (std::int64_t t = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / tp::cuda::kWarpSize; t < 8; t += std::int64_t(gridDim.x) * blockDim.x / tp::cuda::kWarpSize) {
// CHECK-NEXT: const std::int64_t i1 = t % 4LL;
// CHECK-NEXT: const std::int64_t i0 = t / 4LL;
// CHECK-NEXT: { // linalg.generic ({{.*}}): the lanes share the 64 reduced elements
// CHECK-NEXT: for (std::int64_t u = 0; u < 1; ++u) {
// CHECK-NEXT: float part = float(0);
// CHECK-NEXT: for (std::int64_t r = lane; r < 64; r += tp::cuda::kWarpSize) {
// CHECK-NEXT: const std::int64_t i2 = r;
// CHECK-NEXT: const float [[X:s[0-9]+]] = n0_p0[i0 * 256LL + i1 * 64LL + i2];
// CHECK: part = part + __shfl_xor_sync(0xffffffffu, part, offset);
// CHECK-NEXT: if (lane == 0)
// CHECK-NEXT: n0_r0[i0 * 4LL + i1] = n0_p1[i0 * 4LL + i1] + part;
// CHECK: __syncwarp();
// CHECK-NEXT: { // linalg.generic
// CHECK-NEXT: for (std::int64_t u = lane; u < 64; u += tp::cuda::kWarpSize) {
// CHECK-NEXT: const std::int64_t i2 = u;
// CHECK: = n1_p1[i0 * 4LL + i1];
// CHECK: std::sqrt(
// CHECK: n1_r0[i0 * 256LL + i1 * 64LL + i2] =

// The narrow rows: one kernel per nest, a thread per point.
// CHECK-NOT: a row group
// CHECK: __global__ void
// CHECK-NOT: __syncwarp
// CHECK: __global__ void

// CHECK-LABEL: static void fn_norm(tp::cuda::Rank *context
// CHECK: // 2 loop nests as one kernel, a warp per row of [2, 4] (a row group)
// CHECK: [[K]]<<<tp::cuda::blocksForWarps(8), tp::cuda::threadsForWarps(8), 0, context->stream>>>(
// CHECK-NEXT: TP_CUDA_CHECK_LAUNCH("a row group at
// CHECK-NOT: <<<
// CHECK-LABEL: static void fn_narrow(tp::cuda::Rank *context
// CHECK-NOT: row group
// CHECK: <<<tp::cuda::blocksFor(
// CHECK: <<<tp::cuda::blocksFor(
func.func @norm(%x: tensor<2x4x64xf32> {tp.input = "x"},
                %w: tensor<64xf32> {tp.weight = "w"})
    -> (tensor<2x4x64xf32> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  %e2 = tensor.empty() : tensor<2x4xf32>
  %zeros = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x4xf32>) -> tensor<2x4xf32>
  %ss = linalg.generic {indexing_maps = [#x3, #rows3],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x4x64xf32>) outs(%zeros : tensor<2x4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %p = arith.mulf %v, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x4xf32>
  %ss3 = tensor.expand_shape %ss [[0], [1, 2]] output_shape [2, 4, 1]
      : tensor<2x4xf32> into tensor<2x4x1xf32>
  %ey = tensor.empty() : tensor<2x4x64xf32>
  %y = linalg.generic {indexing_maps = [#x3, #stat3, #feat3, #x3],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %ss3, %w : tensor<2x4x64xf32>, tensor<2x4x1xf32>, tensor<64xf32>)
      outs(%ey : tensor<2x4x64xf32>) {
  ^bb0(%v: f32, %s: f32, %g: f32, %o: f32):
    %a = arith.addf %s, %eps : f32
    %q = math.sqrt %a : f32
    %d = arith.divf %v, %q : f32
    %m = arith.mulf %d, %g : f32
    linalg.yield %m : f32
  } -> tensor<2x4x64xf32>
  return %y : tensor<2x4x64xf32>
}

func.func @narrow(%x: tensor<2x4x8xf32> {tp.input = "x"})
    -> (tensor<2x4x8xf32> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2x4xf32>
  %zeros = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x4xf32>) -> tensor<2x4xf32>
  %ss = linalg.generic {indexing_maps = [#x3, #rows3],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x4x8xf32>) outs(%zeros : tensor<2x4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %p = arith.mulf %v, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x4xf32>
  %ey = tensor.empty() : tensor<2x4x8xf32>
  %y = linalg.generic {indexing_maps = [#x3, #rows3, #x3],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %ss : tensor<2x4x8xf32>, tensor<2x4xf32>)
      outs(%ey : tensor<2x4x8xf32>) {
  ^bb0(%v: f32, %q: f32, %o: f32):
    %d = arith.divf %v, %q : f32
    linalg.yield %d : f32
  } -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
