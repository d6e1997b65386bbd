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
// A weight stored in bf16 or f16 (tp-compile --dtype) is packed as it is
// stored, half the bytes of f32, and widened to f32 in registers as the
// micro-kernel loads it; the products accumulate in f32. A decode step
// reads every weight once, so it is bound by the weights' bytes: half the
// bytes made a GPT-2-small-shaped decode step 1.5x faster than f32.
// Without the kernel (or, for f16, without F16C) the weight is widened
// into f32 for BLAS on every call.
//
//===----------------------------------------------------------------------===//

#ifndef TP_PACKED_GEMM_H
#define TP_PACKED_GEMM_H

#include "tp_runtime.h"

#include <algorithm>
#include <cblas.h>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TP_PACKED_GEMM_KERNEL 1
#include <immintrin.h>
#endif

namespace tp::rt {

/// Work a product runs on each block of its output columns, [first, first +
/// count) of every row, as soon as the block is final: the elementwise op
/// that reads the product (a bias add, an activation) while the block is
/// still in cache, instead of a pass of its own over the whole output
/// afterwards. model.cpp passes its own lambda; `run` is null for none.
struct Epilogue {
  void (*run)(const void *state, int64_t first, int64_t count) = nullptr;
  const void *state = nullptr;

  template <typename F> static Epilogue of(const F &f) {
    return {[](const void *state, int64_t first, int64_t count) {
              (*static_cast<const F *>(state))(first, count);
            },
            &f};
  }
  void operator()(int64_t first, int64_t count) const {
    if (run)
      run(state, first, count);
  }
};

/// A bfloat16 weight as stored: its bits (model.cpp's BFloat16 has this
/// layout; the call sites cast).
struct BF16Bits {
  std::uint16_t bits;
};

namespace packed {

#if defined(__AVX512F__)
/// The vector unit the micro-kernel runs on: 16 floats, masks as bits.
struct Vector {
  using Type = __m512;
  using Mask = __mmask16;
  static constexpr int64_t kWidth = 16;
  static constexpr int kTileRows = 8;      // 16 accumulators of 32 registers
  static constexpr int64_t kMaxRows = 128; // see weightGemm
  static Type zero() { return _mm512_setzero_ps(); }
  static Type load(const float *p) { return _mm512_loadu_ps(p); }
  static Type broadcast(const float *p) { return _mm512_set1_ps(*p); }
  static Type fma(Type a, Type b, Type c) { return _mm512_fmadd_ps(a, b, c); }
  static Type add(Type a, Type b) { return _mm512_add_ps(a, b); }
  static void store(float *p, Type v) { _mm512_storeu_ps(p, v); }
  static Mask mask(int64_t count) {
    return static_cast<Mask>(count >= 16  ? 0xFFFF
                             : count <= 0 ? 0
                                          : (1u << count) - 1);
  }
  static Type load(Mask m, const float *p) {
    return _mm512_maskz_loadu_ps(m, p);
  }
  static void store(float *p, Mask m, Type v) {
    _mm512_mask_storeu_ps(p, m, v);
  }
  /// kWidth weights as f32, from any stored type.
  static Type widen(const float *p) { return load(p); }
  static Type widen(const BF16Bits *p) {
    __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static Type widen(const _Float16 *p) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
};
#elif defined(TP_PACKED_GEMM_KERNEL)
/// AVX2 with FMA: 8 floats, masks as lanes of all ones.
struct Vector {
  using Type = __m256;
  using Mask = __m256i;
  static constexpr int64_t kWidth = 8;
  static constexpr int kTileRows = 6;      // 12 accumulators of 16 registers
  static constexpr int64_t kMaxRows = 128; // see weightGemm
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
  /// kWidth weights as f32, from any stored type.
  static Type widen(const float *p) { return load(p); }
  static Type widen(const BF16Bits *p) {
    __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
#if defined(__F16C__)
  static Type widen(const _Float16 *p) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
#endif
};
#endif

#if defined(TP_PACKED_GEMM_KERNEL)
constexpr int64_t kPanel = 2 * Vector::kWidth;   // columns per panel
constexpr int64_t kTileRows = Vector::kTileRows; // rows per micro-tile
#else
constexpr int64_t kPanel = 32;
constexpr int64_t kTileRows = 8;
#endif
constexpr int64_t kPrefetchBytes = 1024; // ahead in a narrow panel's stream
constexpr int64_t kFullTilePrefetchBytes = 2048;    // ahead in f32's, see tile
constexpr int64_t kWidenPanelRows = 16 * kTileRows; // see gemm

/// Whether the micro-kernel widens weights stored as W itself (f16 needs
/// F16C); weightGemm widens the others into f32 for BLAS.
template <typename W>
constexpr bool kWidensInRegisters =
#if defined(TP_PACKED_GEMM_KERNEL)
    std::is_same_v<W, float> || std::is_same_v<W, BF16Bits>
#if defined(__AVX512F__) || defined(__F16C__)
    || std::is_same_v<W, _Float16>
#endif
    ;
#else
    false;
#endif

inline int64_t packedElements(int64_t k, int64_t n) {
  return (n + kPanel - 1) / kPanel * kPanel * k;
}

/// B [K x N] (stored [N x K] when `transposed`, row stride `ldb`) as
/// panels of kPanel columns, each K rows of kPanel weights, zero-padded,
/// in B's own element type.
/// B [K x N] is copied kPackRows rows at a time, read a row at a time, not
/// a cache line from each of K rows per panel (3x faster on GPT-2's
/// weights); B stored transposed is read kPanel rows at a time.
template <typename W>
inline void pack(const W *b, int64_t ldb, bool transposed, int64_t k, int64_t n,
                 W *out) {
  constexpr int64_t kPackRows = 32;
  if (transposed) {
    for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
      int64_t cols = std::min(kPanel, n - n0);
      W *panel = out + n0 * k;
      for (int64_t kk = 0; kk < k; ++kk) {
        W *row = panel + kk * kPanel;
        for (int64_t j = 0; j < cols; ++j)
          row[j] = b[(n0 + j) * ldb + kk];
        std::fill(row + cols, row + kPanel, W());
      }
    }
    return;
  }
  for (int64_t k0 = 0; k0 < k; k0 += kPackRows) {
    int64_t kEnd = std::min(k, k0 + kPackRows);
    for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
      int64_t cols = std::min(kPanel, n - n0);
      W *panel = out + n0 * k;
      for (int64_t kk = k0; kk < kEnd; ++kk) {
        W *row = panel + kk * kPanel;
        std::memcpy(row, b + kk * ldb + n0, cols * sizeof(W));
        std::fill(row + cols, row + kPanel, W());
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
template <int Rows, typename W>
inline void tile(const float *a, int64_t lda, const W *panel, int64_t k,
                 float *c, int64_t ldc, int64_t cols, bool accumulate) {
  using V = Vector;
  constexpr int64_t w = V::kWidth;
  // A tile of few rows has too few accumulators to cover the FMA's latency
  // (each k adds into the same two): it keeps Splits sets, for
  // consecutive k, summed at the end. With one row a bf16 weight otherwise
  // ran at the latency, 2x under the memory's bandwidth.
  constexpr int Splits = Rows == 1 ? 4 : Rows <= 3 ? 2 : 1;
  typename V::Type acc[Splits][Rows][2];
  TP_PACKED_UNROLL
  for (int s = 0; s < Splits; ++s)
    TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r)
    acc[s][r][0] = acc[s][r][1] = V::zero();
  TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
    // C's rows are far apart: start fetching them while the loop runs.
    _mm_prefetch(reinterpret_cast<const char *>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(c + r * ldc + w), _MM_HINT_T0);
  }
  auto step = [&](int s, int64_t kk) __attribute__((always_inline)) {
    // A narrow weight's panels are fetched kPrefetchBytes ahead, a line
    // per line (a step reads half of one): 17.6 -> 15.7 ms per decode
    // step of a GPT-2-small-shaped model in bf16. The same made f32's
    // slower (22.9 -> 26.9 ms), whose twice as many bytes per step keep
    // the hardware prefetcher ahead by themselves.
    //
    // An f32 weight's full tiles (a prefill chunk's or a batch's rows, not
    // a decode step's one) fetch each panel row kFullTilePrefetchBytes
    // ahead: the first tile over a panel streams it from memory, where the
    // hardware prefetcher alone kept it waiting, not at the FMAs. 6
    // layers of TinyLlama-1.1B's projections (bench/packed_gemm.py --sets
    // llama) on a 2-core AVX-512 Xeon: 33 -> 45 GFLOP/s at 8 rows, 51 -> 64
    // at 16, 99 -> 116 at 64, 126 -> 143 at 256.
    if constexpr (sizeof(W) < sizeof(float)) {
      if ((s * kPanel * int64_t(sizeof(W))) % 64 == 0)
        _mm_prefetch(reinterpret_cast<const char *>(panel + kk * kPanel) +
                         kPrefetchBytes,
                     _MM_HINT_T0);
    } else if constexpr (Rows == kTileRows) {
      for (int64_t line = 0; line < kPanel * int64_t(sizeof(W)); line += 64)
        _mm_prefetch(reinterpret_cast<const char *>(panel + kk * kPanel) +
                         kFullTilePrefetchBytes + line,
                     _MM_HINT_T0);
    }
    typename V::Type b0 = V::widen(panel + kk * kPanel);
    typename V::Type b1 = V::widen(panel + kk * kPanel + w);
    TP_PACKED_UNROLL
    for (int r = 0; r < Rows; ++r) {
      typename V::Type ar = V::broadcast(a + r * lda + kk);
      acc[s][r][0] = V::fma(ar, b0, acc[s][r][0]);
      acc[s][r][1] = V::fma(ar, b1, acc[s][r][1]);
    }
  };
  int64_t kk = 0;
  for (; kk + Splits <= k; kk += Splits)
    TP_PACKED_UNROLL
  for (int s = 0; s < Splits; ++s)
    step(s, kk + s);
  for (; kk < k; ++kk)
    step(0, kk);
  TP_PACKED_UNROLL
  for (int s = 1; s < Splits; ++s)
    TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
    acc[0][r][0] = V::add(acc[0][r][0], acc[s][r][0]);
    acc[0][r][1] = V::add(acc[0][r][1], acc[s][r][1]);
  }
  if (cols == kPanel) {
    TP_PACKED_UNROLL
    for (int r = 0; r < Rows; ++r) {
      float *row = c + r * ldc;
      if (accumulate) {
        acc[0][r][0] = V::add(acc[0][r][0], V::load(row));
        acc[0][r][1] = V::add(acc[0][r][1], V::load(row + w));
      }
      V::store(row, acc[0][r][0]);
      V::store(row + w, acc[0][r][1]);
    }
    return;
  }
  // The last panel of a weight whose columns kPanel does not divide.
  typename V::Mask low = V::mask(cols), high = V::mask(cols - w);
  TP_PACKED_UNROLL
  for (int r = 0; r < Rows; ++r) {
    float *row = c + r * ldc;
    if (accumulate) {
      acc[0][r][0] = V::add(acc[0][r][0], V::load(low, row));
      acc[0][r][1] = V::add(acc[0][r][1], V::load(high, row + w));
    }
    V::store(row, low, acc[0][r][0]);
    V::store(row + w, high, acc[0][r][1]);
  }
}

/// tile<rows> for the 1 to Rows rows left below the last full tile.
template <int Rows, typename W>
inline void tailTile(int64_t rows, const float *a, int64_t lda, const W *panel,
                     int64_t k, float *c, int64_t ldc, int64_t cols,
                     bool accumulate) {
  if (rows == Rows)
    return tile<Rows>(a, lda, panel, k, c, ldc, cols, accumulate);
  if constexpr (Rows > 1)
    tailTile<Rows - 1>(rows, a, lda, panel, k, c, ldc, cols, accumulate);
}

/// C[m x n] (+)= A[m x k] * B, B packed: each panel whole, in one
/// sequential pass over all of k per tile of rows, A read as stored. The
/// panel (k x 32 floats, 48 KB at k = 384) stays in L2 across the row
/// tiles and a tile's rows of A in L1 across its k. Measured against
/// blocking the depth by 256 with A packed into depth-major tiles per call
/// (what this did before), cycling through a model's weights on an AVX-512
/// EPYC: 1.06-1.17x at 32 to 1,024 rows on MiniLM's and GPT-2's
/// projections and GPT-2's LM head, 1.05-1.08x with one weight repeated;
/// 1.0-1.09x with AVX2 (docs/design.md).
///
/// A narrow weight (bf16, f16) at kWidenPanelRows rows or more has each
/// panel widened into f32 once, into a buffer of the thread's that stays
/// in L2, which its tiles then read: every tile widening the panel in
/// registers again costs a few instructions per k in a loop bound by the
/// FMAs. Widening is exact, so the sums are the same. bf16 weights on an
/// AVX-512 EPYC (bench/packed_gemm.py --dtype bf16): 1.07-1.12x at 128 to
/// 1,024 rows on GPT-2's products, 1.09-1.11x at 256 and 1,024 on
/// MiniLM's; below 128 rows the f32 panel's twice as many bytes read from
/// L2 by each tile cost more than the widening saves (0.91-0.93x at 64).
///
/// Each panel's columns of C are final once its tiles are done: `epilogue`
/// runs on them then, while they are in L2 (m x 32 floats).
template <typename W>
__attribute__((noinline)) void gemm(int64_t m, int64_t n, int64_t k,
                                    const float *a, int64_t lda,
                                    const W *packedB, float *c, int64_t ldc,
                                    bool accumulate, Epilogue epilogue) {
  auto tiles = [&](auto *panel, int64_t n0) {
    int64_t cols = std::min(kPanel, n - n0);
    int64_t r = 0;
    for (; r + kTileRows <= m; r += kTileRows)
      tile<kTileRows>(a + r * lda, lda, panel, k, c + r * ldc + n0, ldc, cols,
                      accumulate);
    if (r < m)
      tailTile<kTileRows - 1>(m - r, a + r * lda, lda, panel, k,
                              c + r * ldc + n0, ldc, cols, accumulate);
  };
  if constexpr (!std::is_same_v<W, float>) {
    if (m >= kWidenPanelRows) {
      static thread_local std::vector<float> wide;
      if (wide.size() < static_cast<size_t>(k * kPanel))
        wide.resize(k * kPanel);
      for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
        const W *panel = packedB + n0 * k;
        for (int64_t i = 0; i < k * kPanel; i += Vector::kWidth)
          Vector::store(wide.data() + i, Vector::widen(panel + i));
        tiles(static_cast<const float *>(wide.data()), n0);
        epilogue(n0, std::min(kPanel, n - n0));
      }
      return;
    }
  }
  for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
    tiles(packedB + n0 * k, n0);
    epilogue(n0, std::min(kPanel, n - n0));
  }
}
#endif // TP_PACKED_GEMM_KERNEL

} // namespace packed

namespace packed {

inline float widenScalar(float x) { return x; }
inline float widenScalar(_Float16 x) { return static_cast<float>(x); }
inline float widenScalar(BF16Bits x) {
  std::uint32_t word = static_cast<std::uint32_t>(x.bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

/// The product by BLAS, B widened into f32 first where it is narrower.
template <typename W>
void blasGemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
              const W *b, int64_t ldb, bool transposed, float *c, int64_t ldc,
              bool accumulate) {
  std::vector<float> wide;
  const float *bf;
  if constexpr (std::is_same_v<W, float>) {
    bf = b;
  } else {
    int64_t rows = transposed ? n : k;
    wide.resize(rows * ldb);
    for (int64_t i = 0; i < rows * ldb; ++i)
      wide[i] = widenScalar(b[i]);
    bf = wide.data();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans,
              transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, bf,
              ldb, accumulate ? 1.0f : 0.0f, c, ldc);
}

} // namespace packed

/// C[m x n] = A[m x k] * op(B) (+ C when `accumulate`), B a weight that
/// stays at `b` for the rank's lifetime, stored as W (float, BF16Bits or
/// _Float16): its panels keep that type. `epilogue` runs on blocks of C's
/// columns as they are final (all of them at once after BLAS).
template <typename W>
__attribute__((noinline)) void
weightGemm(RankContext *context, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const W *b, int64_t ldb,
           bool transposed, float *c, int64_t ldc, bool accumulate,
           Epilogue epilogue = {}) {
#if defined(TP_PACKED_GEMM_KERNEL)
  if constexpr (packed::kWidensInRegisters<W>) {
    // An f32 weight that is also read as stored gets a packed copy for
    // products of up to kMaxRows rows (1.2-1.5x sgemm's rate at 64-128
    // rows); past that sgemm's own packing is a small part of the product
    // and the copy's memory is not worth it. Narrow weights take the
    // kernel at any number of rows: BLAS would need them widened first.
    if (m <= packed::Vector::kMaxRows || !std::is_same_v<W, float>) {
      void *&slot = context->packedWeight({b, k, n, ldb, transposed});
      if (!slot) {
        W *panels = static_cast<W *>(
            allocateLarge(packed::packedElements(k, n) * int64_t(sizeof(W))));
        packed::pack(b, ldb, transposed, k, n, panels);
        slot = panels;
      }
      packed::gemm(m, n, k, a, lda, static_cast<const W *>(slot), c, ldc,
                   accumulate, epilogue);
      return;
    }
  }
#endif
  (void)context;
  packed::blasGemm(m, n, k, a, lda, b, ldb, transposed, c, ldc, accumulate);
  epilogue(0, n);
}

/// weightGemm for a weight that only such products read, all with the same
/// layout (tp-compile checked every use in the artifact): on its first use
/// the rank packs it into its own memory (through scratch memory of one
/// panel, or of the weight when stored [K x N], freed at once), so the rank
/// holds it once, as panels; every product with it, of any number of rows,
/// then reads the panels. The caller guarantees that `n` is a multiple of
/// 32 (so the panels take the same memory) and that `ldb` is the weight's
/// row length.
template <typename W>
__attribute__((noinline)) void
residentWeightGemm(RankContext *context, int64_t m, int64_t n, int64_t k,
                   const float *a, int64_t lda, const W *b, int64_t ldb,
                   bool transposed, float *c, int64_t ldc, bool accumulate,
                   Epilogue epilogue = {}) {
#if defined(TP_PACKED_GEMM_KERNEL)
  if constexpr (packed::kWidensInRegisters<W>) {
    void *&slot = context->packedWeight({b, k, n, ldb, transposed});
    if (!slot) {
      // The runtime owns the weight's (writable) memory; nothing else
      // reads it as stored.
      W *weight = const_cast<W *>(b);
      if (transposed) {
        // Stored [N x K]: panel p comes from rows [p * kPanel, +kPanel),
        // the very memory it goes to, so one panel of scratch is enough.
        int64_t bytes = packed::kPanel * k * int64_t(sizeof(W));
        W *scratch = static_cast<W *>(allocate(bytes));
        for (int64_t n0 = 0; n0 < n; n0 += packed::kPanel) {
          std::memcpy(scratch, weight + n0 * k, bytes);
          packed::pack(scratch, k, true, k, packed::kPanel, weight + n0 * k);
        }
        release(scratch);
      } else {
        // Stored [K x N]: every panel takes a column strip of every row.
        int64_t bytes = k * n * int64_t(sizeof(W));
        W *scratch = static_cast<W *>(allocate(bytes));
        packed::pack(b, ldb, false, k, n, scratch);
        std::memcpy(weight, scratch, bytes);
        release(scratch);
      }
      slot = weight;
    }
    packed::gemm(m, n, k, a, lda, b, c, ldc, accumulate, epilogue);
    return;
  }
#endif
  (void)context;
  if constexpr (std::is_same_v<W, float>) {
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, transposed ? CblasNoTrans : CblasTrans,
                  transposed ? n : k, transposed ? k : n, 1.0f, b, ldb, a, 1,
                  accumulate ? 1.0f : 0.0f, c, 1);
      epilogue(0, n);
      return;
    }
  }
  packed::blasGemm(m, n, k, a, lda, b, ldb, transposed, c, ldc, accumulate);
  epilogue(0, n);
}

} // namespace tp::rt

#endif // TP_PACKED_GEMM_H
