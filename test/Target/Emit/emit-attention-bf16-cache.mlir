// RUN: tp-opt %S/Inputs/attention-kv-cache-scaled-q.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cpp | FileCheck %s --check-prefix=CPP
// RUN: tp-opt %S/Inputs/attention-kv-cache-scaled-q.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cuda | FileCheck %s --check-prefix=CUDA
// RUN: tp-opt %S/Inputs/attention-input-keys.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cpp | FileCheck %s --check-prefix=PAYLOAD-CPP
// RUN: tp-opt %S/Inputs/attention-input-keys.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cuda | FileCheck %s --check-prefix=PAYLOAD-CUDA
// RUN: tp-opt %S/Inputs/attention-scaled-keys.mlir --tp-convert-dtype=dtype=bf16 | tp-translate --emit-cuda | FileCheck %s --check-prefix=SCALED-CUDA

// A bf16 decode step's attention (Inputs/attention-kv-cache-scaled-q.mlir
// under tp-convert-dtype): Q is bf16 and so are the KV caches, which the
// step's key and value go into rounded. K is read through a transpose of
// its cache that rounds each element back to bf16, which it already is: a
// copy, which both targets fold into the fused attention as they fold a
// plain transpose. No copy of the whole cache is made on each step.

// The C++ target widens batch element b's filled keys and values,
// [0, limit), into one buffer each (loops over contiguous elements, which
// vectorise) for sgemv.
// CPP: BFloat16 *a5 = static_cast<BFloat16 *>(args[5]); // KV cache "past_key_values.0.key"
// CPP-NEXT: BFloat16 *a6 = static_cast<BFloat16 *>(args[6]); // KV cache "past_key_values.0.value"
// CPP: tp::rt::writeCache(a5,
// CPP: tp::rt::writeCache(a6,
// CPP: // computed by the fused attention below, never stored
// CPP: // Attention ({{.*}}): 2 x (1 queries x 40 keys), depth 8, value width 8; the scores of one batch element at a time, over the filled keys of the KV cache
// CPP-NEXT: TP_LOOP_NEST {
// CPP-NEXT: const std::int64_t limit = std::min<std::int64_t>(40, std::max<std::int64_t>(1, a4[0] + 1));
// CPP: std::vector<float> [[K:k[0-9]+]](320);
// CPP-NEXT: std::vector<float> [[V:v[0-9]+]](320);
// CPP: for (std::int64_t b = 0; b < 2; ++b) {
// CPP: const BFloat16 *[[KIN:in[a-z0-9]+]] = a5 + b * 320LL;
// CPP-NEXT: for (std::int64_t i = 0; i < limit * 8LL; ++i) {
// CPP-NEXT: [[K]][i] = static_cast<float>([[KIN]][i]);
// CPP-NEXT: }
// CPP-NEXT: cblas_sgemv(CblasRowMajor, CblasNoTrans, limit, 8, 1.0f, [[K]].data(), 8, {{q[0-9]+}}.data() + b * 8LL, 1, 0.0f, s, 1);
// CPP: const BFloat16 *[[VIN:in[a-z0-9]+]] = a6 + b * 320LL;
// CPP-NEXT: for (std::int64_t i = 0; i < limit * 8LL; ++i) {
// CPP-NEXT: [[V]][i] = static_cast<float>([[VIN]][i]);
// CPP-NEXT: }
// CPP-NEXT: cblas_sgemv(CblasRowMajor, CblasTrans, limit, 8, 1.0f, [[V]].data(), 8, s, 1, 0.0f, {{v[0-9]+}} + b * 8LL, 1);
// CPP-NOT: context->allocate
// CPP-LABEL: tp::rt::modelEntries()

// On CUDA the kernel reads Q, K and V in bf16 as stored.
// CUDA: __global__ void [[KERNEL:kernel[0-9]+]](const BFloat16 *__restrict__ q, const BFloat16 *__restrict__ kt, const BFloat16 *__restrict__ v, float *__restrict__ o, const std::int64_t *__restrict__ position,
// CUDA: for (std::int64_t d = 0; d < 8; ++d) {
// CUDA-NEXT: s += static_cast<float>(q[b * 8LL + row * 8LL + d]) * static_cast<float>(kt[b * 320LL + j * 8LL + d]);
// CUDA-LABEL: static void fn_main(
// CUDA: tp::cuda::writeCache(context, a5,
// CUDA: tp::cuda::writeCache(context, a6,
// CUDA: [[KERNEL]]<<<tp::cuda::blocksForWarps(2), tp::cuda::threadsForWarps(2), 0, context->stream>>>({{v[0-9]+}}, a5, a6, {{v[0-9]+}}, a4,

// Keys that are an f32 model input (Inputs/attention-input-keys.mlir): the
// transpose rounds them to bf16, which changes them. It still folds in:
// both targets run its payload on each element of K they read, so the
// numerics are the unfused chain's. The values, an f32 input that meets
// the bf16 probabilities in a product, are rounded to bf16 before it (as a
// bf16 model takes its inputs), by a loop nest of their own.
// PAYLOAD-CPP: BFloat16 *[[VR:v[0-9]+]] = static_cast<BFloat16 *>(context->allocate(640 * sizeof(BFloat16)));
// PAYLOAD-CPP: const float *p0 = a3;
// PAYLOAD-CPP: // Attention ({{.*}}): 2 x (1 queries x 40 keys), depth 8, value width 8; the scores of one batch element at a time, over every key
// PAYLOAD-CPP: const float *[[KIN:in[a-z0-9]+]] = a2 + b * 320LL;
// PAYLOAD-CPP-NEXT: for (std::int64_t i = 0; i < limit * 8LL; ++i) {
// PAYLOAD-CPP: maximumF([[KIN]][i],
// PAYLOAD-CPP: static_cast<BFloat16>(
// PAYLOAD-CPP-NEXT: [[K:k[0-9]+]][i] = static_cast<float>(
// PAYLOAD-CPP-NEXT: }
// PAYLOAD-CPP-NEXT: cblas_sgemv(CblasRowMajor, CblasNoTrans, limit, 8, 1.0f, [[K]].data(), 8,
// PAYLOAD-CPP: const BFloat16 *[[VIN:in[a-z0-9]+]] = [[VR]] + b * 320LL;
// PAYLOAD-CPP-NEXT: for (std::int64_t i = 0; i < limit * 8LL; ++i) {
// PAYLOAD-CPP-NEXT: [[V:v[0-9]+]][i] = static_cast<float>([[VIN]][i]);
// PAYLOAD-CPP-NEXT: }
// PAYLOAD-CPP-NEXT: cblas_sgemv(CblasRowMajor, CblasTrans, limit, 8, 1.0f, [[V]].data(), 8, s, 1, 0.0f,
// PAYLOAD-CUDA: __global__ void [[KERNEL:kernel[0-9]+]](const BFloat16 *__restrict__ q, const float *__restrict__ kt, const BFloat16 *__restrict__ v,
// PAYLOAD-CUDA: for (std::int64_t d = 0; d < 8; ++d) {
// PAYLOAD-CUDA: maximumF(kt[b * 320LL + j * 8LL + d],
// PAYLOAD-CUDA: const BFloat16 [[ROUNDED:v[0-9]+]] = static_cast<BFloat16>(
// PAYLOAD-CUDA-NEXT: s += static_cast<float>(q[b * 8LL + row * 8LL + d]) * static_cast<float>([[ROUNDED]]);
// PAYLOAD-CUDA: [[KERNEL]]<<<tp::cuda::blocksForWarps(2), tp::cuda::threadsForWarps(2), 0, context->stream>>>({{v[0-9]+}}, a2, {{v[0-9]+}},

// The key copy's payload reads a scale from outside its body (DeBERTa-v2's
// keys divided as they are transposed): the fused kernel takes it as a
// parameter, as it does for the logits' payloads (the CUDA emitter aborted
// with "used before it was emitted").
// SCALED-CUDA: __global__ void [[KERNEL:kernel[0-9]+]](const BFloat16 *__restrict__ q, const float *__restrict__ kt, const BFloat16 *__restrict__ v, float *__restrict__ o, const float *__restrict__ x4, const float [[SCALE:c[0-9]+]]) {
// SCALED-CUDA: for (std::int64_t d = 0; d < 8; ++d) {
// SCALED-CUDA-NEXT: const float [[K:v[0-9]+]] = kt[b * 320LL + j * 8LL + d] / [[SCALE]];
// SCALED-CUDA: [[KERNEL]]<<<tp::cuda::blocksForWarps(2), tp::cuda::threadsForWarps(2), 0, context->stream>>>({{v[0-9]+}}, a2, {{v[0-9]+}}, {{v[0-9]+}}, a1, {{v[0-9]+}});
