//===- tp_packed_gemm.h - products with a weight packed once per rank -----===//
//
// Part of every --target cpu artifact (model.cpp includes it). BLAS packs
// its operands into panels on every call; for a product with few rows (a
// decode step's batch, a short encoder input) packing the weight costs
// as much as the product. weightGemm packs a resident weight once per rank,
// into panels of 32 columns, k-major, that the AVX-512 micro-kernel streams
// with two vector loads per k; the rank keeps them as long as it lives.
// Without AVX-512 it is cblas_sgemm.
//
//===----------------------------------------------------------------------===//

#ifndef TP_PACKED_GEMM_H
#define TP_PACKED_GEMM_H

#include "tp_runtime.h"

#include <algorithm>
#include <cblas.h>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tp::rt {
namespace packed {

constexpr int64_t kPanel = 32;     // columns per panel: two 16-float vectors
constexpr int64_t kTileRows = 8;   // rows per micro-tile: 16 accumulators
constexpr int64_t kDepthBlock = 256; // k per pass: a panel slice fits L1
constexpr int64_t kRowBlock = 256;   // rows per pass: their A block fits L2

inline int64_t packedFloats(int64_t k, int64_t n) {
  return (n + kPanel - 1) / kPanel * kPanel * k;
}

/// B [K x N] (stored [N x K] when `transposed`, row stride `ldb`) as
/// panels of kPanel columns, each K rows of kPanel floats, zero-padded.
inline void pack(const float *b, int64_t ldb, bool transposed, int64_t k,
                 int64_t n, float *out) {
  for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
    int64_t cols = std::min(kPanel, n - n0);
    float *panel = out + n0 * k;
    for (int64_t kk = 0; kk < k; ++kk) {
      float *row = panel + kk * kPanel;
      for (int64_t j = 0; j < cols; ++j)
        row[j] = transposed ? b[(n0 + j) * ldb + kk] : b[kk * ldb + n0 + j];
      std::fill(row + cols, row + kPanel, 0.0f);
    }
  }
}

#if defined(__AVX512F__)
/// C[Rows x cols] (+)= A[Rows x k] * panel[k x kPanel], cols <= kPanel.
template <int Rows>
inline void tile(const float *a, int64_t lda, const float *panel, int64_t k,
                 float *c, int64_t ldc, int64_t cols, bool accumulate) {
  __m512 acc[Rows][2];
  for (int r = 0; r < Rows; ++r) {
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    // C's rows are far apart: start fetching them while the loop runs.
    _mm_prefetch(reinterpret_cast<const char *>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(c + r * ldc + 16),
                 _MM_HINT_T0);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 b0 = _mm512_loadu_ps(panel + kk * kPanel);
    __m512 b1 = _mm512_loadu_ps(panel + kk * kPanel + 16);
    for (int r = 0; r < Rows; ++r) {
      __m512 ar = _mm512_set1_ps(a[r * lda + kk]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
  }
  auto mask = [](int64_t count) {
    return static_cast<__mmask16>(
        count >= 16 ? 0xFFFF : count <= 0 ? 0 : (1u << count) - 1);
  };
  __mmask16 low = mask(cols), high = mask(cols - 16);
  for (int r = 0; r < Rows; ++r) {
    float *row = c + r * ldc;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(low, row));
      acc[r][1] =
          _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(high, row + 16));
    }
    _mm512_mask_storeu_ps(row, low, acc[r][0]);
    _mm512_mask_storeu_ps(row + 16, high, acc[r][1]);
  }
}

/// C[m x n] (+)= A[m x k] * B, B packed. Blocked so that a panel's slice
/// stays in L1 across the row tiles and the rows' A block in L2.
__attribute__((noinline)) inline void
gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
     const float *packedB, float *c, int64_t ldc, bool accumulate) {
  for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
    int64_t mEnd = std::min(m, m0 + kRowBlock);
    for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
      int64_t depth = std::min(kDepthBlock, k - k0);
      bool add = accumulate || k0 > 0;
      for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
        const float *panel = packedB + n0 * k + k0 * kPanel;
        int64_t cols = std::min(kPanel, n - n0);
        int64_t r = m0;
        for (; r + kTileRows <= mEnd; r += kTileRows)
          tile<kTileRows>(a + r * lda + k0, lda, panel, depth, c + r * ldc + n0,
                          ldc, cols, add);
        const float *aTail = a + r * lda + k0;
        float *cTail = c + r * ldc + n0;
        switch (mEnd - r) {
#define TP_PACKED_TAIL(ROWS)                                                   \
  case ROWS:                                                                   \
    tile<ROWS>(aTail, lda, panel, depth, cTail, ldc, cols, add);               \
    break;
          TP_PACKED_TAIL(1)
          TP_PACKED_TAIL(2)
          TP_PACKED_TAIL(3)
          TP_PACKED_TAIL(4)
          TP_PACKED_TAIL(5)
          TP_PACKED_TAIL(6)
          TP_PACKED_TAIL(7)
#undef TP_PACKED_TAIL
        default:
          break;
        }
      }
    }
  }
}
#endif // __AVX512F__

} // namespace packed

/// C[m x n] = A[m x k] * op(B) (+ C when `accumulate`), B a weight that
/// stays at `b` for the rank's lifetime.
__attribute__((noinline)) inline void
weightGemm(RankContext *context, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const float *b, int64_t ldb,
           bool transposed, float *c, int64_t ldc, bool accumulate) {
#if defined(__AVX512F__)
  void *&slot = context->packedWeight({b, k, n, ldb, transposed});
  if (!slot) {
    slot = allocate(packed::packedFloats(k, n) * int64_t(sizeof(float)));
    packed::pack(b, ldb, transposed, k, n, static_cast<float *>(slot));
  }
  packed::gemm(m, n, k, a, lda, static_cast<const float *>(slot), c, ldc,
               accumulate);
#else
  (void)context;
  cblas_sgemm(CblasRowMajor, CblasNoTrans,
              transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda,
              b, ldb, accumulate ? 1.0f : 0.0f, c, ldc);
#endif
}

} // namespace tp::rt

#endif // TP_PACKED_GEMM_H
