//===- SplitConcatContractions.cpp - tp-split-concat-contractions ---------===//
//
// A weight contraction over a concatenation is a sum of contractions, one
// per concatenated piece, each with the weight's rows that the piece meets:
//   concat(a, b) · W = a · W[:na] + b · W[na:]
// ConvBERT concatenates its attention heads with its dynamic convolution's
// before one output projection, and a fused parallel block concatenates
// attention and MLP outputs before one; either way a rank that holds its
// share of the heads (or of the MLP) holds a different slice of each
// piece, which the concatenation cannot keep split. Once the sum is
// written out, each piece's contraction is row-parallel on its own and the
// partial sums meet in one all-reduce (tp-merge-all-reduces).
//
// The concatenation may be viewed first: cut along a dim that a collapse
// merges, outermost, into the contracted dim (heads concatenated, then
// [heads, head_dim] merged). The weight's pieces are slices of it, which
// tp-split-fused-weights turns into arguments of their own.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::tp {
#define GEN_PASS_DEF_SPLITCONCATCONTRACTIONS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// What a contraction reads through a concatenation: the concatenation,
/// the collapse between them (if any), and how many elements of the
/// contracted dim each concatenated element stands for.
struct ConcatRead {
  tensor::ConcatOp concat;
  tensor::CollapseShapeOp collapse;
  int64_t inner = 1;
};

/// The concatenation that `v` (read along `dim`) is, directly or through a
/// collapse that merges the concatenated dim, outermost, into `dim`. Each
/// value on the way has one use: nothing else reads the whole.
std::optional<ConcatRead> matchConcat(Value v, int64_t dim) {
  if (!v.hasOneUse())
    return std::nullopt;
  ConcatRead read;
  read.collapse = v.getDefiningOp<tensor::CollapseShapeOp>();
  int64_t concatDim = dim;
  if (read.collapse) {
    Value src = read.collapse.getSrc();
    if (!src.hasOneUse())
      return std::nullopt;
    auto shape = read.collapse.getSrcType().getShape();
    ReassociationIndices group = read.collapse.getReassociationIndices()[dim];
    auto concat = src.getDefiningOp<tensor::ConcatOp>();
    if (!concat)
      return std::nullopt;
    concatDim = concat.getDim();
    // The concatenated dim must be the group's outermost non-unit dim.
    auto at = llvm::find(group, concatDim);
    if (at == group.end() ||
        llvm::any_of(llvm::make_range(group.begin(), at),
                     [&](int64_t d) { return shape[d] != 1; }))
      return std::nullopt;
    for (auto it = std::next(at); it != group.end(); ++it)
      read.inner *= shape[*it];
    v = src;
  }
  read.concat = v.getDefiningOp<tensor::ConcatOp>();
  if (!read.concat || read.concat.getDim() != uint64_t(concatDim) ||
      read.concat.getInputs().size() < 2 ||
      !read.concat.getResultType().hasStaticShape())
    return std::nullopt;
  return read;
}

/// An init like `init` (tensor.empty, or a linalg.fill of one), new.
Value cloneInit(OpBuilder &b, Location loc, Value init) {
  auto type = cast<RankedTensorType>(init.getType());
  Value empty =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  if (auto fill = init.getDefiningOp<linalg::FillOp>())
    return linalg::FillOp::create(b, loc, fill.getInputs()[0], empty)
        .getResult(0);
  return empty;
}

/// `lhs + rhs`, elementwise.
Value add(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  auto type = cast<RankedTensorType>(lhs.getType());
  Value init =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, type, ValueRange{lhs, rhs}, ValueRange{init},
             ArrayRef<AffineMap>{id, id, id}, iterators,
             [](OpBuilder &nested, Location nestedLoc, ValueRange args) {
               Value sum =
                   arith::AddFOp::create(nested, nestedLoc, args[0], args[1]);
               linalg::YieldOp::create(nested, nestedLoc, sum);
             })
      .getResult(0);
}

/// Rewrites `op` into one contraction per concatenated piece and their
/// sum; false if it is not a weight contraction over a concatenation.
bool trySplit(linalg::GenericOp op) {
  std::optional<unsigned> weightIdx = getWeightOperand(op);
  if (!weightIdx || op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      op->getNumResults() != 1 || !op.hasPureTensorSemantics())
    return false;
  OpOperand &weight = op->getOpOperand(*weightIdx);
  OpOperand &input = op->getOpOperand(1 - *weightIdx);
  if (!isa<RankedTensorType>(input.get().getType()))
    return false;
  AffineMap inputMap = op.getMatchingIndexingMap(&input);
  AffineMap weightMap = op.getMatchingIndexingMap(&weight);
  // The contracted loop: a reduction that both read as a plain dim.
  for (auto [inputDim, expr] : llvm::enumerate(inputMap.getResults())) {
    auto loop = dyn_cast<AffineDimExpr>(expr);
    if (!loop || op.getIteratorTypesArray()[loop.getPosition()] !=
                     utils::IteratorType::reduction)
      continue;
    std::optional<unsigned> weightDim = weightMap.getResultPosition(loop);
    if (!weightDim)
      continue;
    std::optional<ConcatRead> read = matchConcat(input.get(), inputDim);
    if (!read)
      continue;

    OpBuilder b(op);
    Location loc = op.getLoc();
    auto weightType = cast<RankedTensorType>(weight.get().getType());
    int64_t concatDim = read->concat.getDim();
    Value init = op.getDpsInits()[0];
    Value sum;
    int64_t offset = 0;
    for (Value piece : read->concat.getInputs()) {
      int64_t size =
          cast<RankedTensorType>(piece.getType()).getDimSize(concatDim) *
          read->inner;
      Value pieceInput = piece;
      if (read->collapse) {
        SmallVector<int64_t> shape(read->collapse.getResultType().getShape());
        shape[inputDim] = size;
        pieceInput = tensor::CollapseShapeOp::create(
            b, loc,
            RankedTensorType::get(
                shape, read->collapse.getResultType().getElementType()),
            piece, read->collapse.getReassociationIndices());
      }
      SmallVector<int64_t> offsets(weightType.getRank(), 0),
          sizes(weightType.getShape()), strides(weightType.getRank(), 1);
      offsets[*weightDim] = offset;
      sizes[*weightDim] = size;
      Value pieceWeight = tensor::ExtractSliceOp::create(
          b, loc, RankedTensorType::get(sizes, weightType.getElementType()),
          weight.get(), ValueRange{}, ValueRange{}, ValueRange{}, offsets,
          sizes, strides);
      IRMapping mapping;
      mapping.map(input.get(), pieceInput);
      mapping.map(weight.get(), pieceWeight);
      mapping.map(init, sum ? cloneInit(b, loc, init) : init);
      Operation *clone = b.clone(*op, mapping);
      Value partial = clone->getResult(0);
      sum = sum ? add(b, loc, sum, partial) : partial;
      offset += size;
    }
    op->getResult(0).replaceAllUsesWith(sum);
    op->erase();
    if (read->collapse)
      read->collapse->erase();
    read->concat->erase();
    return true;
  }
  return false;
}

struct SplitConcatContractions
    : tp::impl::SplitConcatContractionsBase<SplitConcatContractions> {
  void runOnOperation() override {
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk(
        [&](linalg::GenericOp op) { candidates.push_back(op); });
    for (linalg::GenericOp op : candidates)
      (void)trySplit(op);
  }
};

} // namespace
