// RUN: tp-translate --emit-cpp %S/Inputs/attention-gqa-cache.mlir | FileCheck %s --check-prefix=CPP
// RUN: tp-translate --emit-cuda %S/Inputs/attention-gqa-cache.mlir | FileCheck %s --check-prefix=CUDA

// Grouped-query attention over KV caches (Inputs/attention-gqa-cache.mlir:
// 4 query heads, 2 KV heads). The repeat of each K/V head to the query
// heads of its group is not copied: query head b reads KV head b / 2 of
// the caches as stored, in both products, on both targets.

// CPP: // linalg.generic (attention-gqa-cache.mlir:30)
// CPP-NEXT: // computed by the fused attention below, never stored
// CPP: // tensor.collapse_shape
// CPP-NEXT: // a reshape inside the fused attention below
// CPP: // Attention (attention-gqa-cache.mlir:93): 4 x (1 queries x 40 keys)
// CPP: cblas_sgemv(CblasRowMajor, CblasNoTrans, limit, 8, 1.0f, a4 + (b / 2LL) * 320LL, 8, a0 + b * 8LL, 1, 0.0f, s, 1);
// CPP: cblas_sgemv(CblasRowMajor, CblasTrans, limit, 8, 1.0f, a5 + (b / 2LL) * 320LL, 8, s, 1, 0.0f, {{v[0-9]+}} + b * 8LL, 1);
// CPP-NOT: context->allocate

// CUDA: kt[(b / 2LL) * 320LL + j * 8LL + d]
// CUDA: v[(b / 2LL) * 320LL + key * 8LL + col]
// CUDA-LABEL: static void fn_main(
// CUDA: // a reshape inside the fused attention below
// CUDA: kernel{{[0-9]+}}<<<tp::cuda::blocksForWarps(4), tp::cuda::threadsForWarps(4), 0, context->stream>>>(a0, a4, a5,
// CUDA-NOT: <<<
