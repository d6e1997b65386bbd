//===- SplitConvolutions.cpp - tp-split-convolutions ----------------------===//
//
// After partition a convolution is still whole on every rank (upstream
// cannot partition its window maps). Its output channels are independent,
// so each rank can compute a contiguous 1/t of them from its 1/t of the
// filters; an all-gather on the channel dim gives every rank the full
// output again. This is the convolution analogue of a column-parallel
// linear layer with a gathered output.
//
// The gather moves down through the per-channel ops after the convolution
// (bias, norm, activation, pooling, padding of other dims). Where it then
// meets a contraction that sums over those channels with a whole weight (a
// second convolution, or a linear classifier) whose result is at most half
// of what is gathered, that one takes its weight split on the channels
// instead, reads its rank's channels as they are, and ends in one
// all-reduce of its partial sums: a column/row pair, as Megatron pairs
// linear layers (Whisper's two-convolution stem, a strided convolution, a
// classifier). A larger result keeps the gather: its all-reduce, which
// sends about twice its size, could move more bytes.
//
// Moving a gather down can also cost collectives: a value that a reduction
// over the channels reads too (a layer norm's mean, after a vision
// transformer's patch embedding) stays gathered for it, and each
// per-channel op that moved gathers again. The pass splits copies of the
// function both ways (every gather moved; or each moved only where that
// adds no collective there) and keeps the one with fewer collectives.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tp {
#define GEN_PASS_DEF_SPLITCONVOLUTIONS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// A convolution this pass can split, and where its filter dim lives.
struct ConvSplit {
  linalg::GenericOp conv;
  /// The loop over output channels.
  unsigned channelLoop = 0;
  /// The filter weight argument, and the expand_shape between it and the
  /// convolution (may be null).
  BlockArgument weight;
  tensor::ExpandShapeOp expand;
  /// Dim of the weight argument, of the convolution's filter operand and of
  /// its result that the channel loop indexes.
  int64_t weightDim = 0, filterDim = 0, resultDim = 0;
};

/// A `tp.weight` argument that every rank holds whole (not split, not a
/// piece of a fused weight): this pass may give each rank its channels.
bool isWholeWeight(func::FuncOp func, unsigned index) {
  LayoutAttr layout = getLayout(func, index);
  return func.getArgAttr(index, TPDialect::kWeightAttrName) &&
         (!layout || (!layout.isSplit() && !layout.isPiece()));
}

/// The loop that `expr` reads: a loop, or a loop plus terms of loops of
/// one iteration (a convolution in grouped form reads its input channel as
/// d1 * C + d5, d1 over its one group).
std::optional<unsigned> plainLoop(AffineExpr expr, ArrayRef<int64_t> ranges) {
  if (auto d = dyn_cast<AffineDimExpr>(expr))
    return d.getPosition();
  auto add = dyn_cast<AffineBinaryOpExpr>(expr);
  if (!add || add.getKind() != AffineExprKind::Add)
    return std::nullopt;
  auto isUnit = [&](AffineExpr term) {
    bool unit = true;
    term.walk([&](AffineExpr e) {
      if (auto d = dyn_cast<AffineDimExpr>(e))
        unit &= ranges[d.getPosition()] == 1;
    });
    return unit;
  };
  if (isUnit(add.getLHS()))
    return plainLoop(add.getRHS(), ranges);
  if (isUnit(add.getRHS()))
    return plainLoop(add.getLHS(), ranges);
  return std::nullopt;
}

/// Position of loop `loop` among `map`'s results as a bare dim, or -1.
int64_t positionOf(AffineMap map, unsigned loop) {
  for (auto [i, expr] : llvm::enumerate(map.getResults()))
    if (auto dim = dyn_cast<AffineDimExpr>(expr);
        dim && dim.getPosition() == loop)
      return static_cast<int64_t>(i);
  return -1;
}

/// Recognises a convolution: a two-input, one-output reduction whose first
/// input map is not a projected permutation (the sliding window), whose
/// second input (the filters) comes from a weight argument, and which has a
/// parallel loop indexing only the filters and the result.
std::optional<ConvSplit> matchConvolution(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() == 0)
    return std::nullopt;
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (maps[0].isProjectedPermutation() || !maps[1].isProjectedPermutation() ||
      !maps[2].isProjectedPermutation())
    return std::nullopt;
  ConvSplit split;
  split.conv = op;
  Value filter = op.getDpsInputs()[1];
  if (auto expand = filter.getDefiningOp<tensor::ExpandShapeOp>()) {
    split.expand = expand;
    filter = expand.getSrc();
  }
  split.weight = dyn_cast<BlockArgument>(filter);
  if (!split.weight ||
      !isa<func::FuncOp>(split.weight.getOwner()->getParentOp()))
    return std::nullopt;
  auto func = cast<func::FuncOp>(split.weight.getOwner()->getParentOp());
  if (!isWholeWeight(func, split.weight.getArgNumber()))
    return std::nullopt;
  // The filter must feed this convolution alone, or a split would change
  // what other users see.
  if (!split.weight.hasOneUse() || (split.expand && !split.expand->hasOneUse()))
    return std::nullopt;
  auto iterators = op.getIteratorTypesArray();
  for (unsigned loop = 0; loop < iterators.size(); ++loop) {
    if (iterators[loop] != utils::IteratorType::parallel ||
        maps[0].isFunctionOfDim(loop))
      continue;
    int64_t filterDim = positionOf(maps[1], loop);
    int64_t resultDim = positionOf(maps[2], loop);
    if (filterDim < 0 || resultDim < 0)
      continue;
    auto filterType = cast<RankedTensorType>(op.getDpsInputs()[1].getType());
    if (filterType.getDimSize(filterDim) == 1)
      continue; // a group dim of size 1
    split.channelLoop = loop;
    split.filterDim = filterDim;
    split.resultDim = resultDim;
    split.weightDim = filterDim;
    if (split.expand) {
      // The argument dim whose group holds the filter dim; the split must
      // land on the group's one non-unit dim.
      split.weightDim = -1;
      for (auto [argDim, group] :
           llvm::enumerate(split.expand.getReassociationIndices())) {
        if (!llvm::is_contained(group, filterDim))
          continue;
        for (int64_t d : group)
          if (d != filterDim && filterType.getDimSize(d) != 1)
            return std::nullopt;
        split.weightDim = static_cast<int64_t>(argDim);
      }
    }
    return split;
  }
  return std::nullopt;
}

RankedTensorType withDim(RankedTensorType type, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return type.clone(shape);
}

struct SplitConvolutions : tp::impl::SplitConvolutionsBase<SplitConvolutions> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto module = func->getParentOfType<ModuleOp>();
    shard::GridOp grid =
        module ? lookupGrid(module, GridRole::Tensor) : nullptr;
    if (!grid || grid.getShape().size() != 1 || grid.getShape()[0] < 2)
      return;
    int64_t ranks = grid.getShape()[0];
    // Each gather moves below the per-channel ops after its convolution
    // (fewer bytes after pooling; a residual add of two gathered values
    // needs one gather; a sum over the channels pairs as a row) or, where
    // that would gather the same channels again, stays: whichever of the
    // two ways ends with fewer collectives in the function, tried on
    // copies (moving every gather where they tie).
    bool everywhere = countAfterSplitting(func, ranks, grid, Sinking::Always) <=
                      countAfterSplitting(func, ranks, grid, Sinking::Local);
    if (failed(splitAll(func, ranks, grid,
                        everywhere ? Sinking::Always : Sinking::Local,
                        /*warn=*/true)))
      return signalPassFailure();
  }

  enum class Sinking {
    /// Every gather moves below the per-channel ops after it.
    Always,
    /// Only where that adds no collective there (sinkingAddsNoCollective).
    Local,
  };

  /// Splits every convolution of `func` whose weight is still whole.
  LogicalResult splitAll(func::FuncOp func, int64_t ranks, shard::GridOp grid,
                         Sinking sinking, bool warn) {
    SmallVector<ConvSplit> splits;
    func.walk([&](linalg::GenericOp op) {
      if (std::optional<ConvSplit> split = matchConvolution(op))
        splits.push_back(*split);
    });
    SmallVector<unsigned> convWeights;
    for (ConvSplit &split : splits)
      convWeights.push_back(split.weight.getArgNumber());
    for (ConvSplit &split : splits) {
      // A convolution that an earlier one's split made row-parallel (it
      // sums over the channels that one split) stays so.
      if (!isWholeWeight(func, split.weight.getArgNumber()))
        continue;
      auto filterType =
          cast<RankedTensorType>(split.conv.getDpsInputs()[1].getType());
      int64_t channels = filterType.getDimSize(split.filterDim);
      if (channels % ranks != 0) {
        if (!warn)
          continue;
        std::string counts;
        for (int64_t d = 1; d <= 64 && d <= channels; ++d)
          if (channels % d == 0)
            counts += (counts.empty() ? "" : ", ") + std::to_string(d);
        split.conv.emitWarning()
            << "tp-split-convolutions: " << channels
            << " output channels do not divide by " << ranks
            << " devices; the convolution stays replicated (device counts "
               "that divide: "
            << counts << ")";
        continue;
      }
      bool sink =
          sinking == Sinking::Always ||
          sinkingAddsNoCollective(func, split, ranks, grid, convWeights);
      if (failed(rewrite(split, ranks, grid, sink)))
        return failure();
    }
    // Gathers whose every reader moved below them.
    SmallVector<shard::AllGatherOp> dead;
    func.walk([&](shard::AllGatherOp gather) {
      if (gather->use_empty())
        dead.push_back(gather);
    });
    for (shard::AllGatherOp gather : dead)
      gather.erase();
    return success();
  }

  static int64_t countCollectives(func::FuncOp func) {
    int64_t count = 0;
    func.walk([&](Operation *op) {
      if (isa<shard::AllGatherOp, shard::AllReduceOp>(op) && !op->use_empty())
        ++count;
    });
    return count;
  }

  /// The collectives of a copy of `func` with its convolutions split so.
  int64_t countAfterSplitting(func::FuncOp func, int64_t ranks,
                              shard::GridOp grid, Sinking sinking) {
    auto copy = cast<func::FuncOp>(func->clone());
    int64_t count = succeeded(splitAll(copy, ranks, grid, sinking, false))
                        ? countCollectives(copy)
                        : std::numeric_limits<int64_t>::max();
    copy.erase();
    return count;
  }

  /// Whether moving the gather of `split` below the per-channel ops after
  /// it costs no more collectives than leaving it where the convolution
  /// is, tried on a copy of `func`: one, and one more for each later
  /// convolution it makes row-parallel (split on its own, that one would
  /// gather too). A value read both by per-channel ops and by a reduction
  /// over the channels (a layer norm after a vision transformer's patch
  /// embedding: its mean reads the gathered channels, its centring and
  /// scaling are per channel) would be gathered once for the reduction and
  /// again below each op that moved: there the gather stays.
  bool sinkingAddsNoCollective(func::FuncOp func, const ConvSplit &split,
                               int64_t ranks, shard::GridOp grid,
                               ArrayRef<unsigned> convWeights) {
    int64_t position = 0, index = 0;
    func.walk([&](linalg::GenericOp op) {
      if (op == split.conv)
        position = index;
      ++index;
    });
    auto copy = cast<func::FuncOp>(func->clone());
    linalg::GenericOp conv;
    index = 0;
    copy.walk([&](linalg::GenericOp op) {
      if (index++ == position)
        conv = op;
    });
    auto rowConvolutions = [&] {
      return static_cast<int64_t>(
          llvm::count_if(convWeights, [&](unsigned index) {
            LayoutAttr layout = getLayout(copy, index);
            return layout && layout.getRole() == SplitRole::Row;
          }));
    };
    int64_t before = countCollectives(copy), rowsBefore = rowConvolutions();
    std::optional<ConvSplit> trial =
        conv ? matchConvolution(conv) : std::nullopt;
    bool fewest =
        trial && succeeded(rewrite(*trial, ranks, grid, /*sink=*/true)) &&
        countCollectives(copy) <= before + 1 + (rowConvolutions() - rowsBefore);
    copy.erase();
    return fewest;
  }

  LogicalResult rewrite(ConvSplit &split, int64_t ranks, shard::GridOp grid,
                        bool sink) {
    linalg::GenericOp conv = split.conv;
    auto func = cast<func::FuncOp>(split.weight.getOwner()->getParentOp());
    Value init = conv.getDpsInits()[0];
    auto fill = init.getDefiningOp<linalg::FillOp>();
    if (!fill && !init.getDefiningOp<tensor::EmptyOp>())
      return success(); // An init we cannot rebuild locally: leave it.

    // The weight argument becomes this rank's slice of the filters.
    auto argType = cast<RankedTensorType>(split.weight.getType());
    int64_t local = argType.getDimSize(split.weightDim) / ranks;
    auto localArgType = withDim(argType, split.weightDim, local);
    unsigned argIndex = split.weight.getArgNumber();
    split.weight.setType(localArgType);
    SmallVector<Type> inputs(func.getArgumentTypes());
    inputs[argIndex] = localArgType;
    func.setType(
        FunctionType::get(func.getContext(), inputs, func.getResultTypes()));
    setLayout(func, argIndex,
              LayoutAttr::get(func.getContext(), SplitRole::ConvOutput,
                              split.weightDim));

    OpBuilder b(conv);
    // Inlined from tp-outline-unpartitionable's call: name the node itself.
    Location loc = conv.getLoc();
    if (auto callSite = dyn_cast<CallSiteLoc>(loc))
      loc = callSite.getCallee();
    auto filterType = cast<RankedTensorType>(conv.getDpsInputs()[1].getType());
    Value filter = split.weight;
    if (split.expand) {
      auto localFilterType =
          withDim(filterType, split.filterDim,
                  filterType.getDimSize(split.filterDim) / ranks);
      b.setInsertionPoint(split.expand);
      auto expand = tensor::ExpandShapeOp::create(
          b, split.expand.getLoc(), localFilterType, split.weight,
          split.expand.getReassociationIndices());
      split.expand->replaceAllUsesWith(expand);
      split.expand.erase();
      filter = expand;
      b.setInsertionPoint(conv);
    }

    // The convolution on this rank's channels, then the gather.
    auto resultType = cast<RankedTensorType>(conv.getResult(0).getType());
    auto localResultType =
        withDim(resultType, split.resultDim,
                resultType.getDimSize(split.resultDim) / ranks);
    Value localInit = tensor::EmptyOp::create(
        b, loc, localResultType.getShape(), localResultType.getElementType());
    if (fill)
      localInit = linalg::FillOp::create(b, fill.getLoc(), fill.getInputs()[0],
                                         localInit)
                      .getResult(0);
    IRMapping mapping;
    mapping.map(conv.getDpsInputs()[1], filter);
    mapping.map(init, localInit);
    Operation *localConv = b.clone(*conv, mapping);
    localConv->getResult(0).setType(localResultType);
    auto gather = shard::AllGatherOp::create(
        b, loc, resultType, grid.getSymName(), ArrayRef<int16_t>{0},
        localConv->getResult(0), APInt(64, split.resultDim));
    conv.getResult(0).replaceAllUsesWith(gather.getResult());
    conv.erase();
    if (fill && fill->use_empty())
      fill.erase();
    // Per-channel ops after the convolution (reshape, bias, activation,
    // pooling, padding) can run on this rank's channels too; the gather
    // then moves less data, after pooling. A gathered value may have
    // several such users (GELU and SiLU read theirs twice): each moves
    // below every one whose channel operands are all gathered.
    SmallVector<shard::AllGatherOp> work;
    if (sink)
      work.push_back(gather);
    llvm::SetVector<Operation *> made;
    made.insert(gather);
    while (!work.empty()) {
      shard::AllGatherOp next = work.pop_back_val();
      for (bool moved = true; moved && !next->use_empty();) {
        moved = false;
        llvm::SetVector<Operation *> users(next->user_begin(),
                                           next->user_end());
        for (Operation *user : users) {
          if (shard::AllGatherOp below = sinkGather(next, user, ranks)) {
            work.push_back(below);
            made.insert(below);
            moved = true;
            break;
          }
        }
      }
    }
    for (Operation *op : made) {
      auto left = cast<shard::AllGatherOp>(op);
      if (left->use_empty())
        left.erase();
      else if (left->hasOneUse())
        splitContractedChannels(left, ranks);
    }
    return success();
  }

  /// Where the one user of `gather` sums over the gathered dim with a whole
  /// weight (a convolution over its input channels, a linear layer over its
  /// features) and starts from zeros, it reads this rank's channels and its
  /// weight's rows for them, and an all-reduce sums the ranks' partial
  /// results: the gather is gone.
  void splitContractedChannels(shard::AllGatherOp gather, int64_t ranks) {
    auto op = dyn_cast<linalg::LinalgOp>(*gather->getUsers().begin());
    if (!op || op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1)
      return;
    OpOperand *use = &*gather->getUses().begin();
    if (op.isDpsInit(use))
      return;
    // Bytes: the all-reduce sends about twice its result, the gather its
    // operand once (and the contraction's own split would gather some of
    // its result again, maybe after a pooling): pairing never sends more
    // when the result is at most half of what is gathered (a strided
    // convolution, Whisper's second one, a classifier), and it saves a
    // collective.
    if (2 * cast<RankedTensorType>(op->getResult(0).getType())
                .getNumElements() >
        gather.getResult().getType().getNumElements())
      return;
    int64_t axis = gather.getGatherAxis().getSExtValue();
    std::optional<unsigned> channelLoop =
        plainLoop(op.getMatchingIndexingMap(use).getResult(axis),
                  op.getStaticLoopRanges());
    if (!channelLoop || op.getIteratorTypesArray()[*channelLoop] !=
                            utils::IteratorType::reduction)
      return;
    unsigned loop = *channelLoop;
    OpOperand &other = op->getOpOperand(use->getOperandNumber() == 0 ? 1 : 0);
    AffineMap otherMap = op.getMatchingIndexingMap(&other);
    int64_t filterDim = positionOf(otherMap, loop);
    if (filterDim < 0 || op.getMatchingIndexingMap(op.getDpsInitOperand(0))
                             .isFunctionOfDim(loop))
      return;
    // The sum over the channels must be all that reads them: no other
    // result of `otherMap` and no init may involve the loop.
    for (auto [i, expr] : llvm::enumerate(otherMap.getResults()))
      if (static_cast<int64_t>(i) != filterDim && expr.isFunctionOfDim(loop))
        return;
    // Partial sums add up to the whole only from a zero start.
    auto fill = op.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
    auto zero =
        fill ? fill.getInputs()[0].getDefiningOp<arith::ConstantOp>() : nullptr;
    auto zeroAttr = zero ? dyn_cast<FloatAttr>(zero.getValue()) : nullptr;
    if (!zeroAttr || !zeroAttr.getValue().isZero())
      return;
    // The weight, possibly through the expand_shape that views it with
    // unit (group) dims.
    Value weight = other.get();
    auto expand = weight.getDefiningOp<tensor::ExpandShapeOp>();
    if (expand)
      weight = expand.getSrc();
    auto arg = dyn_cast<BlockArgument>(weight);
    auto func =
        arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()) : nullptr;
    if (!func || !arg.hasOneUse() || (expand && !expand->hasOneUse()) ||
        !isWholeWeight(func, arg.getArgNumber()))
      return;
    auto filterType = cast<RankedTensorType>(other.get().getType());
    int64_t weightDim = filterDim;
    if (expand) {
      weightDim = -1;
      for (auto [argDim, group] :
           llvm::enumerate(expand.getReassociationIndices())) {
        if (!llvm::is_contained(group, filterDim))
          continue;
        for (int64_t d : group)
          if (d != filterDim && filterType.getDimSize(d) != 1)
            return;
        weightDim = static_cast<int64_t>(argDim);
      }
    }
    auto argType = cast<RankedTensorType>(arg.getType());
    if (weightDim < 0 || argType.getDimSize(weightDim) % ranks != 0)
      return;

    // This rank's rows of the weight: the contracted dim, as a row-parallel
    // linear layer's.
    auto localArgType =
        withDim(argType, weightDim, argType.getDimSize(weightDim) / ranks);
    arg.setType(localArgType);
    SmallVector<Type> inputs(func.getArgumentTypes());
    inputs[arg.getArgNumber()] = localArgType;
    func.setType(
        FunctionType::get(func.getContext(), inputs, func.getResultTypes()));
    setLayout(func, arg.getArgNumber(),
              LayoutAttr::get(func.getContext(), SplitRole::Row, weightDim));
    if (expand) {
      OpBuilder b(expand);
      auto local = tensor::ExpandShapeOp::create(
          b, expand.getLoc(),
          withDim(filterType, filterDim,
                  filterType.getDimSize(filterDim) / ranks),
          arg, expand.getReassociationIndices());
      other.set(local);
      expand.erase();
    }
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    Value partial = op->getResult(0);
    // Inlined from tp-outline-unpartitionable's call: name the node itself.
    Location loc = op.getLoc();
    if (auto callSite = dyn_cast<CallSiteLoc>(loc))
      loc = callSite.getCallee();
    auto reduce = shard::AllReduceOp::create(b, loc, partial, gather.getGrid(),
                                             gather.getGridAxes(),
                                             shard::ReductionKind::Sum);
    use->set(gather.getInput());
    gather.erase();
    partial.replaceAllUsesExcept(reduce.getResult(), reduce);
  }

  /// Moves `gather` below `user`, one of its users, when that user works
  /// on each channel separately and reads every operand indexed by the
  /// channels from a gather of its own channels (or a weight it can
  /// slice); returns the new gather of its result, or null when nothing
  /// moved. Gathers left without users are erased by the caller.
  shard::AllGatherOp sinkGather(shard::AllGatherOp gather, Operation *user,
                                int64_t ranks) {
    int64_t axis = gather.getGatherAxis().getSExtValue();
    Value local = gather.getInput();
    OpBuilder b(user);
    auto regather = [&](Value value, int64_t newAxis) {
      auto type = cast<RankedTensorType>(user->getResult(0).getType());
      auto next = shard::AllGatherOp::create(
          b, gather.getLoc(), type, gather.getGrid(), gather.getGridAxes(),
          value, APInt(64, newAxis));
      user->getResult(0).replaceAllUsesWith(next.getResult());
      user->erase();
      return next;
    };
    auto localType = [&](Value value, int64_t dim) {
      auto type = cast<RankedTensorType>(value.getType());
      return withDim(type, dim, type.getDimSize(dim) / ranks);
    };

    if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(user)) {
      // The channel dim must stay a dim of its own (merged with unit dims).
      auto srcType = collapse.getSrcType();
      for (auto [resultDim, group] :
           llvm::enumerate(collapse.getReassociationIndices())) {
        if (!llvm::is_contained(group, axis))
          continue;
        for (int64_t d : group)
          if (d != axis && srcType.getDimSize(d) != 1)
            return nullptr;
        auto next = tensor::CollapseShapeOp::create(
            b, collapse.getLoc(), localType(collapse.getResult(), resultDim),
            local, collapse.getReassociationIndices());
        return regather(next, resultDim);
      }
      return nullptr;
    }
    if (auto pad = dyn_cast<tensor::PadOp>(user)) {
      if (pad.getStaticLow()[axis] != 0 || pad.getStaticHigh()[axis] != 0 ||
          !pad.getConstantPaddingValue())
        return nullptr;
      IRMapping mapping;
      mapping.map(pad.getSource(), local);
      Operation *next = b.clone(*pad, mapping);
      next->getResult(0).setType(localType(pad.getResult(), axis));
      return regather(next->getResult(0), axis);
    }
    auto generic = dyn_cast<linalg::GenericOp>(user);
    if (!generic || generic.getNumDpsInits() != 1)
      return nullptr;
    OpOperand *use = nullptr;
    for (OpOperand &operand : generic->getOpOperands())
      if (operand.get() == gather.getResult() && !use)
        use = &operand;
    if (generic.isDpsInit(use))
      return nullptr;
    // The loop over channels: a parallel loop that indexes the gathered dim
    // and the output as plain dims.
    auto dimOf = [](AffineMap map,
                    int64_t position) -> std::optional<unsigned> {
      if (auto dim = dyn_cast<AffineDimExpr>(map.getResult(position)))
        return dim.getPosition();
      return std::nullopt;
    };
    std::optional<unsigned> loop =
        dimOf(generic.getMatchingIndexingMap(use), axis);
    if (!loop ||
        generic.getIteratorTypesArray()[*loop] != utils::IteratorType::parallel)
      return nullptr;
    AffineMap outMap = generic.getIndexingMapsArray().back();
    int64_t outDim = positionOf(outMap, *loop);
    if (outDim < 0)
      return nullptr;
    // Every other operand ignores the channel loop, is gathered on the
    // dim the loop indexes (its rank's channels are at hand), or is a
    // weight read only here, indexed by it plainly: this rank takes its
    // slice.
    SmallVector<std::pair<BlockArgument, int64_t>> weightsToSlice;
    IRMapping mapping;
    mapping.map(use->get(), local);
    for (OpOperand &operand : generic->getOpOperands()) {
      if (&operand == use || generic.isDpsInit(&operand) ||
          !isa<RankedTensorType>(operand.get().getType()))
        continue;
      AffineMap map = generic.getMatchingIndexingMap(&operand);
      if (!map.isFunctionOfDim(*loop))
        continue;
      int64_t dim = positionOf(map, *loop);
      if (auto other = operand.get().getDefiningOp<shard::AllGatherOp>()) {
        if (dim < 0 || other.getGatherAxis().getSExtValue() != dim ||
            other.getGrid() != gather.getGrid() ||
            other.getGridAxes() != gather.getGridAxes())
          return nullptr;
        mapping.map(operand.get(), other.getInput());
        continue;
      }
      auto arg = dyn_cast<BlockArgument>(operand.get());
      auto func =
          arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()) : nullptr;
      if (!func || dim < 0 || !arg.hasOneUse() ||
          !isWholeWeight(func, arg.getArgNumber()))
        return nullptr;
      weightsToSlice.emplace_back(arg, dim);
    }
    Value init = generic.getDpsInits()[0];
    auto fill = init.getDefiningOp<linalg::FillOp>();
    if (!fill && !init.getDefiningOp<tensor::EmptyOp>())
      return nullptr;

    for (auto [arg, dim] : weightsToSlice) {
      auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
      arg.setType(localType(arg, dim));
      SmallVector<Type> inputs(func.getArgumentTypes());
      inputs[arg.getArgNumber()] = arg.getType();
      func.setType(
          FunctionType::get(func.getContext(), inputs, func.getResultTypes()));
      setLayout(func, arg.getArgNumber(),
                LayoutAttr::get(func.getContext(), SplitRole::ConvOutput, dim));
    }
    auto resultType = localType(generic.getResult(0), outDim);
    Value localInit =
        tensor::EmptyOp::create(b, generic.getLoc(), resultType.getShape(),
                                resultType.getElementType());
    if (fill)
      localInit = linalg::FillOp::create(b, fill.getLoc(), fill.getInputs()[0],
                                         localInit)
                      .getResult(0);
    mapping.map(init, localInit);
    Operation *next = b.clone(*generic, mapping);
    next->getResult(0).setType(resultType);
    // Operands that ignore the channel loop but have the full result shape
    // (a window tensor) are unchanged; only `init` and the input moved.
    shard::AllGatherOp result = regather(next->getResult(0), outDim);
    if (fill && fill->use_empty())
      fill.erase();
    return result;
  }
};

} // namespace
