//===- LinalgMatchers.h - generics the emitters lower specially -*- C++ -*-===//
//
// The forms of linalg.generic that both emitters (C++ and CUDA) recognise
// before falling back to a loop nest or a kernel: contractions that are a
// (batched) GEMM on row-major buffers, and one-hot "lookups". Defined in
// EmitLinalg.cpp, so that the CPU and GPU targets agree on what is a GEMM.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_EMIT_LINALGMATCHERS_H
#define TP_LIB_TARGET_EMIT_LINALGMATCHERS_H

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Support/IndentedOstream.h"
#include "llvm/ADT/SetVector.h"

#include <optional>

namespace mlir::tp::emit {

/// One row-major GEMM per batch element: out[b] (m x n) = op(lhs[b]) (m x k)
/// * op(rhs[b]) (k x n), with leading dims lda/ldb/ldc and batch strides in
/// elements (0: the operand is shared by every batch element). An f32
/// product may read two f16 or two bf16 operands, which its body extends
/// (tp-convert-dtype): it accumulates in f32.
struct Gemm {
  Value lhs, rhs;
  Type lhsElement, rhsElement; // as stored
  bool transLhs = false, transRhs = false;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t strideLhs = 0, strideRhs = 0, strideOut = 0;
  /// Batch elements that read one rhs matrix: element b reads matrix
  /// b / rhsGroup (the fused attention's K and V under grouped-query
  /// attention, read without their repeat to the query heads).
  int64_t rhsGroup = 1;
};

/// Which operand element types a GEMM may read.
enum class GemmOperands {
  /// One type for both (as BLAS and cuBLAS multiply them): the output's,
  /// or both f16 or both bf16 for an f32 output.
  Same,
  /// Each the output's or a narrow one on its own: the fused attention's
  /// P V, whose P never reaches memory, reads a bf16 P against the f32 KV
  /// cache of a --dtype bf16 decoder.
  Mixed,
};

/// The GEMM `op` computes, or failure when it is not one.
FailureOr<Gemm> matchGemm(linalg::GenericOp op,
                          GemmOperands operands = GemmOperands::Same);

/// True when `init` is a linalg.fill of +0 (or a trivial scf.if of one), so
/// a GEMM may overwrite it.
bool isZeroFill(Value init);

/// True when every user of `fill` is a GEMM that overwrites its init (a
/// zero fill is BLAS's beta = 0): the fill need not run at all.
bool onlyFeedsGemms(linalg::FillOp fill);

/// The generic that is the only reader of `gemm`'s f32 result, when it is
/// tp-convert-dtype's rounding of it to bf16 (element by element: a
/// saturating clamp, then truncf), so the GEMM may write bf16 itself.
linalg::GenericOp roundingToBF16Of(linalg::GenericOp gemm);

/// A sum over reduction dim `dim` of select(key == index(dim) + offset, x, 0)
/// (or x * select(..., c, 0)): only the iteration where index(dim) == key -
/// offset contributes. With `scatter`, `dim` is instead a parallel dim that
/// only the output reads: out[.., index(dim), ..] += x where it matches (an
/// embedding's gradient, a scatter-add), every other element unchanged.
struct Lookup {
  unsigned dim;
  bool scatter = false;
  /// The ops (in body order) that compute the key; they do not depend on
  /// the reduction index.
  llvm::SetVector<Operation *> keyOps;
  Value key;
  Value offset; // may be null
};

/// The lookup `op` computes, if it is one; scatters only with
/// `allowScatter` (the C++ target emits them; the CUDA target runs them as
/// loop nests).
std::optional<Lookup> matchLookup(linalg::GenericOp op,
                                  bool allowScatter = false);

/// Scaled dot-product attention that both emitters run fused
/// (MatchAttention.cpp): S = Q Kᵀ, X = f(S, ...), softmax over the keys,
/// O = P V.
struct FusedAttention {
  linalg::GenericOp scores, max, exp, sum, probs, out;
  /// tp-convert-dtype's rounding of S, between S and X (or null).
  linalg::GenericOp rounding;
  /// X = f(S, ...): elementwise generics from S's reader to X's producer
  /// (none when X is S), and the operand of each that is the one before
  /// (S, or its rounding, for the first).
  SmallVector<linalg::GenericOp> logits;
  SmallVector<Value> chained;
  /// Reshapes of the batch dims between S and X's generics, and between
  /// them and X (the softmax may see another grouping of the batch).
  SmallVector<Operation *> reshapes;
  /// A copy that only swaps K's last two dims, folded into `qk` (which
  /// reads its input instead), or null.
  linalg::GenericOp keyTranspose;
  /// The repeats of K's and V's heads to the query heads (a broadcast
  /// and the reshape merging it into the heads dim) that the products
  /// read through `rhsGroup` instead.
  SmallVector<Operation *> headRepeats;
  /// Whether that copy's payload does more than copy (rounds f32 keys, a
  /// model input, to the bf16 of Q, say): the emitters run it on each
  /// element of K they read, and `qk.rhsElement` is the input's type.
  bool keyPayload = false;
  Gemm qk, pv;
  /// Where K and V are KV caches (tp.cache_update of every position), the
  /// keys a call has filled: [0, position[0] + count). Null otherwise.
  Value position;
  int64_t count = 0;
};

/// The attention chain that ends in the P V product `out`, or nothing.
std::optional<FusedAttention> matchAttention(linalg::GenericOp out);

/// The loop indices of `logits`, a generic of X's chain (over [batch...,
/// queries, keys]), inside a fused loop over batch element `b`, query
/// `row` and key `key`: declares its batch indices on `os` as `prefix`0,
/// `prefix`1, ... and returns every index's name.
SmallVector<std::string> declareChainIndices(raw_indented_ostream &os,
                                             linalg::GenericOp logits,
                                             StringRef prefix, StringRef b,
                                             StringRef row, StringRef key);

/// The kernel tp-select-kernels chose for `op` (#tp.kernel), if any.
std::optional<Kernel> getKernel(Operation *op);

/// Fuses each all-parallel generic into its only user where that user is a
/// loop nest of ours (not a GEMM or a lookup), within bounds on the fused
/// nest's operands and payload (FuseElementwise.cpp).
LogicalResult fuseElementwiseChains(ModuleOp module);

} // namespace mlir::tp::emit

#endif // TP_LIB_TARGET_EMIT_LINALGMATCHERS_H
