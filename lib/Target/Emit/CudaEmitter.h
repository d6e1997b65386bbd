//===- CudaEmitter.h - state shared by the CUDA emitter's parts -*- C++ -*-===//
//
// The CUDA emitter is the C++ emitter with every tensor in device memory.
// Host code keeps the C++ emitter's structure (one function per func.func,
// the same buffer liveness, scalars and scf.if on the host); what touches
// tensor data becomes work queued on the rank's stream: cuBLAS GEMMs,
// generated kernels for the other generics, NCCL collectives, and the
// runtime's copy kernels (tp_cuda_runtime.h). Buffers come from
// cudaMallocAsync and go back with cudaFreeAsync, both stream-ordered, so
// releasing a buffer right after the last launch that reads it is safe.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_EMIT_CUDAEMITTER_H
#define TP_LIB_TARGET_EMIT_CUDAEMITTER_H

#include "CppEmitter.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tp::emit {

class CudaEmitter : public CppEmitter {
public:
  CudaEmitter(ModuleOp module, raw_indented_ostream &os);

  LogicalResult emitModule();

  //===--- Buffers (device memory) ----------------------------------------===//

  LogicalResult allocate(Value result, Operation *op,
                         StringRef prefix = "v") override;
  void copy(Value dst, Value src) override;
  void release(Value value) override;
  void copyResult(unsigned index, Value value) override;
  /// Kernels take fresh result buffers (a kernel that owns its output
  /// points reads the init from its own buffer, EmitCudaKernels.cpp).
  bool writesInitInPlace(linalg::LinalgOp, OpOperand &) const override {
    return false;
  }

  //===--- Ops ------------------------------------------------------------===//

  LogicalResult emitOp(Operation *op) override;
  std::string groupLiteral(GroupSpec group) const override;
  /// cuBLAS for GEMMs, a generated kernel otherwise (EmitCudaKernels.cpp).
  LogicalResult emitGeneric(linalg::GenericOp op) override;
  LogicalResult emitFill(linalg::FillOp op) override;
  /// Tensor constants, reshapes, slices, pads... (EmitCudaTensor.cpp).
  LogicalResult emitConstant(Operation *op) override;
  LogicalResult emitBoxCopy(Operation *op, Value dst,
                            ArrayRef<int64_t> dstShape,
                            ArrayRef<int64_t> dstOffsets, Value src,
                            ArrayRef<int64_t> srcShape,
                            ArrayRef<int64_t> srcOffsets,
                            ArrayRef<int64_t> sizes, ArrayRef<int64_t> srcSteps,
                            ArrayRef<int64_t> dstSteps) override;
  LogicalResult emitFillBuffer(Operation *op, Value result,
                               StringRef value) override;
  void emitZeroBuffer(Value result) override;
  LogicalResult emitFromElements(tensor::FromElementsOp op) override;
  void emitCacheWrite(Value cache, Value update, Value position, int64_t outer,
                      int64_t slots, int64_t count, int64_t inner,
                      StringRef site) override;
  /// A host read of one element: the forward waits for its stream here.
  LogicalResult emitExtract(tensor::ExtractOp op) override;
  /// The fused attention chain ending at `out` as one kernel
  /// (EmitCudaAttention.cpp).
  LogicalResult emitFusedAttention(linalg::GenericOp out) override;
  /// The kernel parameters (and launch arguments) for what the generics of
  /// fused attention's chain X read besides the scores: another operand (a
  /// mask) read at the chain's `indices`, or a value from outside. Each is
  /// bound in `payload`, which prints the chain inside the kernel.
  LogicalResult bindChainOperands(const FusedAttention &a,
                                  ArrayRef<SmallVector<std::string>> indices,
                                  Operation *op, CppEmitter &payload,
                                  SmallVectorImpl<std::string> &params,
                                  SmallVectorImpl<std::string> &args);
  /// A row group as one kernel, a warp per row (EmitCudaRowGroups.cpp).
  LogicalResult emitRowGroup(const RowGroup &group) override;
  /// NCCL collectives and send/recv (EmitCudaCollectives.cpp).
  LogicalResult emitShardOp(Operation *op) override;
  /// An all-gather through ncclAllGather, rank-major chunks reordered where
  /// the gather axis is not the outermost.
  LogicalResult emitCudaAllGather(Operation *op, const Collective &c);
  /// A reduce-scatter through ncclReduceScatter, the input reordered into
  /// rank-major chunks where the scatter axis is not the outermost.
  LogicalResult emitCudaReduceScatter(Operation *op, const Collective &c);

  /// `context->comm(...)` for `group`, recording that ranks need its
  /// communicator.
  std::string commFor(GroupSpec group);
  /// A fresh name for a kernel.
  std::string kernelName() { return "kernel" + std::to_string(nextKernel++); }

  /// The site literal of the op being emitted, for runtime checks.
  std::string site = "\"\"";
  /// __global__ functions, printed before the host functions.
  std::string kernels;
  /// tp-convert-dtype's roundings of a GEMM's f32 sum to bf16 that cuBLAS
  /// does instead, writing the sum in bf16 (EmitCudaKernels.cpp).
  llvm::DenseSet<Operation *> roundedByCublas;
  bool computedByProduct(Operation *op) const override {
    return roundedByCublas.contains(op);
  }

private:
  LogicalResult emitStageTable(raw_indented_ostream &out);

  /// Groups that collectives span, in first-use order.
  llvm::SetVector<std::pair<int64_t, int64_t>> groups;
  unsigned nextKernel = 0;
};

} // namespace mlir::tp::emit

#endif // TP_LIB_TARGET_EMIT_CUDAEMITTER_H
