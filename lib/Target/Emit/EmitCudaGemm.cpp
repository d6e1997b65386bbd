//===- EmitCudaGemm.cpp - linalg.generic as cuBLAS calls ------------------===//
//
// A generic that kernel selection made a GEMM (#tp.kernel<gemm>) becomes
// cublas?gemmStridedBatched (cublasGemmStridedBatchedEx for f16 and bf16,
// accumulating in f32), for the contractions the C++ emitter gives to BLAS
// (LinalgMatchers.h).
//
//===----------------------------------------------------------------------===//

#include "CudaKernelWriter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::tp::emit;

/// The cudaDataType_t of an element type cuBLAS multiplies.
static StringRef cudaDataType(Type type) {
  if (type.isBF16())
    return "CUDA_R_16BF";
  if (type.isF16())
    return "CUDA_R_16F";
  return type.isF64() ? "CUDA_R_64F" : "CUDA_R_32F";
}

/// f16/bf16 operands (tp-convert-dtype): cublasGemmStridedBatchedEx on the
/// tensor cores, accumulating in f32 into the f32 output. When only
/// tp-convert-dtype's rounding to bf16 reads that output (a row-parallel
/// product before its all-reduce), cuBLAS writes the sum in bf16 itself and
/// the rounding's kernel goes: one launch and an f32 buffer fewer. The two
/// round to nearest even alike; they differ only for a sum beyond bf16's
/// largest finite value (within f32's top 0.4%), which the rounding kernel
/// saturates and cuBLAS makes infinite. An f16 sum keeps its rounding
/// kernel: one past 65504 is common enough for the difference to matter.
/// A rounding that a row group holds is left out of the group's kernel
/// (computedByProduct), which reads the bf16 sum instead.
static LogicalResult emitCublasGemmEx(CudaEmitter &e, linalg::GenericOp op,
                                      const Gemm &gemm, bool overwrite) {
  Value out = op.getResult(0);
  auto trans = [](bool t) { return t ? "CUBLAS_OP_T" : "CUBLAS_OP_N"; };
  std::string lhs = e.name(gemm.lhs), rhs = e.name(gemm.rhs);
  Type element = gemm.lhsElement;
  linalg::GenericOp rounding;
  if (overwrite)
    rounding = roundingToBF16Of(op);
  if (rounding && (e.fusedIntoAttention.contains(rounding) ||
                   e.attentionAt.count(rounding)))
    rounding = {};
  Value written = rounding ? rounding.getResult(0) : out;
  if (failed(e.allocate(written, rounding ? rounding : op)))
    return failure();
  if (rounding)
    e.roundedByCublas.insert(rounding);
  if (!overwrite)
    e.copy(out, op.getDpsInits()[0]);
  e.os << "// ";
  if (gemm.batch > 1)
    e.os << gemm.batch << " x ";
  e.os << "(" << gemm.m << " x " << gemm.k << ") * (" << gemm.k << " x "
       << gemm.n << "), " << element << " x " << gemm.rhsElement
       << " accumulated in f32"
       << (rounding ? ", written in bf16 (the rounding below)" : "")
       << ", row-major: cuBLAS computes the transpose\n";
  e.os << "{\n";
  e.os.indent();
  e.os << "const float alpha = 1, beta = " << (overwrite ? 0 : 1) << ";\n";
  e.os << "TP_CUDA_CHECK(cublasGemmStridedBatchedEx(context->blas, "
       << trans(gemm.transRhs) << ", " << trans(gemm.transLhs) << ", " << gemm.n
       << ", " << gemm.m << ", " << gemm.k << ", &alpha, " << rhs << ", "
       << cudaDataType(element) << ", " << gemm.ldb << ", " << gemm.strideRhs
       << ", " << lhs << ", " << cudaDataType(element) << ", " << gemm.lda
       << ", " << gemm.strideLhs << ", &beta, " << e.name(written) << ", "
       << (rounding ? "CUDA_R_16BF" : "CUDA_R_32F") << ", " << gemm.ldc << ", "
       << gemm.strideOut << ", " << gemm.batch
       << ", CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), " << e.site << ");\n";
  e.os.unindent();
  e.os << "}\n";
  return success();
}

/// cuBLAS is column-major: a row-major (m x n) product is the column-major
/// (n x m) product of the operands swapped, each keeping its own transpose.
LogicalResult mlir::tp::emit::emitCublasGemm(CudaEmitter &e,
                                             linalg::GenericOp op,
                                             const Gemm &gemm) {
  Value out = op.getResult(0);
  Value init = op.getDpsInits()[0];
  bool overwrite = isZeroFill(init);
  if (gemm.lhsElement.isF16() || gemm.lhsElement.isBF16())
    return emitCublasGemmEx(e, op, gemm, overwrite);
  if (failed(e.allocate(out, op)))
    return failure();
  if (!overwrite)
    e.copy(out, init);
  bool isDouble = getElementTypeOrSelf(out.getType()).isF64();
  std::string type = isDouble ? "double" : "float";
  auto trans = [](bool t) { return t ? "CUBLAS_OP_T" : "CUBLAS_OP_N"; };
  e.os << "// ";
  if (gemm.batch > 1)
    e.os << gemm.batch << " x ";
  e.os << "(" << gemm.m << " x " << gemm.k << ") * (" << gemm.k << " x "
       << gemm.n << "), row-major: cuBLAS computes the transpose\n";
  e.os << "{\n";
  e.os.indent();
  e.os << "const " << type << " alpha = 1, beta = " << (overwrite ? 0 : 1)
       << ";\n";
  e.os << "TP_CUDA_CHECK(cublas" << (isDouble ? "D" : "S")
       << "gemmStridedBatched(context->blas, " << trans(gemm.transRhs) << ", "
       << trans(gemm.transLhs) << ", " << gemm.n << ", " << gemm.m << ", "
       << gemm.k << ", &alpha, " << e.name(gemm.rhs) << ", " << gemm.ldb << ", "
       << gemm.strideRhs << ", " << e.name(gemm.lhs) << ", " << gemm.lda << ", "
       << gemm.strideLhs << ", &beta, " << e.name(out) << ", " << gemm.ldc
       << ", " << gemm.strideOut << ", " << gemm.batch << "), " << e.site
       << ");\n";
  e.os.unindent();
  e.os << "}\n";
  return success();
}
