// RUN: tp-translate --emit-cpp %S/Inputs/attention-kv-cache.mlir | FileCheck %s --check-prefix=CPP
// RUN: tp-translate --emit-cuda %S/Inputs/attention-kv-cache.mlir | FileCheck %s --check-prefix=CUDA

// A decode step's attention over KV caches of 40 positions
// (Inputs/attention-kv-cache.mlir): both targets run it fused, over the
// keys written so far only, [0, cache_position + 1), and read K from its
// cache as stored: the transpose of the whole cache is not computed.

// The C++ target: per batch element, sgemv for both products (one query
// row) over `limit` keys; the mask read at the key; softmax in place, its
// elementwise steps (scale and mask, exponentials, division) each a loop
// apart from the max and the sum, so that they vectorise.
// CPP: // tp.cache_update
// CPP-NEXT: tp::rt::writeCache(a5, a1, a4[0],
// CPP: // linalg.generic (attention-kv-cache.mlir:28)
// CPP-NEXT: // computed by the fused attention below, never stored
// CPP: // Attention (attention-kv-cache.mlir:79): 2 x (1 queries x 40 keys), depth 8, value width 8; the scores of one batch element at a time, over the filled keys of the KV cache
// CPP-NEXT: TP_LOOP_NEST {
// CPP-NEXT: const std::int64_t limit = std::min<std::int64_t>(40, std::max<std::int64_t>(1, a4[0] + 1));
// CPP: cblas_sgemv(CblasRowMajor, CblasNoTrans, limit, 8, 1.0f, a5 + b * 320LL, 8, a0 + b * 8LL, 1, 0.0f, s, 1);
// CPP: for (std::int64_t [[KEY:j[0-9]+]] = 0; [[KEY]] < limit; ++[[KEY]]) {
// CPP: + a3[[[KEY]]];
// CPP: x[[[KEY]]] = static_cast<float>(
// CPP-NEXT: }
// CPP-NEXT: auto rowMax =
// CPP-NEXT: for (std::int64_t [[KEY]] = 0; [[KEY]] < limit; ++[[KEY]]) {
// CPP-NEXT: maximumF(rowMax, x[[[KEY]]]);
// CPP-NEXT: rowMax =
// CPP-NEXT: }
// CPP-NEXT: for (std::int64_t [[KEY]] = 0; [[KEY]] < limit; ++[[KEY]]) {
// CPP: expF(
// CPP: x[[[KEY]]] = static_cast<float>(
// CPP-NEXT: }
// CPP-NEXT: auto rowSum =
// CPP-NEXT: for (std::int64_t [[KEY]] = 0; [[KEY]] < limit; ++[[KEY]]) {
// CPP-NEXT: rowSum + x[[[KEY]]];
// CPP-NEXT: rowSum =
// CPP-NEXT: }
// CPP: = x[[[KEY]]] / rowSum;
// CPP: cblas_sgemv(CblasRowMajor, CblasTrans, limit, 8, 1.0f, a6 + b * 320LL, 8, s, 1, 0.0f, {{v[0-9]+}} + b * 8LL, 1);
// CPP-NOT: context->allocate
// CPP-LABEL: tp::rt::modelEntries()

// On CUDA the kernel reads the position from device memory (a captured
// graph replays with each step's), and walks the keys up to it.
// CUDA: __global__ void [[KERNEL:kernel[0-9]+]](const float *__restrict__ q, const float *__restrict__ kt, const float *__restrict__ v, float *__restrict__ o, const std::int64_t *__restrict__ position,
// CUDA-NEXT: const int lane
// CUDA-NEXT: const std::int64_t end = position[0] + 1, limit = end < 1 ? 1 : end > 40 ? 40 : end;
// CUDA: for (std::int64_t first = 0; first < limit; first += 32) {
// CUDA: kt[b * 320LL + j * 8LL + d]
// CUDA-LABEL: static void fn_main(
// CUDA-NOT: kernel{{[0-9]+}}<<<
// CUDA: [[KERNEL]]<<<tp::cuda::blocksForWarps(2), tp::cuda::threadsForWarps(2), 0, context->stream>>>(a0, a5, a6, {{v[0-9]+}}, a4,
// CUDA-NOT: <<<
