//===- tp_packed_gemm.h - products with a weight packed once per rank -----===//
//
// Part of every --target cpu artifact (model.cpp includes it). BLAS packs
// its operands into panels on every call; for a product with few rows (a
// decode step's batch, a short encoder input) packing the weight costs
// as much as the product. weightGemm packs a resident weight once per rank,
// into panels of two vectors' columns (32 floats with AVX-512, 16 with
// AVX2), k-major, that the micro-kernel streams with two vector loads per
// k; the rank keeps them as long as it lives. residentWeightGemm packs a
// weight that only such products read into its own memory instead. Without
// AVX-512 or AVX2 and FMA both are BLAS calls.
//
//===----------------------------------------------------------------------===//

#ifndef TP_PACKED_GEMM_H
#define TP_PACKED_GEMM_H

#include "tp_runtime.h"

#include <algorithm>
#include <cblas.h>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TP_PACKED_GEMM_KERNEL 1
#include <immintrin.h>
#endif

namespace tp::rt {
namespace packed {

#if defined(__AVX512F__)
/// The vector unit the micro-kernel runs on: 16 floats, masks as bits.
struct Vector {
  using Type = __m512;
  using Mask = __mmask16;
  static constexpr int64_t kWidth = 16;
  static constexpr int kTileRows = 8; // 16 accumulators of 32 registers
  static constexpr int64_t kMaxRows = 64; // past it, OpenBLAS's is faster
  static Type zero() { return _mm512_setzero_ps(); }
  static Type load(const float *p) { return _mm512_loadu_ps(p); }
  static Type broadcast(const float *p) { return _mm512_set1_ps(*p); }
  static Type fma(Type a, Type b, Type c) { return _mm512_fmadd_ps(a, b, c); }
  static Type add(Type a, Type b) { return _mm512_add_ps(a, b); }
  static void store(float *p, Type v) { _mm512_storeu_ps(p, v); }
  static Mask mask(int64_t count) {
    return static_cast<Mask>(count >= 16 ? 0xFFFF
                             : count <= 0 ? 0
                                          : (1u << count) - 1);
  }
  static Type load(Mask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float *p, Mask m, Type v) { _mm512_mask_storeu_ps(p, m, v); }
};
#elif defined(TP_PACKED_GEMM_KERNEL)
/// AVX2 with FMA: 8 floats, masks as lanes of all ones.
struct Vector {
  using Type = __m256;
  using Mask = __m256i;
  static constexpr int64_t kWidth = 8;
  static constexpr int kTileRows = 6; // 12 accumulators of 16 registers
  static constexpr int64_t kMaxRows = 128; // past it, OpenBLAS's is faster
  static Type zero() { return _mm256_setzero_ps(); }
  static Type load(const float *p) { return _mm256_loadu_ps(p); }
  static Type broadcast(const float *p) { return _mm256_broadcast_ss(p); }
  static Type fma(Type a, Type b, Type c) { return _mm256_fmadd_ps(a, b, c); }
  static Type add(Type a, Type b) { return _mm256_add_ps(a, b); }
  static void store(float *p, Type v) { _mm256_storeu_ps(p, v); }
  static Mask mask(int64_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Type load(Mask m, const float *p) { return _mm256_maskload_ps(p, m); }
  static void store(float *p, Mask m, Type v) { _mm256_maskstore_ps(p, m, v); }
};
#endif

#if defined(TP_PACKED_GEMM_KERNEL)
constexpr int64_t kPanel = 2 * Vector::kWidth; // columns per panel
constexpr int64_t kTileRows = Vector::kTileRows; // rows per micro-tile
#else
constexpr int64_t kPanel = 32;
constexpr int64_t kTileRows = 8;
#endif
constexpr int64_t kDepthBlock = 256; // k per pass: a panel slice fits L1
constexpr int64_t kRowBlock = 256;   // rows per pass: their A block fits L2
constexpr int64_t kColumnBlock = 256; // columns per pass: so does C's block

inline int64_t packedFloats(int64_t k, int64_t n) {
  return (n + kPanel - 1) / kPanel * kPanel * k;
}

/// B [K x N] (stored [N x K] when `transposed`, row stride `ldb`) as
/// panels of kPanel columns, each K rows of kPanel floats, zero-padded.
/// B [K x N] is copied kPackRows rows at a time, read a row at a time, not
/// a cache line from each of K rows per panel (3x faster on GPT-2's
/// weights); B stored transposed is read kPanel rows at a time.
inline void pack(const float *b, int64_t ldb, bool transposed, int64_t k,
                 int64_t n, float *out) {
  constexpr int64_t kPackRows = 32;
  if (transposed) {
    for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
      int64_t cols = std::min(kPanel, n - n0);
      float *panel = out + n0 * k;
      for (int64_t kk = 0; kk < k; ++kk) {
        float *row = panel + kk * kPanel;
        for (int64_t j = 0; j < cols; ++j)
          row[j] = b[(n0 + j) * ldb + kk];
        std::fill(row + cols, row + kPanel, 0.0f);
      }
    }
    return;
  }
  for (int64_t k0 = 0; k0 < k; k0 += kPackRows) {
    int64_t kEnd = std::min(k, k0 + kPackRows);
    for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
      int64_t cols = std::min(kPanel, n - n0);
      float *panel = out + n0 * k;
      for (int64_t kk = k0; kk < kEnd; ++kk) {
        float *row = panel + kk * kPanel;
        std::memcpy(row, b + kk * ldb + n0, cols * sizeof(float));
        std::fill(row + cols, row + kPanel, 0.0f);
      }
    }
  }
}

#if defined(TP_PACKED_GEMM_KERNEL)
// Every loop over a tile's rows is unrolled: an accumulator indexed by a
// run-time row lives on the stack, and GCC then stores all of them on
// every k (a third of the FMA rate on AVX2).
#if defined(__clang__)
#define TP_PACKED_UNROLL _Pragma("unroll")
#else
#define TP_PACKED_UNROLL _Pragma("GCC unroll 16")
#endif

/// C[Rows x cols] (+)= A[Rows x k] * panel[k x kPanel], cols <= kPanel.
/// A's element (r, kk) is a[r * aRow + kk * aDepth]: (lda, 1) as stored,
/// (1, Rows) packed (packRows).
template <int Rows>
inline void tile(const float *a, int64_t aRow, int64_t aDepth,
                 const float *panel, int64_t k, float *c, int64_t ldc,
                 int64_t cols, bool accumulate) {
  using V = Vector;
  constexpr int64_t w = V::kWidth;
  typename V::Type acc[Rows][2];
  TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
    acc[r][0] = acc[r][1] = V::zero();
    // C's rows are far apart: start fetching them while the loop runs.
    _mm_prefetch(reinterpret_cast<const char *>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(c + r * ldc + w),
                 _MM_HINT_T0);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    typename V::Type b0 = V::load(panel + kk * kPanel);
    typename V::Type b1 = V::load(panel + kk * kPanel + w);
    TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
      typename V::Type ar = V::broadcast(a + r * aRow + kk * aDepth);
      acc[r][0] = V::fma(ar, b0, acc[r][0]);
      acc[r][1] = V::fma(ar, b1, acc[r][1]);
    }
  }
  if (cols == kPanel) {
    TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
      float *row = c + r * ldc;
      if (accumulate) {
        acc[r][0] = V::add(acc[r][0], V::load(row));
        acc[r][1] = V::add(acc[r][1], V::load(row + w));
      }
      V::store(row, acc[r][0]);
      V::store(row + w, acc[r][1]);
    }
    return;
  }
  // The last panel of a weight whose columns kPanel does not divide.
  typename V::Mask low = V::mask(cols), high = V::mask(cols - w);
  TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
    float *row = c + r * ldc;
    if (accumulate) {
      acc[r][0] = V::add(acc[r][0], V::load(low, row));
      acc[r][1] = V::add(acc[r][1], V::load(high, row + w));
    }
    V::store(row, low, acc[r][0]);
    V::store(row + w, high, acc[r][1]);
  }
}

/// tile<rows> for the 1 to Rows rows left below the last full tile.
template <int Rows>
inline void tailTile(int64_t rows, const float *a, int64_t aRow,
                     int64_t aDepth, const float *panel, int64_t k, float *c,
                     int64_t ldc, int64_t cols, bool accumulate) {
  if (rows == Rows)
    return tile<Rows>(a, aRow, aDepth, panel, k, c, ldc, cols, accumulate);
  if constexpr (Rows > 1)
    tailTile<Rows - 1>(rows, a, aRow, aDepth, panel, k, c, ldc, cols,
                       accumulate);
}

/// Rows [0, m) of A [m x k] (row stride lda) for the blocked product: for
/// each depth block, its tiles of kTileRows rows (the last one shorter),
/// each depth-major, so that a tile reads its rows' k-th values side by
/// side instead of from kTileRows rows far apart.
inline void packRows(const float *a, int64_t lda, int64_t m, int64_t k,
                     float *out) {
  for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
    int64_t depth = std::min(kDepthBlock, k - k0);
    for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
      int64_t rows = std::min(kTileRows, m - r0);
      for (int64_t kk = 0; kk < depth; ++kk)
        for (int64_t r = 0; r < rows; ++r)
          out[kk * rows + r] = a[(r0 + r) * lda + k0 + kk];
      out += rows * depth;
    }
  }
}

/// C[m x n] (+)= A[m x k] * B, B packed. A few rows (a decode step's) take
/// each panel whole, in one sequential pass over it, reading A as stored.
/// More are blocked: a block of rows is packed (packRows) once, then a
/// panel's 256-deep slice stays in L1 across the row tiles, and the rows'
/// A block and the 256 columns of C they update stay in L2 across the
/// depth blocks.
__attribute__((noinline)) inline void
gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
     const float *packedB, float *c, int64_t ldc, bool accumulate) {
  if (m <= 2 * kTileRows) {
    for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
      const float *panel = packedB + n0 * k;
      int64_t cols = std::min(kPanel, n - n0);
      int64_t r = 0;
      for (; r + kTileRows <= m; r += kTileRows)
        tile<kTileRows>(a + r * lda, lda, 1, panel, k, c + r * ldc + n0, ldc,
                        cols, accumulate);
      if (r < m)
        tailTile<kTileRows - 1>(m - r, a + r * lda, lda, 1, panel, k,
                                c + r * ldc + n0, ldc, cols, accumulate);
    }
    return;
  }
  // One block of packed rows per thread (a rank's), kept between calls.
  static thread_local std::vector<float> packedA;
  packedA.resize(std::min(m, kRowBlock) * k);
  for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
    int64_t rows = std::min(kRowBlock, m - m0);
    packRows(a + m0 * lda, lda, rows, k, packedA.data());
    for (int64_t c0 = 0; c0 < n; c0 += kColumnBlock) {
      int64_t cEnd = std::min(n, c0 + kColumnBlock);
      for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
        int64_t depth = std::min(kDepthBlock, k - k0);
        bool add = accumulate || k0 > 0;
        const float *block = packedA.data() + rows * k0;
        for (int64_t n0 = c0; n0 < cEnd; n0 += kPanel) {
          const float *panel = packedB + n0 * k + k0 * kPanel;
          int64_t cols = std::min(kPanel, n - n0);
          int64_t r = 0;
          for (; r + kTileRows <= rows; r += kTileRows)
            tile<kTileRows>(block + r * depth, 1, kTileRows, panel, depth,
                            c + (m0 + r) * ldc + n0, ldc, cols, add);
          if (r < rows)
            tailTile<kTileRows - 1>(rows - r, block + r * depth, 1, rows - r,
                                    panel, depth, c + (m0 + r) * ldc + n0,
                                    ldc, cols, add);
        }
      }
    }
  }
}
#endif // TP_PACKED_GEMM_KERNEL

} // namespace packed

/// C[m x n] = A[m x k] * op(B) (+ C when `accumulate`), B a weight that
/// stays at `b` for the rank's lifetime.
__attribute__((noinline)) inline void
weightGemm(RankContext *context, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const float *b, int64_t ldb,
           bool transposed, float *c, int64_t ldc, bool accumulate) {
#if defined(TP_PACKED_GEMM_KERNEL)
  if (m <= packed::Vector::kMaxRows) {
    void *&slot = context->packedWeight({b, k, n, ldb, transposed});
    if (!slot) {
      float *panels = static_cast<float *>(allocateLarge(
          packed::packedFloats(k, n) * int64_t(sizeof(float))));
      packed::pack(b, ldb, transposed, k, n, panels);
      slot = panels;
    }
    packed::gemm(m, n, k, a, lda, static_cast<const float *>(slot), c, ldc,
                 accumulate);
    return;
  }
#endif
  (void)context;
  cblas_sgemm(CblasRowMajor, CblasNoTrans,
              transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda,
              b, ldb, accumulate ? 1.0f : 0.0f, c, ldc);
}

/// weightGemm for a weight that only such products read, all with the same
/// layout (tp-compile checked every use in the artifact): on its first use
/// the rank packs it into its own memory (through scratch memory of one
/// panel, or of the weight when stored [K x N], freed at once), so the rank
/// holds it once, as panels; every product with it, of any number of rows,
/// then reads the panels. The caller guarantees that `n` is a multiple of
/// 32 (so the panels take the same memory) and that `ldb` is the weight's
/// row length.
__attribute__((noinline)) inline void
residentWeightGemm(RankContext *context, int64_t m, int64_t n, int64_t k,
                   const float *a, int64_t lda, const float *b, int64_t ldb,
                   bool transposed, float *c, int64_t ldc, bool accumulate) {
#if defined(TP_PACKED_GEMM_KERNEL)
  void *&slot = context->packedWeight({b, k, n, ldb, transposed});
  if (!slot) {
    // The runtime owns the weight's (writable) memory; nothing else reads
    // it as stored.
    float *weight = const_cast<float *>(b);
    if (transposed) {
      // Stored [N x K]: panel p comes from rows [p * kPanel, +kPanel), the
      // very memory it goes to, so one panel of scratch is enough.
      int64_t bytes = packed::kPanel * k * int64_t(sizeof(float));
      float *scratch = static_cast<float *>(allocate(bytes));
      for (int64_t n0 = 0; n0 < n; n0 += packed::kPanel) {
        std::memcpy(scratch, weight + n0 * k, bytes);
        packed::pack(scratch, k, true, k, packed::kPanel, weight + n0 * k);
      }
      release(scratch);
    } else {
      // Stored [K x N]: every panel takes a column strip of every row.
      int64_t bytes = k * n * int64_t(sizeof(float));
      float *scratch = static_cast<float *>(allocate(bytes));
      packed::pack(b, ldb, false, k, n, scratch);
      std::memcpy(weight, scratch, bytes);
      release(scratch);
    }
    slot = weight;
  }
  packed::gemm(m, n, k, a, lda, b, c, ldc, accumulate);
#else
  (void)context;
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, transposed ? CblasNoTrans : CblasTrans,
                transposed ? n : k, transposed ? k : n, 1.0f, b, ldb, a, 1,
                accumulate ? 1.0f : 0.0f, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans,
              transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda,
              b, ldb, accumulate ? 1.0f : 0.0f, c, ldc);
#endif
}

} // namespace tp::rt

#endif // TP_PACKED_GEMM_H
