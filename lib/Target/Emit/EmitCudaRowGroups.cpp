//===- EmitCudaRowGroups.cpp - a row group as one kernel, a warp per row --===//
//
// The row groups the C++ target runs as one loop over the rows
// (EmitRowGroups.cpp: a residual add and the layer norm after it, an RMS
// norm, a softmax outside fused attention, a bias add and a residual add
// across a reshape) become one kernel here instead of a kernel per nest: a
// layer norm was six launches, each a pass over the tensor through global
// memory.
//
// A warp takes a row (grid-stride over the rows); the nests run one after
// another for it, separated by __syncwarp(), which orders the lanes'
// memory accesses, so that a nest reads what the nests before it wrote for
// the row. A nest's points within the row are strided over the lanes, each
// lane looping over the point's reduced elements; a reduction that folds
// each element into one accumulator with an associative op (a norm's sums,
// a softmax's maximum and sum) is shared by the warp's lanes instead, their
// partial results combined with warp shuffles, as a kernel of its own
// would. Every nest keeps its buffer (a row is L1-resident between the
// nests); values the kernel both writes and reads are passed without
// __restrict__, so nvcc reads them through the coherent cache.
//
// A group whose nest lets points share an output element (which needs a
// kernel of one thread, EmitCudaKernels.cpp), or whose rows are all
// narrower than a warp (most lanes would idle: a kernel per nest keeps a
// thread per point), is emitted nest by nest. A nest that cuBLAS computed
// with the product before the group (the bf16 rounding of its sum) is left
// out: the kernel reads its result as it reads any input.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelWriter.h"

#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace mlir::tp::emit;

LogicalResult KernelWriter::writeRow(raw_indented_ostream &os) {
  CppEmitter k(op->getParentOfType<ModuleOp>(), os);
  bindCaptured(k);
  os << "{ // " << op->getName();
  std::string where = CppEmitter::describe(op);
  if (!where.empty())
    os << " (" << where << ")";
  if (warp)
    os << ": the lanes share the " << warp->size << " reduced elements";
  os << "\n";
  os.indent();
  if (warp) {
    // Every lane takes every point, so that all of them reach the
    // shuffles.
    os << "for (std::int64_t u = 0; u < " << points << "; ++u) {\n";
    os.indent();
    emitIndices(os, pointDims, "u", points);
    if (failed(emitWarpPoint(os, k)))
      return failure();
  } else {
    os << "for (std::int64_t u = lane; u < " << points
       << "; u += tp::cuda::kWarpSize) {\n";
    os.indent();
    emitIndices(os, pointDims, "u", points);
    if (failed(emitPoint(os, k)))
      return failure();
  }
  os.unindent();
  os << "}\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CudaEmitter::emitRowGroup(const RowGroup &group) {
  unsigned rowDims = group.rows.size();
  int64_t rows = 1;
  for (int64_t size : group.rows)
    rows *= size;
  // A rounding cuBLAS did with the product before the group is not the
  // kernel's: it reads the bf16 sum as an input.
  SmallVector<linalg::GenericOp> nests = rowGroupNests(group);
  llvm::SmallPtrSet<Operation *, 16> inKernel;
  SmallVector<std::unique_ptr<KernelWriter>> writers;
  bool together = nests.size() >= 2;
  int64_t widest = 0;
  for (linalg::GenericOp nest : nests) {
    inKernel.insert(nest);
    writers.push_back(std::make_unique<KernelWriter>(
        *this, nest, std::nullopt, rowDims,
        "n" + std::to_string(writers.size()) + "_"));
    together &= writers.back()->analyse();
    widest = std::max(widest, writers.back()->rowIterations());
  }
  if (!together || widest < kWarpSize) {
    for (Operation *op : group.ops)
      if (failed(emitOp(op)))
        return failure();
    return success();
  }

  // What the kernel writes, and reshapes of it.
  llvm::DenseSet<Value> shared;
  for (Operation *op : group.ops) {
    if (inKernel.contains(op))
      shared.insert(op->result_begin(), op->result_end());
    else if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op) &&
             shared.contains(op->getOperand(0)))
      shared.insert(op->getResult(0));
  }

  os << "// " << writers.size() << " loop nests as one kernel, a warp per row"
     << " of [";
  llvm::interleaveComma(group.rows, os);
  os << "] (a row group)\n";
  std::string outerSite = site;
  site = siteLiteral(group.ops.front(), "a row group");
  auto writer = writers.begin();
  for (Operation *op : group.ops) {
    if (!inKernel.contains(op)) {
      if (failed(emitOp(op)))
        return failure();
      continue;
    }
    os << "// " << op->getName();
    std::string where = describe(op);
    if (!where.empty())
      os << " (" << where << ")";
    os << "\n";
    if (failed((*writer++)->prepare(shared)))
      return failure();
  }

  std::string kernel = kernelName();
  std::string text;
  llvm::raw_string_ostream textStream(text);
  raw_indented_ostream k(textStream);
  k << "// a row group: " << writers.size() << " loop nests, a warp per row of"
    << " [";
  llvm::interleaveComma(group.rows, k);
  k << "]\n__global__ void " << kernel << "(";
  bool first = true;
  for (const auto &w : writers)
    for (const std::string &param : w->parameters()) {
      k << (first ? "" : ", ") << param;
      first = false;
    }
  k << ") {\n";
  k.indent();
  k << "const int lane = threadIdx.x % tp::cuda::kWarpSize;\n";
  k << "for (std::int64_t t = (std::int64_t(blockIdx.x) * blockDim.x + "
       "threadIdx.x) / tp::cuda::kWarpSize; t < "
    << rows
    << "; t += std::int64_t(gridDim.x) * blockDim.x / tp::cuda::kWarpSize) "
       "{\n";
  k.indent();
  int64_t inner = 1;
  for (unsigned d = rowDims; d-- > 0;) {
    k << "const std::int64_t i" << d << " = t";
    if (inner > 1)
      k << " / " << inner << "LL";
    if (inner * group.rows[d] < rows)
      k << " % " << group.rows[d] << "LL";
    k << ";\n";
    inner *= group.rows[d];
  }
  for (auto [i, w] : llvm::enumerate(writers)) {
    if (i > 0)
      k << "__syncwarp();\n";
    if (failed(w->writeRow(k)))
      return failure();
  }
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n\n";
  kernels += text;

  os << kernel << "<<<tp::cuda::blocksForWarps(" << rows
     << "), tp::cuda::threadsForWarps(" << rows << "), 0, context->stream>>>(";
  first = true;
  for (const auto &w : writers)
    for (const std::string &arg : w->arguments()) {
      os << (first ? "" : ", ") << arg;
      first = false;
    }
  os << ");\nTP_CUDA_CHECK_LAUNCH(" << site << ");\n";
  site = outerSite;
  return success();
}
