//===- PadVocabulary.cpp - tp-pad-vocabulary ------------------------------===//
//
// Megatron-LM pads the vocabulary to a multiple of the tensor-parallel size
// so that the embedding and the LM head always split: GPT-2's 50257 tokens
// would otherwise leave half of its FLOPs (the LM head) and its largest
// weight whole on every rank. This pass does the same by structure, before
// planning: an embedding table whose rows, or an LM head whose output dim
// (reaching a function result), the device count does not divide is read
// through a zero `tensor.pad` to the next multiple. Padded rows match no
// token id; padded logits are sliced off before the result. After
// partition, tp-localize-padded-weights makes each rank's argument its
// share of the padded weight, and the artifact writer fills the padding
// with zeros.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

#include <map>
#include <tuple>

namespace mlir::tp {
#define GEN_PASS_DEF_PADVOCABULARY
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

int64_t roundUp(int64_t size, int64_t devices) {
  return (size + devices - 1) / devices * devices;
}

/// A weight argument of the function; with `soleUse`, read by exactly one
/// op.
BlockArgument getWeightArg(Value v, bool soleUse) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || (soleUse && !arg.hasOneUse()))
    return {};
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  if (!func || !func.getArgAttr(arg.getArgNumber(), TPDialect::kWeightAttrName))
    return {};
  return arg;
}
BlockArgument getSoleUseWeight(Value v) { return getWeightArg(v, true); }

/// `weight` padded with zeros at the end of `dim` to `size`.
Value padWeight(OpBuilder &b, Value weight, int64_t dim, int64_t size) {
  auto type = cast<RankedTensorType>(weight.getType());
  SmallVector<int64_t> shape(type.getShape());
  SmallVector<OpFoldResult> low, high;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    low.push_back(b.getIndexAttr(0));
    high.push_back(b.getIndexAttr(d == dim ? size - shape[d] : 0));
  }
  shape[dim] = size;
  Location loc = weight.getLoc();
  Value zero =
      arith::ConstantOp::create(b, loc, b.getZeroAttr(type.getElementType()));
  return tensor::PadOp::create(b, loc, type.clone(shape), weight, low, high,
                               zero);
}

/// A copy of `op` (a generic) on `inputs`, with result dim `dim` of size
/// `size`; the init is a fresh fill of the same value (or an empty tensor).
FailureOr<linalg::GenericOp> rebuildWider(IRRewriter &rewriter,
                                          linalg::GenericOp op,
                                          ValueRange inputs, int64_t dim,
                                          int64_t size) {
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  Value init =
      tensor::EmptyOp::create(rewriter, loc, shape, type.getElementType());
  Value oldInit = op.getDpsInits()[0];
  if (auto fill = oldInit.getDefiningOp<linalg::FillOp>())
    init = linalg::FillOp::create(rewriter, loc, fill.getInputs()[0], init)
               .getResult(0);
  else if (!oldInit.getDefiningOp<tensor::EmptyOp>() &&
           op.payloadUsesValueFromOperand(op.getDpsInitOperand(0)))
    return failure();
  auto wide = linalg::GenericOp::create(
      rewriter, loc, TypeRange{type.clone(shape)}, inputs, ValueRange{init},
      op.getIndexingMapsArray(), op.getIteratorTypesArray());
  rewriter.inlineRegionBefore(op.getRegion(), wide.getRegion(),
                              wide.getRegion().end());
  wide->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  return wide;
}

/// True if `op` computes each entry of its one result from the entry of
/// `logits` at the same place, and its other operands do not vary along
/// result dim `dim`: padding `logits` on `dim` pads the result alike and
/// leaves its other entries as they were.
bool isElementwiseAlong(linalg::GenericOp op, Value logits, int64_t dim) {
  if (op.getNumDpsInits() != 1 || op.getNumReductionLoops() != 0 ||
      !op.getMatchingIndexingMap(op.getDpsInitOperand(0)).isIdentity() ||
      !op.getBody()->getOps<linalg::IndexOp>().empty())
    return false;
  int reads = 0;
  for (OpOperand *input : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(input);
    if (input->get() == logits) {
      if (!map.isIdentity())
        return false;
      ++reads;
    } else if (map.isFunctionOfDim(dim)) {
      return false;
    }
  }
  return reads == 1;
}

struct PadVocabulary : tp::impl::PadVocabularyBase<PadVocabulary> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (devices < 2)
      return;
    padEmbeddings(func);
    if (failed(padHeads(func)))
      signalPassFailure();
  }

  /// The table or head weight `weight` padded on `dim` to `size`: one pad
  /// per weight, at the top of the function, so that a table tied to the
  /// LM head (one weight read by both, as a TorchScript module has it) is
  /// padded once and stays one argument.
  Value getPadded(BlockArgument weight, int64_t dim, int64_t size) {
    auto key = std::make_tuple(weight.getAsOpaquePointer(), dim, size);
    auto it = padded.find(key);
    if (it != padded.end())
      return it->second;
    OpBuilder b = OpBuilder::atBlockBegin(weight.getOwner());
    return padded[key] = padWeight(b, weight, dim, size);
  }
  std::map<std::tuple<void *, int64_t, int64_t>, Value> padded;

  /// Word-embedding tables: rows up to a multiple of the devices.
  void padEmbeddings(func::FuncOp func) {
    func.walk([&](linalg::GenericOp op) {
      auto vocab =
          op->getAttrOfType<IntegerAttr>(TPDialect::kEmbeddingAttrName);
      if (!vocab || vocab.getInt() % devices == 0 ||
          !isModelInput(op.getDpsInputs()[0]))
        return;
      BlockArgument table = getWeightArg(op.getDpsInputs()[1], false);
      if (!table)
        return;
      int64_t size = roundUp(vocab.getInt(), devices);
      op->setOperand(1, getPadded(table, 0, size));
      op->setAttr(
          TPDialect::kEmbeddingAttrName,
          IntegerAttr::get(IntegerType::get(op->getContext(), 64), size));
    });
  }

  /// LM heads: a weight contraction whose output dim reaches a function
  /// result (through a bias add and casts) and does not divide.
  LogicalResult padHeads(func::FuncOp func) {
    SmallVector<linalg::LinalgOp> heads;
    func.walk([&](linalg::LinalgOp op) {
      if (getWeightOperand(op))
        heads.push_back(op);
    });
    IRRewriter rewriter(func.getContext());
    for (linalg::LinalgOp head : heads)
      if (failed(padHead(rewriter, head)))
        return failure();
    return success();
  }

  LogicalResult padHead(IRRewriter &rewriter, linalg::LinalgOp head) {
    unsigned weightIdx = *getWeightOperand(head);
    BlockArgument weight = getWeightArg(head->getOperand(weightIdx), false);
    if (!weight || head->getNumResults() != 1 || !head->hasOneUse())
      return success();
    // The output dim: a parallel loop of the weight that the result keeps.
    AffineMap weightMap =
        head.getMatchingIndexingMap(&head->getOpOperand(weightIdx));
    AffineMap resultMap = head.getIndexingMapMatchingResult(head->getResult(0));
    std::optional<int64_t> weightDim, resultDim;
    for (auto [d, expr] : llvm::enumerate(weightMap.getResults())) {
      auto loop = dyn_cast<AffineDimExpr>(expr);
      if (!loop || head.getIteratorTypesArray()[loop.getPosition()] !=
                       utils::IteratorType::parallel)
        continue;
      if (auto r = resultMap.getResultPosition(loop)) {
        weightDim = d;
        resultDim = *r;
      }
    }
    if (!weightDim)
      return success();
    auto weightType = cast<RankedTensorType>(weight.getType());
    int64_t size = weightType.getDimSize(*weightDim);
    if (size % devices == 0)
      return success();
    // What follows: an optional bias add (a weight of [size] on the output
    // dim, or one broadcast along other dims, as BART's [1, size]
    // `final_logits_bias`), then the function result.
    Operation *user = *head->getUsers().begin();
    auto bias = dyn_cast<linalg::GenericOp>(user);
    Value biasArg;
    int64_t biasDim = 0;
    if (bias && bias.getNumDpsInputs() == 2 && bias->hasOneUse() &&
        bias.getNumReductionLoops() == 0) {
      for (OpOperand *input : bias.getDpsInputOperands())
        if (getBiasWeight(input->get()))
          if (std::optional<int64_t> dim =
                  getBiasDim(bias, input, head->getResult(0), *resultDim)) {
            biasArg = input->get();
            biasDim = *dim;
          }
    }
    // Not a bias add: maybe the first of the elementwise ops below.
    if (biasArg)
      user = *bias->getUsers().begin();
    else
      bias = {};
    // Then elementwise ops on the logits whose other operands are the same
    // for every vocabulary entry (a cast to float32, as GPT-J's
    // `lm_logits.to(torch.float32)` exports; Granite's division and
    // Cohere's product by a scale; Gemma 2's tanh soft-capping), then the
    // result.
    SmallVector<linalg::GenericOp> tail;
    Value logits = bias ? bias->getResult(0) : head->getResult(0);
    while (auto op = dyn_cast<linalg::GenericOp>(user)) {
      if (!op->hasOneUse() || !isElementwiseAlong(op, logits, *resultDim))
        return success();
      tail.push_back(op);
      logits = op->getResult(0);
      user = *op->getUsers().begin();
    }
    if (!isa<func::ReturnOp>(user))
      return success();

    int64_t padded = roundUp(size, devices);
    rewriter.setInsertionPoint(head);
    auto generic = dyn_cast<linalg::GenericOp>(head.getOperation());
    if (!generic) {
      FailureOr<linalg::GenericOp> g =
          linalg::generalizeNamedOp(rewriter, head);
      if (failed(g))
        return success();
      generic = *g;
    }
    // Before the generic (generalizing erased the named op the insertion
    // point was at).
    rewriter.setInsertionPoint(generic);
    Value padWeightValue = getPadded(weight, *weightDim, padded);
    SmallVector<Value> inputs(generic.getDpsInputs());
    inputs[weightIdx] = padWeightValue;
    FailureOr<linalg::GenericOp> wide =
        rebuildWider(rewriter, generic, inputs, *resultDim, padded);
    if (failed(wide))
      return generic.emitError("tp-pad-vocabulary: cannot widen this "
                               "contraction's init");
    Value result = wide->getResult(0);
    Value last = generic->getResult(0);
    if (bias) {
      rewriter.setInsertionPoint(bias);
      SmallVector<Value> biasInputs;
      for (Value input : bias.getDpsInputs())
        biasInputs.push_back(input == last ? result
                             : input == biasArg
                                 ? padBias(rewriter, biasArg, biasDim, padded)
                                 : input);
      FailureOr<linalg::GenericOp> wideBias =
          rebuildWider(rewriter, bias, biasInputs, *resultDim, padded);
      if (failed(wideBias))
        return bias.emitError("tp-pad-vocabulary: cannot widen this bias "
                              "add's init");
      result = wideBias->getResult(0);
      last = bias->getResult(0);
    }
    for (linalg::GenericOp op : tail) {
      SmallVector<Value> tailInputs(op.getDpsInputs());
      llvm::replace(tailInputs, last, result);
      FailureOr<linalg::GenericOp> wideOp =
          rebuildWider(rewriter, op, tailInputs, *resultDim, padded);
      if (failed(wideOp))
        return op.emitError("tp-pad-vocabulary: cannot widen this op's init");
      result = wideOp->getResult(0);
      last = op->getResult(0);
    }
    // The padded logits are dropped before the result.
    auto lastType = cast<RankedTensorType>(last.getType());
    rewriter.setInsertionPointAfterValue(result);
    SmallVector<int64_t> offsets(lastType.getRank(), 0),
        strides(lastType.getRank(), 1);
    auto unpad = tensor::ExtractSliceOp::create(
        rewriter, last.getLoc(), lastType, result, ValueRange{}, ValueRange{},
        ValueRange{}, offsets, lastType.getShape(), strides);
    rewriter.replaceAllUsesWith(last, unpad.getResult());
    SmallVector<Value> oldInits = {generic.getDpsInits()[0]};
    for (linalg::GenericOp op : llvm::reverse(tail)) {
      oldInits.push_back(op.getDpsInits()[0]);
      rewriter.eraseOp(op);
    }
    if (bias) {
      oldInits.push_back(bias.getDpsInits()[0]);
      rewriter.eraseOp(bias);
      // The collapse the old bias read the weight through.
      if (auto collapse = biasArg.getDefiningOp<tensor::CollapseShapeOp>();
          collapse && collapse->use_empty())
        rewriter.eraseOp(collapse);
    }
    rewriter.eraseOp(generic);
    // Their inits (a fill of an empty tensor) are dead now; partition
    // cannot place an unused value.
    for (Value init : oldInits)
      eraseIfDead(rewriter, init);
    return success();
  }

  /// The weight a bias operand reads: a sole-use weight argument, or one
  /// read through a collapse of unit dims (the importer's view of a
  /// broadcast [1, V] bias as [V]).
  static BlockArgument getBiasWeight(Value operand) {
    if (auto collapse = operand.getDefiningOp<tensor::CollapseShapeOp>()) {
      if (!collapse->hasOneUse() ||
          collapse.getSrcType().getNumElements() !=
              llvm::max_element(collapse.getSrcType().getShape())[0])
        return {};
      operand = collapse.getSrc();
    }
    return getSoleUseWeight(operand);
  }

  /// `operand` (a bias that getBiasWeight accepts) padded with zeros on
  /// its dim `dim` to `size`: the weight itself, before a collapse.
  static Value padBias(IRRewriter &rewriter, Value operand, int64_t dim,
                       int64_t size) {
    auto collapse = operand.getDefiningOp<tensor::CollapseShapeOp>();
    if (!collapse)
      return padWeight(rewriter, operand, dim, size);
    // The collapse keeps the one dim that is not of size 1: pad that.
    ArrayRef<int64_t> shape = collapse.getSrcType().getShape();
    int64_t srcDim = llvm::max_element(shape) - shape.begin();
    Value padded = padWeight(rewriter, collapse.getSrc(), srcDim, size);
    return tensor::CollapseShapeOp::create(rewriter, collapse.getLoc(), padded,
                                           collapse.getReassociationIndices());
  }

  /// The dim of `bias`'s operand `biasOperand` that it adds along dim
  /// `dim` of `logits` (its other operand): the one dim of `size` rows that
  /// reads the same loop, every other dim broadcast (of size 1); nullopt if
  /// it is not such a bias.
  static std::optional<int64_t> getBiasDim(linalg::GenericOp bias,
                                           OpOperand *biasOperand, Value logits,
                                           int64_t dim) {
    OpOperand *logitsOperand = nullptr;
    for (OpOperand *input : bias.getDpsInputOperands())
      if (input != biasOperand && input->get() == logits)
        logitsOperand = input;
    if (!logitsOperand)
      return std::nullopt;
    AffineExpr loop = bias.getMatchingIndexingMap(logitsOperand).getResult(dim);
    int64_t size = cast<RankedTensorType>(logits.getType()).getDimSize(dim);
    auto type = cast<RankedTensorType>(biasOperand->get().getType());
    AffineMap map = bias.getMatchingIndexingMap(biasOperand);
    std::optional<int64_t> found;
    for (auto [d, expr] : llvm::enumerate(map.getResults())) {
      if (expr == loop && type.getDimSize(d) == size && !found)
        found = d;
      else if (type.getDimSize(d) != 1)
        return std::nullopt;
    }
    return found;
  }

  static void eraseIfDead(IRRewriter &rewriter, Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || !v.use_empty() || !isa<linalg::FillOp, tensor::EmptyOp>(def))
      return;
    SmallVector<Value> operands(def->getOperands());
    rewriter.eraseOp(def);
    for (Value operand : operands)
      if (isa<RankedTensorType>(operand.getType()))
        eraseIfDead(rewriter, operand);
  }
};

} // namespace
