//===- TensorParallelPlan.cpp - Megatron-style split analysis -------------===//
//
// Follows the output dim of each weight contraction forward, op by op, to
// see where it ends: in the contracting dim of another weight contraction
// (a column→row pair, as Megatron-LM builds them by hand), at a function
// result (a gathered LM head), or somewhere a split cannot pass (a
// reduction over it, a slice of it), in which case the weight stays
// replicated and the reason is kept for the explanation.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/TensorParallelPlan.h"
#include "tp/Dialect/TP/TPOps.h"

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::tp;

/// What `v` transposes: the input of a linalg.transpose, or of a generic
/// that only permutes its one input's dims (a transpose generalized).
static Value getTransposeSource(Value v) {
  auto op = v.getDefiningOp<linalg::LinalgOp>();
  if (!op || op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() != 0)
    return {};
  if (auto transpose = dyn_cast<linalg::TransposeOp>(op.getOperation()))
    return transpose.getInput();
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic)
    return {};
  AffineMap in = generic.getIndexingMapsArray()[0];
  AffineMap out = generic.getIndexingMapsArray()[1];
  auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
  if (!out.isIdentity() || !in.isPermutation() || in.isIdentity() ||
      yield.getNumOperands() != 1 ||
      yield.getOperand(0) != generic.getBody()->getArgument(0))
    return {};
  return generic.getDpsInputs()[0];
}

/// A `tp.weight` argument of the enclosing function, or a static slice of
/// one (a fused projection split by tp-split-fused-projections).
static Value getWeightArg(Value v) {
  if (auto slice = v.getDefiningOp<tensor::ExtractSliceOp>())
    return getWeightArg(slice.getSource()) && slice.getOffsets().empty()
               ? v
               : Value();
  // A weight padded to a multiple of the devices (tp-pad-vocabulary).
  if (auto pad = v.getDefiningOp<tensor::PadOp>())
    return isa<BlockArgument>(pad.getSource()) &&
                   getWeightArg(pad.getSource()) &&
                   pad.getConstantPaddingValue()
               ? v
               : Value();
  // A weight read transposed: an LM head tied to the embedding table
  // (tp-compile --train imports the export's transposed copy so). The plan
  // splits the transpose as a weight of its own, consistently with the
  // table's own split (its vocabulary, dim 0, is the transpose's dim 1).
  if (Value source = getTransposeSource(v))
    return isa<BlockArgument>(source) && getWeightArg(source) ? v : Value();
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return {};
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  if (!func || arg.getOwner() != &func.getBody().front() ||
      !func.getArgAttr(arg.getArgNumber(), TPDialect::kWeightAttrName))
    return {};
  return arg;
}

bool mlir::tp::isBroadcast(Value v) {
  auto generic = v.getDefiningOp<linalg::GenericOp>();
  return generic && generic.getNumDpsInputs() == 1 &&
         generic.getNumReductionLoops() == 0 &&
         generic.getMatchingIndexingMap(generic.getDpsInputOperand(0))
                 .getNumResults() < generic.getNumLoops();
}

/// True if every use of `arg` is an input operand of a linalg op, possibly
/// through reshapes (a convolution's filter viewed with its group dims), so
/// that an annotate_for_users shard op can stand in for it.
static bool isReadAsOperandOnly(Value arg) {
  return llvm::all_of(arg.getUses(), [](OpOperand &use) {
    Operation *user = use.getOwner();
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(user))
      return isReadAsOperandOnly(user->getResult(0));
    auto op = dyn_cast<linalg::LinalgOp>(user);
    return op && op.isDpsInput(&use);
  });
}

/// The weight that `v` is, possibly through reshapes that only add or drop
/// unit dims around `dim`, with the weight's dim that holds `dim`.
static std::optional<std::pair<Value, int64_t>> getReshapedWeight(Value v,
                                                                  int64_t dim) {
  if (Value weight = getWeightArg(v))
    return std::make_pair(weight, dim);
  if (auto expand = v.getDefiningOp<tensor::ExpandShapeOp>()) {
    for (auto [srcDim, group] :
         llvm::enumerate(expand.getReassociationIndices())) {
      if (!llvm::is_contained(group, dim))
        continue;
      for (int64_t d : group)
        if (d != dim && expand.getResultType().getDimSize(d) != 1)
          return std::nullopt;
      return getReshapedWeight(expand.getSrc(), srcDim);
    }
    return std::nullopt;
  }
  if (auto collapse = v.getDefiningOp<tensor::CollapseShapeOp>()) {
    ReassociationIndices group = collapse.getReassociationIndices()[dim];
    std::optional<int64_t> srcDim;
    for (int64_t d : group) {
      if (collapse.getSrcType().getDimSize(d) == 1)
        continue;
      if (srcDim)
        return std::nullopt;
      srcDim = d;
    }
    return getReshapedWeight(collapse.getSrc(), srcDim.value_or(group.front()));
  }
  return std::nullopt;
}

/// The one loop `expr` reads, if it is a loop plus loops of one iteration:
/// a grouped convolution with one channel a group (a depthwise one) reads
/// its input channel as d1 + d4, d4 over that one channel, which is d1.
static std::optional<unsigned> getPlainLoop(AffineExpr expr,
                                            ArrayRef<int64_t> ranges) {
  if (auto d = dyn_cast<AffineDimExpr>(expr))
    return d.getPosition();
  auto add = dyn_cast<AffineBinaryOpExpr>(expr);
  if (!add || add.getKind() != AffineExprKind::Add)
    return std::nullopt;
  std::optional<unsigned> lhs = getPlainLoop(add.getLHS(), ranges);
  std::optional<unsigned> rhs = getPlainLoop(add.getRHS(), ranges);
  if (!lhs || !rhs || (ranges[*lhs] == 1) == (ranges[*rhs] == 1))
    return std::nullopt;
  return ranges[*lhs] == 1 ? rhs : lhs;
}

/// The dim of `map` that reads loop `loop` plainly (see getPlainLoop).
static std::optional<unsigned> getPlainDim(AffineMap map, unsigned loop,
                                           ArrayRef<int64_t> ranges) {
  for (auto [i, expr] : llvm::enumerate(map.getResults()))
    if (getPlainLoop(expr, ranges) == loop)
      return i;
  return std::nullopt;
}

/// True if every operand of `op` reads loop `loop` plainly, outside any
/// window (a depthwise convolution's channels, not its sequence), and its
/// body does not read the loop's index: each rank can run `op` on its
/// part of the loop alone.
static bool isSeparableLoop(linalg::LinalgOp op, unsigned loop,
                            ArrayRef<int64_t> ranges) {
  if (!op.getBlock()->getOps<linalg::IndexOp>().empty())
    return false;
  return llvm::all_of(op.getIndexingMapsArray(), [&](AffineMap map) {
    return llvm::all_of(map.getResults(), [&](AffineExpr expr) {
      return !expr.isFunctionOfDim(loop) || getPlainLoop(expr, ranges) == loop;
    });
  });
}

static std::string getWeightName(Value v) {
  if (auto slice = v.getDefiningOp<tensor::ExtractSliceOp>())
    return getWeightName(slice.getSource()) + " (slice)";
  if (auto pad = v.getDefiningOp<tensor::PadOp>())
    return getWeightName(pad.getSource()) + " (padded)";
  if (Value source = getTransposeSource(v))
    return getWeightName(source) + " (transposed)";
  auto arg = cast<BlockArgument>(v);
  auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                TPDialect::kWeightAttrName);
  return name ? name.str() : "arg" + std::to_string(arg.getArgNumber());
}

std::optional<unsigned> mlir::tp::getWeightOperand(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || linalgOp.getNumDpsInputs() != 2 ||
      linalgOp.getNumReductionLoops() == 0 ||
      !linalg::isaContractionOpInterface(linalgOp))
    return std::nullopt;
  bool lhs = bool(getWeightArg(op->getOperand(0)));
  bool rhs = bool(getWeightArg(op->getOperand(1)));
  if (!lhs && !rhs)
    return std::nullopt;
  if (lhs != rhs)
    return lhs ? 0u : 1u;
  // A product of two weights (a projection of a position table that the
  // export did not fold, DeBERTa's relative embeddings through a layer's
  // own Q/K projections): the larger is the projection to split, the
  // other its replicated input (the right one when they tie, as x @ W).
  auto bytes = [](Value v) {
    auto type = cast<ShapedType>(v.getType());
    return type.hasStaticShape() ? type.getNumElements() : int64_t(0);
  };
  return bytes(op->getOperand(0)) > bytes(op->getOperand(1)) ? 0u : 1u;
}

/// "1, 2, 4" for the device counts (up to 64) that divide `size`.
static std::string formatDivisors(int64_t size) {
  std::string s;
  for (int64_t d = 1; d <= 64 && d <= size; ++d)
    if (size % d == 0)
      s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

/// True if `ids` is a model input, possibly through reshapes and casts: the
/// token ids of a word embedding. Ids computed from the input (RoBERTa's and
/// OPT's positions, a CumSum over a mask) index a position table, which
/// Megatron-LM keeps whole: splitting it would cost an all-reduce per
/// forward pass to save a few rows.
bool mlir::tp::isModelInput(Value ids) {
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(ids)) {
      auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      return func &&
             func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName);
    }
    Operation *def = ids.getDefiningOp();
    if (isa_and_nonnull<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(def)) {
      ids = def->getOperand(0);
      continue;
    }
    // An elementwise cast: one input, parallel loops, a body of one op.
    auto generic = dyn_cast_or_null<linalg::GenericOp>(def);
    if (!generic || generic.getNumDpsInputs() != 1 ||
        generic.getNumReductionLoops() != 0 ||
        !generic.getBody()
             ->getOperations()
             .front()
             .hasTrait<OpTrait::OneOperand>() ||
        generic.getBody()->getOperations().size() != 2 ||
        !isa<CastOpInterface>(generic.getBody()->front()))
      return false;
    ids = generic.getDpsInputs()[0];
  }
}

/// A slice from offset 0 whose only users are function returns: the end of
/// a padded LM head (tp-pad-vocabulary), which drops the padded logits.
static bool isUnpadBeforeResult(tensor::ExtractSliceOp slice) {
  return !slice->use_empty() &&
         llvm::all_of(slice->getUsers(),
                      [](Operation *u) { return isa<func::ReturnOp>(u); }) &&
         llvm::all_of(slice.getStaticOffsets(),
                      [](int64_t o) { return o == 0; }) &&
         slice.hasUnitStride();
}

/// How a reduction generic combines into its one result: add or max of
/// the init and one value, as upstream partition all-reduces a partial
/// result (it gives ranks other than the first the neutral init).
static bool isSumOrMax(linalg::LinalgOp op) {
  if (op->getNumResults() != 1 || op.getNumDpsInits() != 1)
    return false;
  Block *body = op.getBlock();
  Value out = body->getArgument(op.getNumDpsInputs());
  Operation *combine = body->getTerminator()->getOperand(0).getDefiningOp();
  if (!combine || !out.hasOneUse() || *out.getUsers().begin() != combine ||
      combine->getNumOperands() != 2)
    return false;
  return isa<arith::AddFOp, arith::MaximumFOp, arith::MaxNumFOp>(combine);
}

/// A sum or max over `loop`, the split dim of the operand `use`, whose
/// result has at most one entry per entry of the operand without its split
/// dim: the reduction leaves a small partial result (the statistics of a
/// softmax over a split vocabulary), not a large one (attention scores
/// contracted over split features, which would all-reduce [batch, heads,
/// seq, seq]).
static bool isSmallReduction(linalg::LinalgOp op, OpOperand &use,
                             unsigned loop) {
  if (linalg::isaContractionOpInterface(op) && getWeightOperand(op))
    return false;
  if (!isSumOrMax(op))
    return false;
  auto split = dyn_cast<RankedTensorType>(use.get().getType());
  auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!split || !result || !split.hasStaticShape() ||
      !result.hasStaticShape() || ShapedType::isDynamic(ranges[loop]))
    return false;
  return result.getNumElements() * ranges[loop] <= split.getNumElements();
}

namespace {

/// Where a split dim goes, walking forward from one column contraction.
struct SplitTracker {
  explicit SplitTracker(int64_t devices) : devices(devices) {}

  /// Follows `dim` of `value` to all its users; false on the first place a
  /// split cannot pass (`failure` says why).
  bool follow(Value value, int64_t dim);

  int64_t devices;
  /// Row-parallel contractions reached: op → weight dim that splits.
  llvm::MapVector<Operation *, int64_t> rows;
  /// Weights applied elementwise on the way, with their split dim.
  llvm::MapVector<Value, int64_t> biases;
  /// Where each of those is read along the split, with the dim.
  llvm::MapVector<Value, llvm::MapVector<OpOperand *, int64_t>> biasReads;
  /// KV caches written on the way, with their split dim.
  llvm::MapVector<Value, int64_t> caches;
  /// Ops upstream partition cannot split, with the loop they split on.
  llvm::MapVector<Operation *, unsigned> splitLoops;
  /// Operands read split though their value is not (see
  /// TensorParallelPlan::splitOperands), with the dim.
  llvm::MapVector<OpOperand *, int64_t> splitOperands;
  /// Values of the backward that keep the split (see
  /// TensorParallelPlan::backwardSplits), with the dim; -1 where two paths
  /// disagree.
  llvm::MapVector<Value, int64_t> backwardSplits;
  /// Values that reach a function result split (see
  /// TensorParallelPlan::resultSplits), with the dim.
  llvm::MapVector<Value, int64_t> resultSplits;
  /// The split ends in a sum or max over it.
  bool reachesReduction = false;
  bool reachesResult = false;
  /// The failure is a dim that does not divide by the device count.
  bool uneven = false;
  std::string failure;

private:
  /// In the forward, ends the walk with the reason; in the backward, only
  /// stops this path (sharding propagation decides past it).
  bool fail(Operation *op, const Twine &why) {
    if (inBackward)
      return true;
    failure = ("'" + op->getName().getStringRef() + "' " + why).str();
    return false;
  }
  bool followUse(OpOperand &use, int64_t dim);
  bool followLinalg(linalg::LinalgOp op, OpOperand &use, int64_t dim);
  /// `value` is a backward value that every user reads along `dim` without
  /// gathering it when split there: elementwise (a plain dim of its
  /// result) or by a small sum over it (isSmallReduction).
  bool readsSplitEverywhere(Value value, int64_t dim);
  /// Follows `dim` of the backward value `value` (and, through elementwise
  /// ops, of what it is computed from) if readsSplitEverywhere allows.
  void splitBackwardInput(Value value, int64_t dim);
  DenseSet<std::pair<Value, int64_t>> visited;
  /// Walking the backward (ops tp-differentiate built), which reads the
  /// forward's split values: the split is followed to keep the gradients
  /// split as their forward values are, and nothing it meets there changes
  /// the forward's plan.
  bool inBackward = false;
};

bool SplitTracker::follow(Value value, int64_t dim) {
  if (!visited.insert({value, dim}).second)
    return true;
  if (inBackward) {
    auto [it, inserted] = backwardSplits.try_emplace(value, dim);
    if (!inserted && it->second != dim) {
      it->second = -1;
      return true;
    }
  }
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (!inBackward && user->hasAttr(TPDialect::kBackwardAttrName)) {
      inBackward = true;
      followUse(use, dim);
      inBackward = false;
      continue;
    }
    if (!followUse(use, dim))
      return false;
  }
  return true;
}

bool SplitTracker::followUse(OpOperand &use, int64_t dim) {
  Operation *user = use.getOwner();
  {
    bool ok = true;
    if (isa<func::ReturnOp>(user)) {
      reachesResult |= !inBackward;
      if (!inBackward)
        resultSplits[use.get()] = dim;
    } else if (auto op = dyn_cast<linalg::LinalgOp>(user)) {
      ok = followLinalg(op, use, dim);
    } else if (auto expand = dyn_cast<tensor::ExpandShapeOp>(user)) {
      // The split lands on the outermost non-unit dim of the group (heads,
      // for [B, S, H*D] -> [B, S, H, D]; H*D for [B, H*D] -> [B, 1, H*D],
      // a one-token step); it must divide by the devices.
      RankedTensorType resultType = expand.getResultType();
      ReassociationIndices group = expand.getReassociationIndices()[dim];
      int64_t outer = group.front();
      for (int64_t d : group)
        if (resultType.getDimSize(d) != 1) {
          outer = d;
          break;
        }
      int64_t size = resultType.getDimSize(outer);
      if (size % devices != 0) {
        uneven = !inBackward;
        return fail(user, "splits dim " + Twine(dim) + " into dim " +
                              Twine(outer) + " of size " + Twine(size) +
                              " (heads), which " + Twine(devices) +
                              " devices do not divide; device counts that "
                              "do: " +
                              formatDivisors(size));
      }
      ok = follow(expand.getResult(), outer);
    } else if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(user)) {
      auto groups = collapse.getReassociationIndices();
      auto it = llvm::find_if(groups, [&](const ReassociationIndices &g) {
        return llvm::is_contained(g, dim);
      });
      // Unit dims outside the split one hold no data: [B, 1, H*D] ->
      // [B, H*D] keeps the split whole.
      int64_t outer = 1;
      for (int64_t d : *it) {
        if (d == dim)
          break;
        outer *= collapse.getSrcType().getDimSize(d);
      }
      if (outer != 1) {
        return fail(user, "merges split dim " + Twine(dim) +
                              " under an outer dim of " + Twine(outer) +
                              " (it lies inside each of them, as a K/V "
                              "head shared by all query heads does)");
      }
      ok = follow(collapse.getResult(), it - groups.begin());
    } else if (auto slice = dyn_cast<tensor::ExtractSliceOp>(user);
               slice && isUnpadBeforeResult(slice)) {
      // Padded logits dropped before the result: gathered, then sliced.
      reachesResult |= !inBackward;
      if (!inBackward)
        resultSplits[slice.getSource()] = dim;
    } else if (auto slice = dyn_cast<tensor::ExtractSliceOp>(user)) {
      auto srcType = slice.getSourceType();
      if (slice.getResultType().getRank() != srcType.getRank() ||
          slice.getStaticOffsets()[dim] != 0 ||
          slice.getStaticSizes()[dim] != srcType.getDimSize(dim) ||
          slice.getStaticStrides()[dim] != 1)
        return fail(user, "slices the split dim " + Twine(dim));
      ok = follow(slice.getResult(), dim);
    } else if (auto pad = dyn_cast<tensor::PadOp>(user)) {
      // Padding on other dims (a causal convolution's, on the sequence)
      // leaves each rank's part of the split dim as it was.
      if (!pad.getLow().empty() || !pad.getHigh().empty() ||
          !pad.getConstantPaddingValue())
        return fail(user, "pads by a computed amount or with a computed "
                          "value");
      if (pad.getStaticLow()[dim] != 0 || pad.getStaticHigh()[dim] != 0)
        return fail(user, "pads the split dim " + Twine(dim));
      ok = follow(pad.getResult(), dim);
    } else if (auto update = dyn_cast<CacheUpdateOp>(user)) {
      // A KV cache splits as the keys or values written into it (by heads).
      if (static_cast<int64_t>(update.getDim()) == dim)
        return fail(user, "writes the cache along the split dim");
      caches[update.getCache()] = dim;
      ok = follow(update.getResult(), dim);
    } else if (auto concat = dyn_cast<tensor::ConcatOp>(user)) {
      if (static_cast<int64_t>(concat.getDim()) == dim)
        return fail(user, "concatenates along the split dim");
      ok = follow(concat.getResult(), dim);
    } else {
      return fail(user, "has no tensor-parallel rule");
    }
    if (!ok)
      return false;
  }
  return true;
}

bool SplitTracker::followLinalg(linalg::LinalgOp op, OpOperand &use,
                                int64_t dim) {
  Operation *user = op.getOperation();
  if (op.isDpsInit(&use))
    return fail(user, "accumulates into a split value");
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  std::optional<unsigned> plain =
      getPlainLoop(op.getMatchingIndexingMap(&use).getResult(dim), ranges);
  if (!plain)
    return fail(user, "reads the split dim through a non-trivial index");
  unsigned loop = *plain;
  if (op.getIteratorTypesArray()[loop] == utils::IteratorType::reduction) {
    std::optional<unsigned> weightIdx = getWeightOperand(user);
    // The backward's sums over the split dim (the input gradient of a
    // column-parallel product, the softmax's over a split vocabulary) run
    // on each rank's part, then one all-reduce.
    if (inBackward) {
      if (isSumOrMax(op) && (weightIdx || isSmallReduction(op, use, loop)))
        splitOperands[&use] = dim;
      return true;
    }
    // A sum or max over the split dim into a result no larger than one
    // entry per split row (a softmax's statistics over the vocabulary, the
    // target's logit of a cross-entropy): each rank reduces its part, one
    // all-reduce completes it, and the split ends here.
    if (!weightIdx && isSmallReduction(op, use, loop)) {
      splitOperands[&use] = dim;
      reachesReduction = true;
      return true;
    }
    if (!weightIdx && op.getNumDpsInputs() == 2)
      return fail(user, "contracts the split dim with another activation "
                        "(one head's features, which every query head "
                        "reads, as a multi-query K/V head is)");
    if (!weightIdx || *weightIdx == use.getOperandNumber())
      return fail(user, "reduces over the split dim");
    // A row-parallel contraction: its weight splits on the same loop.
    AffineMap weightMap =
        op.getMatchingIndexingMap(&user->getOpOperand(*weightIdx));
    std::optional<unsigned> weightDim =
        weightMap.getResultPosition(getAffineDimExpr(loop, user->getContext()));
    if (!weightDim)
      return fail(user, "does not read its weight on the split dim");
    rows[user] = *weightDim;
    return true;
  }
  std::optional<unsigned> resultDim = getPlainDim(
      op.getIndexingMapMatchingResult(cast<OpResult>(user->getResult(0))), loop,
      ranges);
  if (!resultDim)
    return fail(user, "drops the split dim");
  // A window (a convolution's) that upstream partition cannot split: it can
  // still run on each rank's part of a loop that no window reads.
  if (!llvm::all_of(op.getIndexingMapsArray(), [](AffineMap map) {
        return map.isProjectedPermutation();
      })) {
    if (!isSeparableLoop(op, loop, ranges))
      return fail(user, "reads the split dim inside a window");
    splitLoops[user] = loop;
  }
  // Weights applied elementwise along the split dim split with it (a
  // depthwise convolution's filters, viewed with their group dims).
  for (OpOperand *input : op.getDpsInputOperands()) {
    if (input == &use)
      continue;
    std::optional<unsigned> d =
        getPlainDim(op.getMatchingIndexingMap(input), loop, ranges);
    if (!d)
      continue;
    if (auto weight = getReshapedWeight(input->get(), *d)) {
      if (inBackward)
        continue;
      biases[weight->first] = weight->second;
      biasReads[weight->first][input] = *d;
      // A bias read through a reshape (BART's [1, vocab] final_logits_bias
      // as [vocab]) is read split too: otherwise sharding propagation may
      // settle the op whole, as a function result wants it, and gather
      // both the split product and the bias.
      if (input->get() != weight->first &&
          op.getMatchingIndexingMap(input).isProjectedPermutation())
        splitOperands[input] = *d;
    } else if (isModelInput(input->get()))
      splitOperands[input] = *d;
    else if (inBackward)
      splitBackwardInput(input->get(), *d);
  }
  return follow(user->getResult(0), *resultDim);
}

void SplitTracker::splitBackwardInput(Value value, int64_t dim) {
  if (visited.contains({value, dim}) || !readsSplitEverywhere(value, dim))
    return;
  // A backward value read here along the split (a cross-entropy's gradient
  // of the log-probabilities, built from the labels) splits with it, so
  // that its other readers, sums over the split dim, take their part
  // instead of gathering it; and so, elementwise, do the values it is
  // computed from.
  follow(value, dim);
  auto def = cast<linalg::LinalgOp>(value.getDefiningOp());
  SmallVector<int64_t> ranges = def.getStaticLoopRanges();
  std::optional<unsigned> loop = getPlainLoop(
      def.getIndexingMapMatchingResult(cast<OpResult>(value)).getResult(dim),
      ranges);
  if (!loop ||
      def.getIteratorTypesArray()[*loop] != utils::IteratorType::parallel)
    return;
  for (OpOperand *input : def.getDpsInputOperands())
    if (auto d = getPlainDim(def.getMatchingIndexingMap(input), *loop, ranges);
        d && !isModelInput(input->get()))
      splitBackwardInput(input->get(), *d);
}

bool SplitTracker::readsSplitEverywhere(Value value, int64_t dim) {
  Operation *def = value.getDefiningOp();
  if (!def || !def->hasAttr(TPDialect::kBackwardAttrName) ||
      !isa<linalg::LinalgOp>(def))
    return false;
  for (OpOperand &use : value.getUses()) {
    auto op = dyn_cast<linalg::LinalgOp>(use.getOwner());
    if (!op || op.isDpsInit(&use))
      return false;
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    std::optional<unsigned> loop =
        getPlainLoop(op.getMatchingIndexingMap(&use).getResult(dim), ranges);
    if (!loop)
      return false;
    if (op.getIteratorTypesArray()[*loop] == utils::IteratorType::reduction) {
      if (!isSmallReduction(op, use, *loop))
        return false;
      continue;
    }
    if (!op.getMatchingIndexingMap(&use).isProjectedPermutation() ||
        !getPlainDim(
            op.getIndexingMapMatchingResult(cast<OpResult>(op->getResult(0))),
            *loop, ranges))
      return false;
  }
  return true;
}

/// The weight dim and result dim of a contraction's output (column) dim:
/// a weight dim on a parallel loop that the result keeps.
std::optional<std::pair<int64_t, int64_t>> getOutputDim(linalg::LinalgOp op,
                                                        unsigned weightIdx) {
  AffineMap weightMap = op.getMatchingIndexingMap(&op->getOpOperand(weightIdx));
  AffineMap resultMap =
      op.getIndexingMapMatchingResult(cast<OpResult>(op->getResult(0)));
  auto iterators = op.getIteratorTypesArray();
  std::optional<std::pair<int64_t, int64_t>> found;
  for (auto [weightDim, expr] : llvm::enumerate(weightMap.getResults())) {
    auto d = dyn_cast<AffineDimExpr>(expr);
    if (!d || iterators[d.getPosition()] != utils::IteratorType::parallel)
      continue;
    if (std::optional<unsigned> r = resultMap.getResultPosition(d))
      found = {static_cast<int64_t>(weightDim), *r};
  }
  return found;
}

/// True if `value` is computed from `root`'s results: an op between them
/// in the block reads one of them, directly or through others.
bool isComputedFrom(Value value, Operation *root) {
  Operation *def = value.getDefiningOp();
  if (!def || def->getBlock() != root->getBlock() ||
      !root->isBeforeInBlock(def))
    return false;
  DenseSet<Operation *> from = {root};
  for (Operation *op = root->getNextNode(); op != def->getNextNode();
       op = op->getNextNode()) {
    bool reads = false;
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (Operation *d = operand.getDefiningOp(); d && from.contains(d))
          reads = true;
    });
    if (reads)
      from.insert(op);
  }
  return from.contains(def);
}

/// True if the result of `op` is added to another activation of its shape
/// that it does not compute (a residual, or a parallel block's other
/// half), directly or through elementwise ops: a bias add, or a norm
/// (Gemma 2's and sandwich norms after a block's output projection),
/// whose statistics it reads and whose centred, scaled values continue.
/// Where a transformer block ends; a sum of two values both computed from
/// `op` (a tanh GELU's `x + 0.044715 x^3`, rotary's two halves) is not.
bool endsAtSum(Operation *op, Operation *root, unsigned depth) {
  for (Operation *user : op->getResult(0).getUsers()) {
    auto generic = dyn_cast<linalg::GenericOp>(user);
    if (!generic || generic.getNumReductionLoops() != 0 ||
        generic->getNumResults() != 1)
      continue;
    Type type = generic->getResult(0).getType();
    auto isActivation = [&](Value v) {
      return v.getType() == type && !getWeightArg(v);
    };
    if (generic.getNumDpsInputs() == 2 &&
        llvm::all_of(generic.getDpsInputs(), isActivation) &&
        isa_and_nonnull<arith::AddFOp>(generic.getBlock()
                                           ->getTerminator()
                                           ->getOperand(0)
                                           .getDefiningOp()) &&
        llvm::any_of(generic.getDpsInputs(), [&](Value v) {
          return !isComputedFrom(v, root) && v.getDefiningOp() != root;
        }))
      return true;
    if (depth > 0 && endsAtSum(generic, root, depth - 1))
      return true;
  }
  return false;
}

/// A layer norm written out op by op (bias, centring, scaling, its
/// weight and bias) lies within 6 elementwise ops of the sum.
bool endsAtSum(Operation *op) { return endsAtSum(op, op, /*depth=*/7); }

/// The row-parallel partners of `op` as a column-parallel contraction, if
/// its output split can reach them (and no result or reduction).
std::optional<SmallVector<Operation *>> getRowPartners(linalg::LinalgOp op,
                                                       int64_t devices) {
  std::optional<unsigned> weightIdx = getWeightOperand(op);
  auto out = weightIdx ? getOutputDim(op, *weightIdx) : std::nullopt;
  if (!out)
    return std::nullopt;
  Value weight = getWeightArg(op->getOperand(*weightIdx));
  if (cast<ShapedType>(weight.getType()).getDimSize(out->first) % devices)
    return std::nullopt;
  SplitTracker tracker(devices);
  if (!tracker.follow(op->getResult(0), out->second) || tracker.reachesResult)
    return std::nullopt;
  SmallVector<Operation *> rows;
  for (auto &entry : tracker.rows)
    rows.push_back(entry.first);
  // A reduction over the split (a norm's statistics) only beside partners
  // that end the block, as planTensorParallel allows it.
  if (tracker.reachesReduction &&
      (rows.empty() ||
       !llvm::all_of(rows, [](Operation *row) { return endsAtSum(row); })))
    return std::nullopt;
  return rows;
}

/// True if `op`, split as a column, pairs with row-parallel contractions
/// that each end a block at a sum, or (within `depth`) start such blocks
/// of their own.
bool startsBlocks(linalg::LinalgOp op, int64_t devices, unsigned depth) {
  std::optional<SmallVector<Operation *>> partners =
      getRowPartners(op, devices);
  return partners && !partners->empty() &&
         llvm::all_of(*partners, [&](Operation *row) {
           return endsAtSum(row) ||
                  (depth > 0 && startsBlocks(cast<linalg::LinalgOp>(row),
                                             devices, depth - 1));
         });
}

/// True if `op` is a weight contraction whose output dim cannot stay split
/// on `devices` (the one K/V head that all query heads of multi-query
/// attention read; K/V heads that the devices do not divide, which the
/// passes before the plan could neither pad nor repeat): it runs whole
/// whatever its input.
bool cannotSplitAsColumn(linalg::LinalgOp op, int64_t devices) {
  std::optional<unsigned> weightIdx = getWeightOperand(op);
  auto out = weightIdx ? getOutputDim(op, *weightIdx) : std::nullopt;
  if (!out)
    return true;
  SplitTracker tracker(devices);
  return !tracker.follow(op->getResult(0), out->second);
}

/// True if some of the row-parallel partners `rows` of a column-parallel
/// contraction do not end a block, and each of those would start blocks of
/// its own that do, or runs whole anyway (at least one starting blocks):
/// MobileBERT's bottleneck projections, read (through an elementwise
/// NoNorm) by Q and K, or by the first projections of its feed-forward
/// stacks. Paired with them, each such partner would all-reduce and what
/// follows it (attention, the MLP) would run whole; left whole, the
/// contraction lets them split as columns, each block ending in one
/// all-reduce at its sum.
bool rowsStartBlocks(const llvm::MapVector<Operation *, int64_t> &rows,
                     int64_t devices) {
  bool starts = false;
  for (auto &entry : rows) {
    if (endsAtSum(entry.first))
      continue;
    auto row = cast<linalg::LinalgOp>(entry.first);
    if (startsBlocks(row, devices, /*depth=*/2))
      starts = true;
    else if (!cannotSplitAsColumn(row, devices))
      return false;
  }
  return starts;
}

} // namespace

/// The forward's ops that read `arg` as an operand, through reshapes (the
/// backward reads a bias as its forward does: it does not decide the plan).
static void collectReaders(Value arg, llvm::SmallPtrSetImpl<Operation *> &out) {
  for (Operation *user : arg.getUsers()) {
    if (user->hasAttr(TPDialect::kBackwardAttrName))
      continue;
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(user))
      collectReaders(user->getResult(0), out);
    else
      out.insert(user);
  }
}

TensorParallelPlan mlir::tp::planTensorParallel(func::FuncOp func,
                                                int64_t devices) {
  TensorParallelPlan plan;
  DenseSet<Operation *> rowOps, columnOps;
  // Where each split bias is read along a block's split, with the dim.
  llvm::MapVector<Value, llvm::MapVector<OpOperand *, int64_t>> biasReads;
  int64_t nextBlock = 0;
  auto replicate = [&](Operation *op, const Twine &why, bool uneven = false,
                       bool intended = false) {
    plan.replicated.push_back({op, why.str(), uneven, intended});
  };
  // Vocabulary-parallel embeddings, as Megatron-LM splits them.
  func.walk([&](linalg::GenericOp op) {
    auto vocab = op->getAttrOfType<IntegerAttr>(TPDialect::kEmbeddingAttrName);
    Value table = vocab ? getWeightArg(op.getDpsInputs()[1]) : Value();
    if (!table || plan.splits.count(table))
      return;
    if (!isModelInput(op.getDpsInputs()[0]))
      return replicate(op,
                       "its ids are computed, not a model input (a position "
                       "table): kept whole, with no all-reduce",
                       /*uneven=*/false, /*intended=*/true);
    if (vocab.getInt() % devices != 0)
      return replicate(op,
                       "vocabulary of " + Twine(vocab.getInt()) +
                           " does not divide by " + Twine(devices) +
                           " devices; device counts that do: " +
                           formatDivisors(vocab.getInt()),
                       /*uneven=*/true);
    if (!isReadAsOperandOnly(table))
      return replicate(op, "its table is also read inside an op body");
    plan.splits[table] = {0, SplitRole::Vocab, nextBlock++};
  });
  func.walk([&](linalg::LinalgOp op) {
    std::optional<unsigned> weightIdx = getWeightOperand(op);
    if (!weightIdx || rowOps.contains(op) ||
        op->hasAttr(TPDialect::kBackwardAttrName))
      return;
    Value weight = getWeightArg(op->getOperand(*weightIdx));
    auto out = getOutputDim(op, *weightIdx);
    if (!out)
      return replicate(op, "its weight has no output dim");
    auto [weightDim, resultDim] = *out;
    int64_t size = cast<ShapedType>(weight.getType()).getDimSize(weightDim);
    if (size % devices != 0)
      return replicate(
          op,
          "output dim " + Twine(weightDim) + " of size " + Twine(size) +
              " does not divide by " + Twine(devices) +
              " devices; device counts that do: " + formatDivisors(size),
          /*uneven=*/true);
    SplitTracker tracker(devices);
    if (!tracker.follow(op->getResult(0), resultDim))
      return replicate(op,
                       "its output dim cannot stay split: " + tracker.failure,
                       tracker.uneven);
    // A split that is reduced and also gathered at a result pays for both
    // (a norm's statistics all-reduced, then the normed value gathered):
    // the contraction runs whole instead.
    if (tracker.reachesResult && tracker.reachesReduction)
      return replicate(op, "its output is both reduced over its output dim "
                           "and gathered at a function result");
    bool gathered = tracker.reachesResult || tracker.reachesReduction;
    if (tracker.rows.empty() && !gathered)
      return replicate(op, "its output reaches no row-parallel contraction");
    // A small reduction beside the row partners (the statistics of a norm
    // over the heads' features, OLMo 2's Q and K norms) costs one
    // all-reduce of its partial result, a value per row, when the partners
    // end the block at its sum. Partners that do not (the next layer's
    // projections, read through the norm of a residual stream that this
    // contraction would split) would not end it; a result would gather the
    // split as well.
    if (!tracker.rows.empty() && tracker.reachesResult)
      return replicate(op, "its output reaches both a row-parallel "
                           "contraction and a function result");
    if (tracker.reachesReduction && llvm::any_of(tracker.rows, [](auto &entry) {
          return !endsAtSum(entry.first);
        }))
      return replicate(op, "its output reaches both a reduction over its "
                           "output dim and row-parallel contractions that "
                           "do not end a block at a sum");
    if (rowsStartBlocks(tracker.rows, devices))
      return replicate(op,
                       "row-parallel partners of it that do not end a "
                       "block start blocks of their own: they split as "
                       "columns instead",
                       /*uneven=*/false, /*intended=*/true);
    for (auto &entry : tracker.rows) {
      if (columnOps.contains(entry.first))
        return replicate(op, "its row-parallel partner is already column-"
                             "parallel");
      Value rowWeight =
          getWeightArg(entry.first->getOperand(*getWeightOperand(entry.first)));
      auto it = plan.splits.find(rowWeight);
      if (it != plan.splits.end() &&
          (it->second.role != SplitRole::Row || it->second.dim != entry.second))
        return replicate(op, "its row-parallel partner's weight is already "
                             "split differently");
    }
    // Only weights read as plain operands can be annotated; one that an
    // op reads inside its body (an embedding table) stays whole.
    SmallVector<Value> touched = {weight};
    for (auto &entry : tracker.rows)
      touched.push_back(getWeightArg(
          entry.first->getOperand(*getWeightOperand(entry.first))));
    for (Value arg : touched)
      if (!isReadAsOperandOnly(arg))
        return replicate(op, "weight '" + getWeightName(arg) +
                                 "' is also read inside an op body");
    // A weight shared by several contractions (ALBERT's one layer applied
    // N times, a tied projection) splits once: each use must split it the
    // same way, and joins the block of the first.
    SplitRole role =
        tracker.rows.empty() ? SplitRole::ColumnGathered : SplitRole::Column;
    auto existing = plan.splits.find(weight);
    if (existing != plan.splits.end() &&
        (existing->second.role != role || existing->second.dim != weightDim))
      return replicate(op, "its weight is already split differently for "
                           "another use");
    // A transposed weight splits its source on the matching dim; a source
    // split otherwise for another use would be resharded.
    if (Value source = getTransposeSource(weight)) {
      auto sourceSplit = plan.splits.find(source);
      AffineMap map = cast<linalg::LinalgOp>(weight.getDefiningOp())
                          .getIndexingMapsArray()[0];
      std::optional<unsigned> sourceDim =
          map.getResultPosition(getAffineDimExpr(weightDim, op->getContext()));
      if (sourceSplit != plan.splits.end() &&
          (!sourceDim || sourceSplit->second.dim != *sourceDim))
        return replicate(op, "its weight is read transposed, and its source '" +
                                 getWeightName(source) +
                                 "' is split on another dim for another use");
    }
    // Commit. Columns that share a row partner (Q, K, V) share its block.
    int64_t block =
        existing != plan.splits.end() ? existing->second.block : nextBlock;
    for (auto &entry : tracker.rows) {
      auto it = plan.splits.find(getWeightArg(
          entry.first->getOperand(*getWeightOperand(entry.first))));
      if (it != plan.splits.end())
        block = it->second.block;
    }
    if (block == nextBlock)
      ++nextBlock;
    columnOps.insert(op);
    plan.splits[weight] = {weightDim, role, block};
    for (auto &[rowOp, dim] : tracker.rows) {
      rowOps.insert(rowOp);
      plan.splits[getWeightArg(rowOp->getOperand(*getWeightOperand(rowOp)))] = {
          dim, SplitRole::Row, block};
    }
    for (auto &[arg, dim] : tracker.biases) {
      if (!plan.splits.count(arg) && isReadAsOperandOnly(arg))
        plan.splits[arg] = {dim, SplitRole::Bias, block};
      for (auto &[read, readDim] : tracker.biasReads[arg])
        biasReads[arg][read] = readDim;
    }
    for (auto &[cache, dim] : tracker.caches)
      plan.caches[cache] = dim;
    for (auto &[splitOp, loop] : tracker.splitLoops)
      plan.splitLoops[splitOp] = loop;
    for (auto &[operand, dim] : tracker.splitOperands)
      plan.splitOperands[operand] = dim;
    for (auto &[value, dim] : tracker.backwardSplits)
      if (dim >= 0)
        plan.backwardSplits[value] = dim;
    for (auto &[value, dim] : tracker.resultSplits)
      plan.resultSplits[value] = dim;
  });
  // A bias that an op outside every split also reads (one initializer that
  // the export shares between a projection's bias and a norm's, as
  // torch.onnx deduplicates equal ones) stays whole: the split reads slice
  // it locally, where splitting it would gather it back for the others.
  for (auto &[arg, reads] : biasReads) {
    auto it = plan.splits.find(arg);
    if (it == plan.splits.end() || it->second.role != SplitRole::Bias)
      continue;
    llvm::SmallPtrSet<Operation *, 8> all;
    collectReaders(arg, all);
    if (llvm::all_of(all, [&](Operation *op) {
          return llvm::any_of(
              reads, [&](auto &read) { return read.first->getOwner() == op; });
        }))
      continue;
    plan.splits.erase(it);
    for (auto &[read, readDim] : reads)
      plan.splitOperands.insert({read, readDim});
  }
  return plan;
}

/// True if `v` comes from a contraction with a weight (the end of an
/// attention or MLP block), through a few elementwise ops that read no
/// other activation of its shape (a bias add, not another residual add).
/// With `throughViews`, also through reshapes of the product (a
/// [batch·seq, hidden] product that tp-unflatten-batch-dims did not
/// unflatten: one rank plans nothing).
static bool comesFromWeightContraction(Value v, bool throughViews,
                                       unsigned depth = 4) {
  // Through the collective that completes a row-parallel block.
  if (auto reduce = v.getDefiningOp<shard::AllReduceOp>())
    v = reduce.getInput();
  else if (auto scatter = v.getDefiningOp<shard::ReduceScatterOp>())
    v = scatter.getInput();
  if (throughViews &&
      isa_and_nonnull<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
          v.getDefiningOp()))
    return depth > 0 &&
           comesFromWeightContraction(v.getDefiningOp()->getOperand(0),
                                      throughViews, depth - 1);
  auto op = v.getDefiningOp<linalg::LinalgOp>();
  if (!op)
    return false;
  if (getWeightOperand(op))
    return true;
  if (depth == 0 || op.getNumReductionLoops() != 0)
    return false;
  SmallVector<Value> activations;
  for (Value input : op.getDpsInputs())
    if (input.getType() == v.getType())
      activations.push_back(input);
  // Two partial results summed before one all-reduce (tp-merge-all-reduces
  // on a parallel-residual block).
  auto isContraction = [](Value input) {
    auto producer = input.getDefiningOp<linalg::LinalgOp>();
    return producer && getWeightOperand(producer);
  };
  if (activations.size() == 2 && llvm::all_of(activations, isContraction))
    return true;
  return activations.size() == 1 &&
         comesFromWeightContraction(activations.front(), throughViews,
                                    depth - 1);
}

/// An elementwise add of two same-shape activations, one the output of a
/// block, the other the stream it is added to.
bool mlir::tp::isResidualAdd(Operation *op, bool throughViews) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || linalgOp.getNumReductionLoops() != 0 ||
      linalgOp.getNumDpsInputs() != 2 || op->getNumResults() != 1)
    return false;
  Block *body = linalgOp.getBlock();
  if (!isa_and_nonnull<arith::AddFOp>(
          body->getTerminator()->getOperand(0).getDefiningOp()))
    return false;
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Type type = op->getResult(0).getType();
  if (lhs.getType() != type || rhs.getType() != type)
    return false;
  // The block output may still be in flight through its collective.
  return comesFromWeightContraction(lhs, throughViews) !=
         comesFromWeightContraction(rhs, throughViews);
}

Value mlir::tp::getResidualStream(Operation *op, bool throughViews) {
  if (!isResidualAdd(op, throughViews))
    return {};
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  return comesFromWeightContraction(lhs, throughViews) ? rhs : lhs;
}
