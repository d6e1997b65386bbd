// RUN: tp-opt %S/Inputs/attention-kv-cache-scaled-q.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cpp | FileCheck %s --check-prefix=CPP
// RUN: tp-opt %S/Inputs/attention-kv-cache-scaled-q.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cuda | FileCheck %s --check-prefix=CUDA

// A bf16 decode step's attention (Inputs/attention-kv-cache-scaled-q.mlir
// under tp-convert-dtype): Q is bf16, the KV caches stay f32, and K is read
// through a transpose of its cache that rounds each element to bf16. Both
// targets fold that copy into the fused attention as they fold a plain
// transpose: no bf16 copy of the whole cache is made on each step, and
// the rounding runs on each element of K where it is read, over the
// filled keys only, so the numerics are those of the unfused chain.

// The C++ target rounds batch element b's filled keys, [0, limit), into
// one buffer in a loop over contiguous elements (it vectorises) and runs
// sgemv on it.
// CPP: // computed by the fused attention below, never stored
// CPP: // Attention ({{.*}}): 2 x (1 queries x 40 keys), depth 8, value width 8; the scores of one batch element at a time, over the filled keys of the KV cache
// CPP-NEXT: TP_LOOP_NEST {
// CPP-NEXT: const std::int64_t limit = std::min<std::int64_t>(40, std::max<std::int64_t>(1, a4[0] + 1));
// CPP: std::vector<float> [[K:k[0-9]+]](320);
// CPP: for (std::int64_t b = 0; b < 2; ++b) {
// CPP: const float *keyIn = a5 + b * 320LL;
// CPP-NEXT: for (std::int64_t i = 0; i < limit * 8LL; ++i) {
// CPP: maximumF(keyIn[i],
// CPP: static_cast<BFloat16>(
// CPP-NEXT: [[K]][i] = static_cast<float>(
// CPP-NEXT: }
// CPP-NEXT: cblas_sgemv(CblasRowMajor, CblasNoTrans, limit, 8, 1.0f, [[K]].data(), 8, {{q[0-9]+}}.data() + b * 8LL, 1, 0.0f, s, 1);
// CPP: cblas_sgemv(CblasRowMajor, CblasTrans, limit, 8, 1.0f, a6 + b * 320LL, 8, s, 1, 0.0f, {{v[0-9]+}} + b * 8LL, 1);
// CPP-NOT: context->allocate
// CPP-LABEL: tp::rt::modelEntries()

// On CUDA the kernel takes Q in bf16 and K as its f32 cache, and rounds
// each element of K it reads.
// CUDA: __global__ void [[KERNEL:kernel[0-9]+]](const BFloat16 *__restrict__ q, const float *__restrict__ kt, const float *__restrict__ v, float *__restrict__ o, const std::int64_t *__restrict__ position,
// CUDA: for (std::int64_t d = 0; d < 8; ++d) {
// CUDA: maximumF(kt[b * 320LL + j * 8LL + d],
// CUDA: const BFloat16 [[ROUNDED:v[0-9]+]] = static_cast<BFloat16>(
// CUDA-NEXT: s += static_cast<float>(q[b * 8LL + row * 8LL + d]) * static_cast<float>([[ROUNDED]]);
// CUDA-LABEL: static void fn_main(
// CUDA: [[KERNEL]]<<<tp::cuda::blocksForWarps(2), tp::cuda::threadsForWarps(2), 0, context->stream>>>({{v[0-9]+}}, a5, a6, {{v[0-9]+}}, a4,
