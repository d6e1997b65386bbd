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

#include "mlir/Dialect/Linalg/IR/Linalg.h"
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
};

/// The GEMM `op` computes, or failure when it is not one.
FailureOr<Gemm> matchGemm(linalg::GenericOp op);

/// True when `init` is a linalg.fill of +0 (or a trivial scf.if of one), so
/// a GEMM may overwrite it.
bool isZeroFill(Value init);

/// True when every user of `fill` is a GEMM that overwrites its init (a
/// zero fill is BLAS's beta = 0): the fill need not run at all.
bool onlyFeedsGemms(linalg::FillOp fill);

/// A sum over reduction dim `dim` of select(key == index(dim) + offset, x, 0):
/// only the iteration where index(dim) == key - offset contributes.
struct Lookup {
  unsigned dim;
  /// The ops (in body order) that compute the key; they do not depend on
  /// the reduction index.
  llvm::SetVector<Operation *> keyOps;
  Value key;
  Value offset; // may be null
};

/// The lookup `op` computes, if it is one.
std::optional<Lookup> matchLookup(linalg::GenericOp op);

/// Fuses each all-parallel generic into its only user where that user is a
/// loop nest of ours (not a GEMM or a lookup), within bounds on the fused
/// nest's operands and payload (FuseElementwise.cpp).
LogicalResult fuseElementwiseChains(ModuleOp module);

} // namespace mlir::tp::emit

#endif // TP_LIB_TARGET_EMIT_LINALGMATCHERS_H
