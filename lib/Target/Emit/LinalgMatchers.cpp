//===- LinalgMatchers.cpp - what a linalg.generic computes ---------------===//
//
// The matchers both emitters and the preparation passes share: a generic
// that is a (batched) GEMM, a zero fill a GEMM may overwrite, a one-hot
// lookup or scatter-add, and tp-convert-dtype's rounding of a product to
// bf16. Each only reads the IR.
//
//===----------------------------------------------------------------------===//

#include "LinalgMatchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

/// The dims of a projected-permutation map's results, or failure.
static FailureOr<SmallVector<unsigned>> dimsOf(AffineMap map) {
  SmallVector<unsigned> dims;
  for (AffineExpr expr : map.getResults()) {
    auto dim = dyn_cast<AffineDimExpr>(expr);
    if (!dim)
      return failure();
    dims.push_back(dim.getPosition());
  }
  return dims;
}

/// Splits `dims` into [first..., second...] where `first` and `second` are
/// given role sets, checking each block's order against `order` (when set).
static bool splitBlocks(ArrayRef<unsigned> dims, ArrayRef<unsigned> first,
                        ArrayRef<unsigned> second) {
  if (dims.size() != first.size() + second.size())
    return false;
  return llvm::equal(dims.take_front(first.size()), first) &&
         llvm::equal(dims.drop_front(first.size()), second);
}

/// out + a * b, where a and b are the input block arguments, each possibly
/// extended to the output's type first (an f16/bf16 operand).
static bool isGemmBody(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  BlockArgument a = body.getArgument(0), b = body.getArgument(1),
                out = body.getArgument(2);
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || (add.getLhs() != out && add.getRhs() != out))
    return false;
  auto mul = (add.getLhs() == out ? add.getRhs() : add.getLhs())
                 .getDefiningOp<arith::MulFOp>();
  if (!mul || mul->getBlock() != &body)
    return false;
  unsigned extensions = 0;
  auto source = [&](Value v) -> Value {
    auto ext = v.getDefiningOp<arith::ExtFOp>();
    if (!ext)
      return v;
    ++extensions;
    return ext->getBlock() == &body && ext->hasOneUse() ? ext.getIn() : v;
  };
  Value x = source(mul.getLhs()), y = source(mul.getRhs());
  bool mulOk = (x == a && y == b) || (x == b && y == a);
  // Nothing else in the body: the extensions, mul, add and yield.
  return mulOk && body.getOperations().size() == 3 + extensions;
}

FailureOr<Gemm> mlir::tp::emit::matchGemm(linalg::GenericOp op,
                                          GemmOperands operands) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 || !isGemmBody(op))
    return failure();
  Type element = getElementTypeOrSelf(op.getResult(0).getType());
  if (!element.isF32() && !element.isF64())
    return failure();
  // Each operand the output's type or, for an f32 output, f16 or bf16.
  auto readable = [&](Type stored) {
    return stored == element ||
           (element.isF32() && (stored.isF16() || stored.isBF16()));
  };
  Type lhsStored = getElementTypeOrSelf(op.getDpsInputs()[0].getType());
  Type rhsStored = getElementTypeOrSelf(op.getDpsInputs()[1].getType());
  if (!readable(lhsStored) || !readable(rhsStored) ||
      (operands == GemmOperands::Same && lhsStored != rhsStored))
    return failure();
  FailureOr<linalg::ContractionDimensions> roles =
      linalg::inferContractionDims(op);
  if (failed(roles) || roles->m.empty() || roles->n.empty() || roles->k.empty())
    return failure();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  auto lhsDims = dimsOf(maps[0]), rhsDims = dimsOf(maps[1]),
       outDims = dimsOf(maps[2]);
  if (failed(lhsDims) || failed(rhsDims) || failed(outDims))
    return failure();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  auto product = [&](ArrayRef<unsigned> dims) {
    int64_t size = 1;
    for (unsigned d : dims)
      size *= ranges[d];
    return size;
  };

  // The output: [batch..., M..., N...] or [batch..., N..., M...].
  SmallVector<unsigned> batch(outDims->begin(),
                              outDims->begin() + roles->batch.size());
  if (!llvm::all_of(batch, [&](unsigned d) {
        return llvm::is_contained(roles->batch, d);
      }))
    return failure();
  ArrayRef<unsigned> outRest = ArrayRef(*outDims).drop_front(batch.size());
  SmallVector<unsigned> mDims, nDims;
  for (unsigned d : outRest)
    (llvm::is_contained(roles->m, d) ? mDims : nDims).push_back(d);
  bool swapped = !splitBlocks(outRest, mDims, nDims);
  if (swapped && !splitBlocks(outRest, nDims, mDims))
    return failure();

  // An input holds the batch dims as a prefix in the output's order, or none.
  auto stripBatch = [&](ArrayRef<unsigned> dims,
                        bool &hasBatch) -> std::optional<ArrayRef<unsigned>> {
    hasBatch = !batch.empty() && dims.size() >= batch.size() &&
               llvm::equal(dims.take_front(batch.size()), batch);
    if (!hasBatch && llvm::any_of(dims, [&](unsigned d) {
          return llvm::is_contained(batch, d);
        }))
      return std::nullopt;
    return hasBatch ? dims.drop_front(batch.size()) : dims;
  };
  bool lhsBatch, rhsBatch;
  auto lhsRest = stripBatch(*lhsDims, lhsBatch);
  auto rhsRest = stripBatch(*rhsDims, rhsBatch);
  if (!lhsRest || !rhsRest)
    return failure();
  SmallVector<unsigned> kDims;
  for (unsigned d : *lhsRest)
    if (llvm::is_contained(roles->k, d))
      kDims.push_back(d);

  Gemm gemm;
  gemm.batch = product(batch);
  gemm.m = product(mDims);
  gemm.n = product(nDims);
  gemm.k = product(kDims);
  if (splitBlocks(*lhsRest, mDims, kDims))
    gemm.lda = gemm.k;
  else if (splitBlocks(*lhsRest, kDims, mDims))
    gemm.transLhs = true, gemm.lda = gemm.m;
  else
    return failure();
  if (splitBlocks(*rhsRest, kDims, nDims))
    gemm.ldb = gemm.n;
  else if (splitBlocks(*rhsRest, nDims, kDims))
    gemm.transRhs = true, gemm.ldb = gemm.k;
  else
    return failure();
  gemm.lhs = op.getDpsInputs()[0];
  gemm.rhs = op.getDpsInputs()[1];
  gemm.lhsElement = getElementTypeOrSelf(gemm.lhs.getType());
  gemm.rhsElement = getElementTypeOrSelf(gemm.rhs.getType());
  gemm.strideLhs = lhsBatch ? gemm.m * gemm.k : 0;
  gemm.strideRhs = rhsBatch ? gemm.k * gemm.n : 0;
  gemm.strideOut = gemm.m * gemm.n;
  gemm.ldc = gemm.n;
  if (swapped) {
    // out^T = rhs^T * lhs^T: the output's memory is [N, M].
    std::swap(gemm.lhs, gemm.rhs);
    std::swap(gemm.lhsElement, gemm.rhsElement);
    std::swap(gemm.m, gemm.n);
    std::swap(gemm.lda, gemm.ldb);
    std::swap(gemm.strideLhs, gemm.strideRhs);
    bool transLhs = !gemm.transRhs, transRhs = !gemm.transLhs;
    gemm.transLhs = transLhs;
    gemm.transRhs = transRhs;
    gemm.ldc = gemm.n;
  }
  return gemm;
}

bool mlir::tp::emit::isZeroFill(Value init) {
  // tp-offset-vocab-lookups leaves an scf.if choosing between two uses of
  // the same fill.
  if (auto ifOp = init.getDefiningOp<scf::IfOp>()) {
    unsigned index = cast<OpResult>(init).getResultNumber();
    Value a = ifOp.thenYield().getOperand(index);
    if (ifOp.getElseRegion().empty() || a != ifOp.elseYield().getOperand(index))
      return false;
    init = a;
  }
  auto fill = init.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return false;
  return matchPattern(fill.getInputs()[0], m_AnyZeroFloat()) &&
         !matchPattern(fill.getInputs()[0], m_NegZeroFloat());
}

//===----------------------------------------------------------------------===//
// Lookups: sum over r of select(key == index(r) + offset, x, 0)
//===----------------------------------------------------------------------===//

/// Ops of `body` that `value` depends on; fails if any depends on `dim`
/// through linalg.index or an operand indexed by `dim`.
static bool collectInvariantSlice(linalg::GenericOp op, Value value,
                                  unsigned dim,
                                  llvm::SetVector<Operation *> &slice) {
  Block &body = op.getRegion().front();
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (arg.getOwner() != &body)
      return true;
    OpOperand *operand = op.getMatchingOpOperand(arg);
    if (op.isDpsInit(operand))
      return false;
    return !op.getMatchingIndexingMap(operand).isFunctionOfDim(dim);
  }
  Operation *def = value.getDefiningOp();
  if (def->getBlock() != &body)
    return true;
  if (auto index = dyn_cast<linalg::IndexOp>(def))
    if (index.getDim() == dim)
      return false;
  for (Value operand : def->getOperands())
    if (!collectInvariantSlice(op, operand, dim, slice))
      return false;
  slice.insert(def);
  return true;
}

/// The select(cond, x, 0) that `contribution` is, or that it multiplies by
/// (x * select(cond, c, 0)): zero unless cond holds.
static arith::SelectOp getZeroUnlessSelect(Value contribution) {
  auto zeroUnless = [](Value v) -> arith::SelectOp {
    auto select = v.getDefiningOp<arith::SelectOp>();
    if (!select || !matchPattern(select.getFalseValue(), m_AnyZeroFloat()))
      return {};
    return select;
  };
  if (arith::SelectOp select = zeroUnless(contribution))
    return select;
  auto mul = contribution.getDefiningOp<arith::MulFOp>();
  if (!mul)
    return {};
  if (arith::SelectOp select = zeroUnless(mul.getRhs()))
    return select;
  return zeroUnless(mul.getLhs());
}

std::optional<Lookup> mlir::tp::emit::matchLookup(linalg::GenericOp op,
                                                  bool allowScatter) {
  if (op.getNumDpsInits() != 1)
    return std::nullopt;
  Block &body = op.getRegion().front();
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add)
    return std::nullopt;
  BlockArgument out = body.getArguments().back();
  Value other = add.getLhs() == out ? add.getRhs() : add.getLhs();
  if ((add.getLhs() != out && add.getRhs() != out) || other == out)
    return std::nullopt;
  arith::SelectOp select = getZeroUnlessSelect(other);
  if (!select)
    return std::nullopt;
  auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq)
    return std::nullopt;
  // The dim the compare reads: the only reduction (a gather), or a
  // parallel dim no input reads (a scatter into the output).
  SmallVector<unsigned> reductions;
  op.getReductionDims(reductions);
  // (The reduction's, if both sides are indices.)
  std::optional<unsigned> compared;
  auto consider = [&](Value v) {
    auto index = v.getDefiningOp<linalg::IndexOp>();
    if (index && (!compared || (reductions.size() == 1 &&
                                index.getDim() == reductions.front())))
      compared = index.getDim();
  };
  for (Value side : {cmp.getLhs(), cmp.getRhs()}) {
    consider(side);
    if (auto addi = side.getDefiningOp<arith::AddIOp>()) {
      consider(addi.getLhs());
      consider(addi.getRhs());
    }
  }
  if (!compared)
    return std::nullopt;
  unsigned dim = *compared;
  bool scatter = false;
  if (reductions.size() != 1 || reductions.front() != dim) {
    if (!allowScatter || llvm::is_contained(reductions, dim) ||
        llvm::any_of(op.getDpsInputOperands(), [&](OpOperand *input) {
          return isa<RankedTensorType>(input->get().getType()) &&
                 op.getMatchingIndexingMap(input).isFunctionOfDim(dim);
        }))
      return std::nullopt;
    scatter = true;
  }
  // One side is index(dim) [+ offset], the other is invariant.
  auto asIndexPlusOffset = [&](Value v, Value &offset) {
    offset = nullptr;
    if (auto index = v.getDefiningOp<linalg::IndexOp>())
      return index.getDim() == dim;
    auto addi = v.getDefiningOp<arith::AddIOp>();
    if (!addi)
      return false;
    for (auto [a, b] : {std::pair(addi.getLhs(), addi.getRhs()),
                        std::pair(addi.getRhs(), addi.getLhs())}) {
      auto index = a.getDefiningOp<linalg::IndexOp>();
      if (index && index.getDim() == dim &&
          (!b.getDefiningOp() || b.getDefiningOp()->getBlock() != &body)) {
        offset = b;
        return true;
      }
    }
    return false;
  };
  Lookup lookup;
  lookup.dim = dim;
  lookup.scatter = scatter;
  for (auto [indexSide, keySide] : {std::pair(cmp.getLhs(), cmp.getRhs()),
                                    std::pair(cmp.getRhs(), cmp.getLhs())}) {
    Value offset;
    if (!asIndexPlusOffset(indexSide, offset))
      continue;
    llvm::SetVector<Operation *> slice;
    if (!collectInvariantSlice(op, keySide, dim, slice))
      continue;
    if (!keySide.getType().isIndex())
      continue;
    lookup.key = keySide;
    lookup.offset = offset;
    lookup.keyOps = std::move(slice);
    return lookup;
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Roundings and fills around GEMMs
//===----------------------------------------------------------------------===//

linalg::GenericOp mlir::tp::emit::roundingToBF16Of(linalg::GenericOp gemm) {
  Value sum = gemm.getResult(0);
  if (!sum.hasOneUse() || !getElementTypeOrSelf(sum.getType()).isF32())
    return {};
  auto round = dyn_cast<linalg::GenericOp>(*sum.getUsers().begin());
  if (!round || round.getNumDpsInputs() != 1 || round.getNumDpsInits() != 1 ||
      round.getDpsInputs()[0] != sum ||
      round.getNumParallelLoops() != round.getNumLoops() ||
      !llvm::all_of(round.getIndexingMapsArray(),
                    [](AffineMap map) { return map.isIdentity(); }) ||
      !getElementTypeOrSelf(round.getResult(0).getType()).isBF16())
    return {};
  // yield truncf(select(|x| == inf, x, min(max(x, lo), hi))), x the input.
  Block &body = round.getRegion().front();
  Value x = body.getArgument(0);
  auto trunc =
      body.getTerminator()->getOperand(0).getDefiningOp<arith::TruncFOp>();
  auto select =
      trunc ? trunc.getIn().getDefiningOp<arith::SelectOp>() : nullptr;
  auto min = select ? select.getFalseValue().getDefiningOp<arith::MinimumFOp>()
                    : nullptr;
  auto max = min ? min.getLhs().getDefiningOp<arith::MaximumFOp>() : nullptr;
  auto isInf =
      select ? select.getCondition().getDefiningOp<arith::CmpFOp>() : nullptr;
  auto abs = isInf ? isInf.getLhs().getDefiningOp<math::AbsFOp>() : nullptr;
  if (!max || !abs || select.getTrueValue() != x || max.getLhs() != x ||
      abs.getOperand() != x ||
      isInf.getPredicate() != arith::CmpFPredicate::OEQ ||
      !matchPattern(isInf.getRhs(), m_PosInfFloat()))
    return {};
  return round;
}

bool mlir::tp::emit::onlyFeedsGemms(linalg::FillOp fill) {
  Value result = fill.getResult(0);
  if (result.use_empty() || !isZeroFill(result))
    return false;
  return llvm::all_of(result.getUses(), [](OpOperand &use) {
    auto generic = dyn_cast<linalg::GenericOp>(use.getOwner());
    return generic && generic.isDpsInit(&use) && succeeded(matchGemm(generic));
  });
}

std::optional<mlir::tp::Kernel> mlir::tp::emit::getKernel(Operation *op) {
  if (auto kernel = op->getAttrOfType<KernelAttr>(TPDialect::kKernelAttrName))
    return kernel.getValue();
  return std::nullopt;
}
