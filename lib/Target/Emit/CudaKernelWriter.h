//===- CudaKernelWriter.h - one linalg.generic as CUDA code -----*- C++ -*-===//
//
// A KernelWriter turns one generic into device code: a __global__ function
// of its own and its launch (EmitCudaKernels.cpp), or, inside a row group's
// kernel, the part that computes one row of it (EmitCudaRowGroups.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_EMIT_CUDAKERNELWRITER_H
#define TP_LIB_TARGET_EMIT_CUDAKERNELWRITER_H

#include "CudaEmitter.h"
#include "LinalgMatchers.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::tp::emit {

/// Lanes per warp (tp::cuda::kWarpSize in the generated code).
constexpr int64_t kWarpSize = 32;

/// A reduction that lanes of a warp can share: the payload folds one value
/// into the only accumulator with `combiner`, which nothing else reads.
struct WarpReduction {
  Operation *combiner;
  int64_t size; // elements reduced per point
};

class KernelWriter {
public:
  /// `rowDims` leading dims of `op` are bound by a row group's kernel (0:
  /// a kernel of its own); `prefix` keeps its parameters apart from the
  /// other nests' there.
  KernelWriter(CudaEmitter &e, linalg::GenericOp op,
               std::optional<Lookup> lookup, unsigned rowDims = 0,
               std::string prefix = "")
      : e(e), op(op), lookup(std::move(lookup)), body(op.getRegion().front()),
        ranges(op.getStaticLoopRanges()), rowDims(rowDims),
        prefix(std::move(prefix)) {}

  /// The kernel of its own and its launch on the rank's stream.
  LogicalResult write();

  //===--- Inside a row group's kernel ------------------------------------===//

  /// Decides how the points are computed; false when some output element
  /// is shared by points (the nest needs a kernel of its own).
  bool analyse();
  /// Allocates the results and collects the parameters. Values in
  /// `sharedInKernel` are written and read by the same kernel: their
  /// pointers are not __restrict__ (nvcc would read them through the
  /// non-coherent cache).
  LogicalResult prepare(const llvm::DenseSet<Value> &sharedInKernel);
  /// One row of the nest, run by the warp whose lane is `lane`, with the
  /// row's indices (i0...) declared: its points strided over the lanes, or
  /// a warp reduction per point.
  LogicalResult writeRow(raw_indented_ostream &os);
  /// The iterations of one row: its points times the elements each reduces.
  int64_t rowIterations() const {
    int64_t count = points;
    for (unsigned d : loopDims)
      count *= ranges[d];
    return count;
  }
  ArrayRef<std::string> parameters() const { return params; }
  ArrayRef<std::string> arguments() const { return args; }

private:
  /// True when every output element belongs to exactly one point of the
  /// parallel dims, so that threads never share an output.
  bool pointsOwnOutputs();
  LogicalResult collectParams();
  void addParam(Value value, std::string type, std::string paramName) {
    params.push_back(std::move(type) + " " + paramName);
    args.push_back(e.name(value));
  }
  /// `const T *__restrict__`, or without __restrict__ for a value the
  /// kernel also writes.
  std::string inputPointer(Value value, StringRef type) const;
  LogicalResult emitLoad(CppEmitter &k, BlockArgument arg);
  LogicalResult emitBodyOp(CppEmitter &k, Operation &inner);
  bool argUsesDim(BlockArgument arg, unsigned dim);
  /// Whether the kernel reads index `dim`: offsetExpr leaves out the dims
  /// of size 1, and linalg.index may ask for it.
  bool dimIsRead(unsigned dim);
  bool isInit(BlockArgument arg) {
    return op.isDpsInit(op.getMatchingOpOperand(arg));
  }
  std::string offsetOf(OpOperand *operand) {
    auto shape = cast<RankedTensorType>(operand->get().getType()).getShape();
    return CppEmitter::offsetExpr(op.getMatchingIndexingMap(operand), shape,
                                  indices);
  }
  LogicalResult writeKernel(raw_indented_ostream &os, StringRef name);
  std::optional<WarpReduction> matchWarpReduction();
  LogicalResult writeWarpKernel(raw_indented_ostream &os, StringRef name);
  /// One point, its indices declared: the loops over its reduction dims
  /// (or its lookup's one iteration) and the write of its outputs.
  LogicalResult emitPoint(raw_indented_ostream &os, CppEmitter &k);
  /// One point reduced by the lanes of a warp (`lane` declared).
  LogicalResult emitWarpPoint(raw_indented_ostream &os, CppEmitter &k);
  /// Declares the indices of `dims` from the flat index `flat` (< `count`),
  /// the last dim fastest.
  void emitIndices(raw_indented_ostream &os, ArrayRef<unsigned> dims,
                   StringRef flat, int64_t count);
  void bindCaptured(CppEmitter &k);
  void beginKernel(raw_indented_ostream &os, CppEmitter &k, StringRef name,
                   StringRef mode);

  CudaEmitter &e;
  linalg::GenericOp op;
  std::optional<Lookup> lookup;
  Block &body;
  SmallVector<int64_t> ranges;
  unsigned rowDims;
  std::string prefix;
  const llvm::DenseSet<Value> *shared = nullptr;

  /// Owned mode: one thread per parallel point, accumulators in registers.
  /// Serial mode: one thread, the C++ emitter's loops on the result memory.
  bool owned = false;
  /// Warp mode (owned): one warp per parallel point.
  std::optional<WarpReduction> warp;
  /// The parallel dims a thread (or a warp) takes one point of, the row
  /// dims left out; the dims looped over inside a point.
  SmallVector<unsigned> pointDims, loopDims;
  int64_t points = 1;
  SmallVector<std::string> indices;
  /// Kernel parameters and the host expressions passed for them.
  SmallVector<std::string> params, args;
  /// The parameter of each operand the payload reads (by operand number),
  /// of each result, and of each value used from outside the op.
  llvm::DenseMap<unsigned, std::string> operandParam;
  SmallVector<std::string> resultParam;
  llvm::MapVector<Value, std::string> captured;
  /// Block arguments already bound to a load or an accumulator.
  llvm::DenseSet<Value> loaded;
};

/// A generic kernel selection made a GEMM, as a cuBLAS call
/// (EmitCudaGemm.cpp).
LogicalResult emitCublasGemm(CudaEmitter &e, linalg::GenericOp op,
                             const Gemm &gemm);

} // namespace mlir::tp::emit

#endif // TP_LIB_TARGET_EMIT_CUDAKERNELWRITER_H
