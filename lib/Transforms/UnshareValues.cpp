//===- UnshareValues.cpp - tp-unshare-values ------------------------------===//
//
// Undoes the sharing that --canonicalize and --cse add to an imported
// function, which upstream partition cannot take: scalar constants go back
// into the linalg bodies that read them, and each use of an empty or filled
// init gets its own copy; and a tensor that one op reads through two
// operands with different maps (X · Xᵀ) is copied for the second.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::tp {
#define GEN_PASS_DEF_UNSHAREVALUES
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// A constant worth copying into a body: scalar (a tensor constant would be
/// duplicated in every body that reads it) and without regions of its own.
bool isScalarConstant(Operation *op) {
  return op && op->hasTrait<OpTrait::ConstantLike>() &&
         op->getNumRegions() == 0 && op->getNumResults() == 1 &&
         !isa<ShapedType>(op->getResult(0).getType());
}

/// Partition rebuilds a split reduction from its operands alone, so its body
/// must read nothing else.
void sinkConstants(linalg::LinalgOp op) {
  for (Region &region : op->getRegions()) {
    if (region.empty())
      continue;
    SetVector<Value> captured;
    getUsedValuesDefinedAbove(region, captured);
    OpBuilder b = OpBuilder::atBlockBegin(&region.front());
    for (Value value : captured) {
      Operation *constant = value.getDefiningOp();
      if (!isScalarConstant(constant))
        continue;
      Operation *copy = b.clone(*constant);
      replaceAllUsesInRegionWith(value, copy->getResult(0), region);
    }
  }
}

/// Each use of `op`'s result reads its own copy, made just before the user
/// as the importer places it (the operands of `op` dominate `op`, so they
/// dominate every user too).
void unshare(Operation *op) {
  Value result = op->getResult(0);
  if (result.use_empty() || result.hasOneUse())
    return;
  SmallVector<OpOperand *> uses;
  for (OpOperand &use : result.getUses())
    uses.push_back(&use);
  for (OpOperand *use : uses) {
    OpBuilder b(use->getOwner());
    use->set(b.clone(*op)->getResult(0));
  }
  op->erase();
}

/// An op that reads one tensor through two operands with different
/// indexing maps (X · Xᵀ) reads a copy through the second: upstream
/// partition gives one value one sharding, which a split then puts on two
/// loops of the op, and builds an op whose shapes disagree. With a copy,
/// propagation reshards one of the two. The identity copy folds away after
/// partition.
void copySelfOperands(linalg::GenericOp op) {
  for (OpOperand *operand : op.getDpsInputOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand->get().getType());
    if (!type || type.getRank() == 0)
      continue;
    AffineMap map = op.getMatchingIndexingMap(operand);
    bool readBefore =
        llvm::any_of(op.getDpsInputOperands(), [&](OpOperand *other) {
          return other->getOperandNumber() < operand->getOperandNumber() &&
                 other->get() == operand->get() &&
                 op.getMatchingIndexingMap(other) != map;
        });
    if (!readBefore)
      continue;
    OpBuilder b(op);
    Location loc = op.getLoc();
    Value init =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
    auto copy = linalg::GenericOp::create(
        b, loc, type, ValueRange{operand->get()}, ValueRange{init},
        ArrayRef<AffineMap>{identity, identity},
        SmallVector<utils::IteratorType>(type.getRank(),
                                         utils::IteratorType::parallel),
        [](OpBuilder &nb, Location nl, ValueRange args) {
          linalg::YieldOp::create(nb, nl, args[0]);
        });
    operand->set(copy.getResult(0));
  }
}

struct UnshareValues : tp::impl::UnshareValuesBase<UnshareValues> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    func.walk(copySelfOperands);
    func.walk(sinkConstants);
    // Fills first: their copies read the same empty, which is unshared next.
    SmallVector<linalg::FillOp> fills;
    func.walk([&](linalg::FillOp fill) {
      if (fill.hasPureTensorSemantics())
        fills.push_back(fill);
    });
    for (linalg::FillOp fill : fills)
      unshare(fill);
    SmallVector<tensor::EmptyOp> empties;
    func.walk([&](tensor::EmptyOp empty) { empties.push_back(empty); });
    for (tensor::EmptyOp empty : empties)
      unshare(empty);
  }
};

} // namespace
