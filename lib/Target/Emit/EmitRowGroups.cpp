//===- EmitRowGroups.cpp - loop nests over the same rows, one pass per row ===//
//
// After elementwise fusion a layer norm is still six loop nests (the
// statistics' two reductions and the elementwise steps around them), an
// RMS norm four, a softmax outside a fused attention four, and a reshape
// between a bias add and a residual add keeps their two nests apart: each
// nest a pass over the whole tensor through memory (3 MB per pass for
// GPT-2's hidden size at 8 x 128 tokens, beyond L2).
//
// When consecutive nests share their leading parallel dims (the rows:
// batch and position) and each reads what another of them wrote only at
// its own row, the CPU target runs them as one loop over the rows with
// each nest's inner loops inside it: one pass over memory per row, a row's
// intermediates staying in L1 between the nests. Every nest keeps its
// buffers, its scalar ops and their order, and a row's reduction runs over
// the same elements in the same order: results are bit-identical to the
// nests run one after another.
//
// A row of a buffer is a contiguous slab when the buffer's leading dims
// are the row dims; so every buffer a group writes, and every one of its
// own results it reads (directly or through a reshape), must have the row
// dims as leading dims and be indexed by the row loops there. A nest never
// accumulates into a buffer of the group. The run is cut at any op that is
// neither such a nest (not a GEMM, a lookup or a part of a fused
// attention) nor an op that only binds a buffer (tensor.empty, a reshape,
// a fill, a constant); those are emitted before the loop. A nest that the
// product before the group computes with itself (a GEMM epilogue; on CUDA,
// cuBLAS's rounding of a bf16 sum) is decided when the product is
// emitted, after the groups are found: the group then leaves it out, and
// its other nests read its result as any other input.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"
#include "LinalgMatchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::emit;

/// Nests per group at most: one loop body the host compiler builds quickly.
constexpr size_t kMaxRowGroupNests = 16;

/// Ops that only bind a buffer (or a scalar), which can run before the
/// group's loop: they read no tensor's elements.
static bool onlyBinds(Operation *op) {
  return isa<tensor::EmptyOp, tensor::ExpandShapeOp, tensor::CollapseShapeOp,
             linalg::FillOp, arith::ConstantOp>(op);
}

static unsigned leadingParallelDims(linalg::GenericOp op) {
  unsigned count = 0;
  for (utils::IteratorType type : op.getIteratorTypesArray()) {
    if (type != utils::IteratorType::parallel)
      break;
    ++count;
  }
  return count;
}

/// The dims of `op` that can be rows: its leading parallel dims, never its
/// last, which stays an inner loop of its own that the host compiler
/// vectorises (a loop over rows holding several nests' bodies, each with
/// its own restrict pointers, is not).
static unsigned rowDimsOf(linalg::GenericOp op) {
  unsigned loops = op.getNumLoops();
  return loops == 0 ? 0 : std::min(leadingParallelDims(op), loops - 1);
}

/// Whether `op` can run inside a loop over `rows`, given the values the
/// group made so far (`made`, reshapes of them included).
static bool fitsRows(linalg::GenericOp op, ArrayRef<int64_t> rows,
                     const llvm::DenseSet<Value> &made) {
  unsigned count = rows.size();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (rowDimsOf(op) < count)
    return false;
  for (unsigned d = 0; d < count; ++d)
    if (ranges[d] != rows[d])
      return false;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type)
      continue;
    bool init = op.isDpsInit(&operand);
    bool ours = made.contains(operand.get());
    // An init of the group's own would be written across rows before the
    // nest that fills it has run for them.
    if (init && ours)
      return false;
    if (!init && !ours)
      continue; // read as the nest alone would
    AffineMap map = op.getMatchingIndexingMap(&operand);
    if (type.getRank() < count || map.getNumResults() < count)
      return false;
    for (unsigned d = 0; d < count; ++d)
      if (type.getDimSize(d) != rows[d] ||
          map.getResult(d) != getAffineDimExpr(d, op.getContext()))
        return false;
  }
  return true;
}

void CppEmitter::findRowGroups() {
  auto isNest = [&](Operation *op) -> linalg::GenericOp {
    auto generic = dyn_cast<linalg::GenericOp>(op);
    if (!generic || !generic.hasPureTensorSemantics() ||
        fusedIntoAttention.contains(op) || attentionAt.count(op) ||
        getKernel(generic) != Kernel::LoopNest || rowDimsOf(generic) == 0 ||
        llvm::any_of(generic.getStaticLoopRanges(), ShapedType::isDynamic))
      return {};
    return generic;
  };
  auto rowCount = [](ArrayRef<int64_t> rows) {
    int64_t count = 1;
    for (int64_t size : rows)
      count *= size;
    return count;
  };

  module.walk([&](Block *block) {
    SmallVector<Operation *> ops;
    for (Operation &op : *block)
      ops.push_back(&op);
    size_t i = 0;
    while (i < ops.size()) {
      linalg::GenericOp first = isNest(ops[i]);
      if (!first) {
        ++i;
        continue;
      }
      auto group = std::make_shared<RowGroup>();
      SmallVector<int64_t> ranges = first.getStaticLoopRanges();
      group->rows.assign(ranges.begin(), ranges.begin() + rowDimsOf(first));
      llvm::DenseSet<Value> made;
      if (!fitsRows(first, group->rows, made)) {
        ++i;
        continue;
      }
      SmallVector<linalg::GenericOp> nests = {first};
      made.insert(first->result_begin(), first->result_end());
      size_t last = i;
      for (size_t j = i + 1; j < ops.size() && nests.size() < kMaxRowGroupNests;
           ++j) {
        Operation *op = ops[j];
        if (onlyBinds(op) && !fusedIntoAttention.contains(op)) {
          if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op) &&
              made.contains(op->getOperand(0)))
            made.insert(op->getResult(0));
          continue;
        }
        linalg::GenericOp next = isNest(op);
        if (!next)
          break;
        // The rows the group and this nest share, as few as that takes.
        SmallVector<int64_t> nextRanges = next.getStaticLoopRanges();
        unsigned count =
            std::min<unsigned>(group->rows.size(), rowDimsOf(next));
        unsigned same = 0;
        while (same < count && nextRanges[same] == group->rows[same])
          ++same;
        SmallVector<int64_t> rows(group->rows.begin(),
                                  group->rows.begin() + same);
        if (rows.empty() || rowCount(rows) < 2 || !fitsRows(next, rows, made) ||
            !llvm::all_of(nests, [&](linalg::GenericOp nest) {
              return fitsRows(nest, rows, made);
            }))
          break;
        group->rows = std::move(rows);
        nests.push_back(next);
        made.insert(next->result_begin(), next->result_end());
        last = j;
      }
      if (nests.size() < 2 || rowCount(group->rows) < 2) {
        ++i;
        continue;
      }
      group->ops.assign(ops.begin() + i, ops.begin() + last + 1);
      for (linalg::GenericOp nest : nests)
        group->nests.insert(nest);
      for (Operation *op : ArrayRef(group->ops).drop_front())
        inRowGroup.insert(op);
      rowGroupAt[ops[i]] = group;
      i = last + 1;
    }
  });
}

SmallVector<linalg::GenericOp>
CppEmitter::rowGroupNests(const RowGroup &group) const {
  SmallVector<linalg::GenericOp> nests;
  for (Operation *op : group.ops)
    if (group.nests.contains(op) && !computedByProduct(op))
      nests.push_back(cast<linalg::GenericOp>(op));
  return nests;
}

LogicalResult CppEmitter::emitRowGroup(const RowGroup &group) {
  SmallVector<linalg::GenericOp> nests = rowGroupNests(group);
  if (nests.size() < 2) {
    for (Operation *op : group.ops)
      if (failed(emitOp(op)))
        return failure();
    return success();
  }
  llvm::SmallPtrSet<Operation *, 16> inLoop;
  for (linalg::GenericOp nest : nests)
    inLoop.insert(nest);
  os << "// " << nests.size() << " loop nests as one pass per row of [";
  llvm::interleaveComma(group.rows, os);
  os << "] (a row group)\n";
  // Buffers first, in block order: what the nests write, and what the
  // binding ops between them make.
  for (Operation *op : group.ops) {
    if (!inLoop.contains(op)) {
      if (failed(emitOp(op)))
        return failure();
      continue;
    }
    os << "// " << op->getName();
    std::string where = describe(op);
    if (!where.empty())
      os << " (" << where << ")";
    os << "\n";
    if (failed(prepareGenericResults(cast<linalg::GenericOp>(op))))
      return failure();
  }
  SmallVector<std::string> rows;
  for (unsigned d = 0; d < group.rows.size(); ++d)
    rows.push_back("r" + std::to_string(nextId) + "_" + std::to_string(d));
  ++nextId;
  os << "TP_LOOP_NEST {\n";
  os.indent();
  for (auto [index, size] : llvm::zip(rows, group.rows))
    os << "for (std::int64_t " << index << " = 0; " << index << " < " << size
       << "; ++" << index << ")\n";
  os << "{\n";
  os.indent();
  for (linalg::GenericOp op : nests) {
    os << "{ // " << describe(op) << "\n";
    os.indent();
    if (failed(emitGenericLoops(op, rows)))
      return failure();
    os.unindent();
    os << "}\n";
  }
  os.unindent();
  os << "}\n";
  os.unindent();
  os << "}();\n";
  return success();
}
