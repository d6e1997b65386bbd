//===- HeadBlock.h - the closure of an attention block's heads --*- C++ -*-===//
//
// An attention block's values that have a heads dim, found by closure from
// one of them: a loop of a linalg op that reads a widened dim grows with
// it, and so does every operand and result that it indexes. Two passes
// grow the heads this way:
//  - tp-pad-attention-heads (Mode::Pad): new heads at the end, zeros where
//    an operand cannot grow (tensor.pad); a block ends in a weight
//    contraction over the heads, whose padded rows are zero;
//  - tp-repeat-kv-heads (Mode::Repeat): each K/V head repeated R times in
//    place; a weight operand that cannot grow becomes a new argument that
//    holds its blocks repeated (#tp.layout repeat), and the block ends
//    where grouped-query attention broadcasts each K/V head to its query
//    heads, which then broadcasts R times fewer.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TRANSFORMS_HEADBLOCK_H
#define TP_LIB_TRANSFORMS_HEADBLOCK_H

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tp::heads {

/// Dim `dim` of a value grows to `size`: new entries at its end (Pad), or
/// each of its blocks repeated in place (Repeat).
struct Widening {
  int64_t dim;
  int64_t size;
  bool operator==(const Widening &other) const {
    return dim == other.dim && size == other.size;
  }
};

inline int64_t roundUp(int64_t size, int64_t devices) {
  return (size + devices - 1) / devices * devices;
}

/// The first result dim of `group` whose size is not 1, if any.
inline std::optional<int64_t> firstNonUnit(ArrayRef<int64_t> shape,
                                           const ReassociationIndices &group) {
  for (int64_t d : group)
    if (shape[d] != 1)
      return d;
  return std::nullopt;
}

/// The group of `reassociation` that holds `dim`.
inline unsigned groupOf(ArrayRef<ReassociationIndices> reassociation,
                        int64_t dim) {
  for (auto [i, group] : llvm::enumerate(reassociation))
    if (llvm::is_contained(group, dim))
      return i;
  llvm_unreachable("dim in no reassociation group");
}

/// The closure of one attention block: which values widen, which operands
/// are read through a pad, and whether it ends where padding is exact.
enum class Mode { Pad, Repeat };

class HeadBlock {
public:
  HeadBlock() = default;
  /// A block whose `kvHeads` heads each repeat `times` times.
  HeadBlock(int64_t kvHeads, int64_t times)
      : mode(Mode::Repeat), kvHeads(kvHeads), times(times) {}

  /// Grows dim `w.dim` of `v`, and everything that must grow with it.
  /// Fails if the block cannot be padded.
  LogicalResult widen(Value v, Widening w) {
    auto [it, inserted] = values.try_emplace(v, w);
    if (!inserted)
      return success(it->second == w);
    if (failed(widenProducer(v, w)))
      return failure();
    for (OpOperand &use : llvm::make_early_inc_range(v.getUses()))
      if (failed(widenUse(use, w)))
        return failure();
    return success();
  }

  /// True if padding lets the plan split the block: it starts in a weight
  /// contraction whose output grows (a Q/K/V projection) and ends in one
  /// over the padded heads (the output projection). (Exactness holds for
  /// any closure that succeeds: padded entries meet the rest of the
  /// program only through zero rows, or as terms of another sum over the
  /// heads, which apply() masks to zero at the padding unless they are
  /// zero there already.)
  bool isWorthPadding() const { return columns > 0 && rows > 0; }
  /// True if repeating lets the plan split the K/V heads: a weight
  /// contraction makes them (its weight repeated) and grouped-query
  /// attention broadcasts them to the query heads.
  bool isWorthRepeating() const {
    return columns > 0 && !repeats.empty() && !shrinks.empty();
  }

  /// Rewrites the IR: new types, pads where operands do not grow, and
  /// masks on the terms of sums over the heads that are not zero at the
  /// padding.
  void apply() {
    SmallVector<std::tuple<linalg::LinalgOp, unsigned, int64_t>> masks;
    for (auto [op, loop] : sums)
      if (!termsAreZeroAtPadding(op, loop))
        masks.push_back({op, loop, op.getStaticLoopRanges()[loop]});
    for (auto [v, w] : values) {
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[w.dim] = w.size;
      v.setType(type.clone(shape));
      if (auto expand = v.getDefiningOp<tensor::ExpandShapeOp>())
        expand.setStaticOutputShape(shape);
      if (auto slice = v.getDefiningOp<tensor::ExtractSliceOp>()) {
        SmallVector<int64_t> sizes(slice.getStaticSizes());
        sizes[w.dim] = w.size;
        slice.setStaticSizes(sizes);
      }
    }
    for (auto [use, w] : pads) {
      OpBuilder b(use->getOwner());
      use->set(padTail(b, use->get(), w));
    }
    for (auto [op, loop, size] : masks)
      maskTerms(op, loop, size);
    applyRepeats();
  }

  /// Whether apply() changes the type of a KV cache argument (and so the
  /// function's type).
  bool changesArguments() const { return cachesWiden; }

  bool contains(Operation *op) const {
    return llvm::any_of(op->getResults(),
                        [&](Value v) { return values.contains(v); });
  }

private:
  /// Mode::Repeat: each weight argument read with its heads repeated
  /// becomes a new argument holding them so (#tp.layout repeat), the old
  /// one going once nothing else reads it; each broadcast of the K/V heads
  /// to the query heads broadcasts `times` times fewer.
  void applyRepeats() {
    DenseMap<std::pair<Value, int64_t>, Value> replaced;
    SmallVector<BlockArgument> old;
    for (auto [use, w] : repeats) {
      auto arg = cast<BlockArgument>(use->get());
      auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
      Value &repeated = replaced[{arg, w.dim}];
      if (!repeated) {
        MLIRContext *ctx = func.getContext();
        LayoutAttr layout = getLayout(func, arg.getArgNumber());
        auto type = cast<RankedTensorType>(arg.getType());
        SmallVector<int64_t> shape(type.getShape());
        shape[w.dim] = w.size;
        auto repeatedLayout =
            LayoutAttr::get(ctx, SplitRole::Replicated, w.dim, /*block=*/-1,
                            layout ? layout.getSlice() : ArrayRef<int64_t>(),
                            {}, {kvHeads, times});
        NamedAttribute attrs[] = {
            NamedAttribute(TPDialect::kWeightAttrName,
                           func.getArgAttr(arg.getArgNumber(),
                                           TPDialect::kWeightAttrName)),
            NamedAttribute(TPDialect::kLayoutAttrName, repeatedLayout)};
        unsigned position = func.getNumArguments();
        (void)func.insertArgument(position, type.clone(shape),
                                  DictionaryAttr::get(ctx, attrs),
                                  arg.getLoc());
        repeated = func.getArgument(position);
        old.push_back(arg);
      }
      use->set(repeated);
    }
    llvm::sort(old, [](BlockArgument a, BlockArgument b) {
      return a.getArgNumber() > b.getArgNumber();
    });
    for (BlockArgument arg : old)
      if (arg.use_empty())
        (void)cast<func::FuncOp>(arg.getOwner()->getParentOp())
            .eraseArgument(arg.getArgNumber());
    for (auto [broadcast, dim] : shrinks) {
      auto type = cast<RankedTensorType>(broadcast->getResult(0).getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[dim] *= times;
      shape[dim + 1] /= times;
      OpBuilder b(broadcast);
      Value init = tensor::EmptyOp::create(b, broadcast.getLoc(), shape,
                                           type.getElementType());
      Value old = broadcast.getDpsInits()[0];
      broadcast.getDpsInitsMutable()[0].set(init);
      broadcast->getResult(0).setType(type.clone(shape));
      if (auto empty = old.getDefiningOp<tensor::EmptyOp>();
          empty && empty->use_empty())
        empty->erase();
    }
  }

  /// True if `v` is a weight argument whose range on `dim` may be read
  /// repeated: not split or padded already.
  static bool isRepeatableWeight(Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                    : func::FuncOp();
    if (!func ||
        !func.getArgAttr(arg.getArgNumber(), TPDialect::kWeightAttrName))
      return false;
    LayoutAttr layout = getLayout(func, arg.getArgNumber());
    return !layout ||
           (!layout.isSplit() && !layout.isPadded() && !layout.isRepeated());
  }

  /// True if `v` is a weight argument whose layout repeats its heads.
  static bool isRepeatedWeight(Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                    : func::FuncOp();
    LayoutAttr layout = func ? getLayout(func, arg.getArgNumber()) : nullptr;
    return layout && layout.isRepeated();
  }

  /// Mode::Repeat: `use` is the input of grouped-query attention's
  /// broadcast of each K/V head (dim `w.dim`) to the query heads of its
  /// group (the next dim of its result, which one reshape merges with the
  /// heads): with the K/V heads repeated, each broadcasts `times` times
  /// fewer, and the merged heads stay as they are.
  LogicalResult endAtQueryBroadcast(linalg::GenericOp op, OpOperand &use,
                                    Widening w) {
    if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
        op.getNumLoops() != op.getNumParallelLoops())
      return failure();
    Block &body = op.getRegion().front();
    if (body.getTerminator()->getOperand(0) != body.getArgument(0))
      return failure();
    AffineMap in = op.getMatchingIndexingMap(&use);
    AffineMap out = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
    auto loop = dyn_cast<AffineDimExpr>(in.getResult(w.dim));
    if (!out.isIdentity() || !loop ||
        loop.getPosition() + 1 >= out.getNumDims())
      return failure();
    unsigned kv = loop.getPosition(), group = kv + 1;
    // The input reads every loop but the group's.
    for (unsigned d = 0; d < out.getNumDims(); ++d)
      if (in.isFunctionOfDim(d) == (d == group))
        return failure();
    Value result = op.getResult(0);
    auto collapse =
        result.hasOneUse()
            ? dyn_cast<tensor::CollapseShapeOp>(*result.user_begin())
            : nullptr;
    if (!collapse ||
        llvm::none_of(collapse.getReassociationIndices(),
                      [&](const ReassociationIndices &indices) {
                        return indices == ReassociationIndices{int64_t(kv),
                                                               int64_t(group)};
                      }))
      return failure();
    ArrayRef<int64_t> shape =
        cast<RankedTensorType>(result.getType()).getShape();
    if (shape[group] % times != 0 || shape[kv] * times != w.size)
      return failure();
    auto [it, inserted] = shrinks.try_emplace(op, kv);
    return success(inserted || it->second == kv);
  }

  /// `v` padded with zeros at the end of `w.dim` to `w.size`.
  static Value padTail(OpBuilder &b, Value v, Widening w) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    SmallVector<OpFoldResult> low, high;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      low.push_back(b.getIndexAttr(0));
      high.push_back(b.getIndexAttr(d == w.dim ? w.size - shape[d] : 0));
    }
    shape[w.dim] = w.size;
    Location loc = v.getLoc();
    Value zero =
        arith::ConstantOp::create(b, loc, b.getZeroAttr(type.getElementType()));
    return tensor::PadOp::create(b, loc, type.clone(shape), v, low, high, zero);
  }

  /// True if `slice` (static, not rank-reducing) takes all of `dim`, with
  /// a unit stride on it. Other dims may be strided: rotary embeddings that
  /// pair neighbouring channels slice the head dim with a stride of 2.
  static bool keepsWhole(tensor::ExtractSliceOp slice, int64_t dim) {
    return slice.getStaticStrides()[dim] == 1 &&
           slice.getType().getRank() == slice.getSourceType().getRank() &&
           slice.getStaticOffsets()[dim] == 0 &&
           slice.getStaticSizes()[dim] == slice.getSourceType().getDimSize(dim);
  }

  /// True if `pad` (static, zero) leaves `dim` as it is: a causal
  /// convolution pads the sequence, not the channels.
  static bool keepsDim(tensor::PadOp pad, int64_t dim) {
    return pad.getLow().empty() && pad.getHigh().empty() &&
           pad.getConstantPaddingValue() && pad.getStaticLow()[dim] == 0 &&
           pad.getStaticHigh()[dim] == 0;
  }

  /// True if `v` is a KV cache argument (tp-kv-cache): the runtime
  /// allocates it at the shape the function declares, so it widens with its
  /// padded heads, and it is never read through a pad (it is written in
  /// place).
  static bool isCache(Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                    : func::FuncOp();
    return func &&
           func.getArgAttr(arg.getArgNumber(), TPDialect::kCacheAttrName);
  }

  /// True if the producer of `v` can be rewritten to make it wider on
  /// `w.dim`; otherwise the use reads `v` through a pad.
  bool canWidenProducer(Value v, Widening w) const {
    if (isCache(v))
      return true;
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (auto update = dyn_cast<CacheUpdateOp>(def))
      return static_cast<int64_t>(update.getDim()) != w.dim;
    if (isa<tensor::EmptyOp>(def))
      return true;
    if (auto op = dyn_cast<linalg::LinalgOp>(def))
      return isa<AffineDimExpr>(
          op.getIndexingMapMatchingResult(cast<OpResult>(v)).getResult(w.dim));
    if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
      auto shape = expand.getResultType().getShape();
      auto reassociation = expand.getReassociationIndices();
      return firstNonUnit(
                 shape, reassociation[groupOf(reassociation, w.dim)]) == w.dim;
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(def))
      return keepsWhole(slice, w.dim);
    if (auto pad = dyn_cast<tensor::PadOp>(def))
      return keepsDim(pad, w.dim);
    if (auto concat = dyn_cast<tensor::ConcatOp>(def))
      return concat.getDim() != uint64_t(w.dim);
    if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
      auto shape = collapse.getSrcType().getShape();
      ReassociationIndices group = collapse.getReassociationIndices()[w.dim];
      if (llvm::count_if(group, [&](int64_t d) { return shape[d] != 1; }) == 1)
        return true;
      // Padding whole blocks of the first merged dim pads the merged dim at
      // its end (grouped-query attention's K/V heads merged with their
      // query heads grow by whole groups). A repeat would not.
      std::optional<int64_t> first = firstNonUnit(shape, group);
      return first && mode == Mode::Pad &&
             w.size % (collapse.getResultType().getDimSize(w.dim) /
                       shape[*first]) ==
                 0;
    }
    return false;
  }

  /// `operand` must be wider on `w.dim`: its value grows, or it is padded.
  LogicalResult require(OpOperand &operand, Widening w) {
    Value v = operand.get();
    if (auto it = values.find(v); it != values.end())
      return success(it->second == w);
    if (canWidenProducer(v, w))
      return widen(v, w);
    if (mode == Mode::Repeat) {
      // Only a weight can be read repeated (a new argument holding it so).
      if (!isRepeatableWeight(v) || w.size % times != 0 ||
          cast<RankedTensorType>(v.getType()).getDimSize(w.dim) * times !=
              w.size)
        return failure();
      auto [it, inserted] = repeats.try_emplace(&operand, w);
      return success(inserted || it->second == w);
    }
    // A weight that tp-repeat-kv-heads repeated (V beside a K that a norm
    // over all heads kept from repeating) is not padded after it: the
    // artifact's layouts pad a weight's rows before they repeat.
    if (isRepeatedWeight(v))
      return failure();
    auto [it, inserted] = pads.try_emplace(&operand, w);
    return success(inserted || it->second == w);
  }

  LogicalResult widenProducer(Value v, Widening w) {
    if (isCache(v)) {
      cachesWiden = true;
      return success();
    }
    Operation *def = v.getDefiningOp();
    if (!def || isa<tensor::EmptyOp>(def))
      return success(def != nullptr);
    if (auto update = dyn_cast<CacheUpdateOp>(def))
      return success(static_cast<int64_t>(update.getDim()) != w.dim &&
                     succeeded(require(update.getUpdateMutable(), w)) &&
                     succeeded(require(update.getCacheMutable(), w)));
    if (auto op = dyn_cast<linalg::LinalgOp>(def)) {
      AffineMap map = op.getIndexingMapMatchingResult(cast<OpResult>(v));
      return widenLoop(
          op, cast<AffineDimExpr>(map.getResult(w.dim)).getPosition(), w.size);
    }
    if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
      auto shape = expand.getResultType().getShape();
      auto reassociation = expand.getReassociationIndices();
      unsigned group = groupOf(reassociation, w.dim);
      int64_t size = w.size;
      for (int64_t d : reassociation[group])
        if (d != w.dim)
          size *= shape[d];
      return require(expand.getSrcMutable(), {group, size});
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(def))
      return require(slice.getSourceMutable(), w);
    if (auto pad = dyn_cast<tensor::PadOp>(def))
      return success(keepsDim(pad, w.dim) &&
                     succeeded(require(pad.getSourceMutable(), w)));
    if (auto concat = dyn_cast<tensor::ConcatOp>(def)) {
      for (OpOperand &operand : concat->getOpOperands())
        if (failed(require(operand, w)))
          return failure();
      return success();
    }
    if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
      // The padding is at the end of the merged dim, so in its first
      // non-unit source dim.
      auto shape = collapse.getSrcType().getShape();
      std::optional<int64_t> first =
          firstNonUnit(shape, collapse.getReassociationIndices()[w.dim]);
      int64_t rest =
          first ? collapse.getResultType().getDimSize(w.dim) / shape[*first]
                : 0;
      if (!first || w.size % rest != 0)
        return failure();
      return require(collapse.getSrcMutable(), {*first, w.size / rest});
    }
    return failure();
  }

  LogicalResult widenUse(OpOperand &use, Widening w) {
    Operation *user = use.getOwner();
    if (auto generic = dyn_cast<linalg::GenericOp>(user);
        generic && mode == Mode::Repeat &&
        succeeded(endAtQueryBroadcast(generic, use, w)))
      return success();
    if (auto op = dyn_cast<linalg::LinalgOp>(user)) {
      std::optional<unsigned> loop =
          plainLoop(op.getMatchingIndexingMap(&use).getResult(w.dim),
                    op.getStaticLoopRanges());
      if (!loop)
        return failure();
      return widenLoop(op, *loop, w.size);
    }
    if (auto expand = dyn_cast<tensor::ExpandShapeOp>(user)) {
      auto shape = expand.getResultType().getShape();
      auto srcShape = expand.getSrcType().getShape();
      // A copy: getReassociationIndices() returns a temporary.
      ReassociationIndices group = expand.getReassociationIndices()[w.dim];
      std::optional<int64_t> outer = firstNonUnit(shape, group);
      int64_t rest = srcShape[w.dim] / (outer ? shape[*outer] : 1);
      if (!outer || w.size % rest != 0)
        return failure();
      return widen(expand.getResult(), {*outer, w.size / rest});
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(user))
      return success(keepsWhole(slice, w.dim) &&
                     succeeded(widen(slice.getResult(), w)));
    if (auto update = dyn_cast<CacheUpdateOp>(user))
      return success(static_cast<int64_t>(update.getDim()) != w.dim &&
                     succeeded(widen(update.getResult(), w)));
    if (auto pad = dyn_cast<tensor::PadOp>(user))
      return success(keepsDim(pad, w.dim) &&
                     succeeded(widen(pad.getResult(), w)));
    if (auto concat = dyn_cast<tensor::ConcatOp>(user))
      return success(concat.getDim() != uint64_t(w.dim) &&
                     succeeded(widen(concat.getResult(), w)));
    if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(user)) {
      auto srcShape = collapse.getSrcType().getShape();
      unsigned group = groupOf(collapse.getReassociationIndices(), w.dim);
      ReassociationIndices dims = collapse.getReassociationIndices()[group];
      // The padding must stay at the end of the merged dim.
      if (firstNonUnit(srcShape, dims) != w.dim)
        return failure();
      int64_t size = w.size;
      for (int64_t d : dims)
        if (d != w.dim)
          size *= srcShape[d];
      Widening merged{group, size};
      // Reached from its result (the query heads of multi-query attention
      // reading one K/V head through its repeat): consistent or not.
      if (auto it = values.find(collapse.getResult()); it != values.end())
        return success(it->second == merged);
      // K/V heads broadcast to the query heads of their groups (grouped-
      // query attention), reached from the K/V side: the new K/V heads are
      // new groups at the end of the merged heads, so the query heads grow
      // by whole groups, each new one paired with a new K/V head (zero, as
      // are its query heads). Repeating K/V heads instead (Mode::Repeat)
      // ends at the broadcast, above.
      if (mode == Mode::Repeat && isBroadcast(collapse.getSrc()))
        return failure();
      return widen(collapse.getResult(), merged);
    }
    return failure();
  }

  /// True if `op` adds a term to its one accumulator (a sum over its
  /// reduction loops).
  static bool isSumOfTerms(linalg::LinalgOp op) {
    if (op->getNumResults() != 1 || op.getNumDpsInits() != 1)
      return false;
    auto add = op.getBlock()
                   ->getTerminator()
                   ->getOperand(0)
                   .getDefiningOp<arith::AddFOp>();
    BlockArgument acc = op.getMatchingBlockArgument(op.getDpsInitOperand(0));
    return add && (add.getLhs() == acc || add.getRhs() == acc);
  }

  /// The term that the sum `op` adds to its accumulator (isSumOfTerms).
  static OpOperand &getTerm(linalg::LinalgOp op) {
    auto add = op.getBlock()
                   ->getTerminator()
                   ->getOperand(0)
                   .getDefiningOp<arith::AddFOp>();
    BlockArgument acc = op.getMatchingBlockArgument(op.getDpsInitOperand(0));
    return add->getOpOperand(add.getLhs() == acc ? 1 : 0);
  }

  /// True if the sum `op` over the padded heads (loop `loop`) adds terms
  /// that are zero at the padding: a norm's sum of squares over all heads'
  /// features (its mean divides by the count of the real ones).
  bool termsAreZeroAtPadding(linalg::LinalgOp op, unsigned loop) const {
    return isZeroWhen(getTerm(op).get(), [&](BlockArgument arg) {
      OpOperand *operand = op.getMatchingOpOperand(arg);
      return op.isDpsInput(operand) &&
             op.getMatchingIndexingMap(operand).isFunctionOfDim(loop) &&
             isZeroAtPadding(*operand);
    });
  }

  /// Makes the sum `op` add zero for the padded heads: its term becomes
  /// `index(loop) < size ? term : 0` (a layer norm's variance, whose
  /// centred values `x - mean` are not zero there; tp-offset-split-indices
  /// makes the index global once the loop is split).
  static void maskTerms(linalg::LinalgOp op, unsigned loop, int64_t size) {
    OpOperand &term = getTerm(op);
    OpBuilder b(term.getOwner());
    Location loc = op.getLoc();
    Value index = linalg::IndexOp::create(b, loc, loop);
    Value bound = arith::ConstantIndexOp::create(b, loc, size);
    Value real =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, index, bound);
    Value zero =
        arith::ConstantOp::create(b, loc, b.getZeroAttr(term.get().getType()));
    term.set(arith::SelectOp::create(b, loc, real, term.get(), zero));
  }

  /// True if the scalar `v` of a body is zero whenever the block arguments
  /// that `isZero` accepts are: products, quotients and positive powers of
  /// such a value, sums and negations of them.
  static bool isZeroWhen(Value v,
                         llvm::function_ref<bool(BlockArgument)> isZero,
                         unsigned depth = 8) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return isZero(arg);
    Operation *def = v.getDefiningOp();
    if (!def || depth == 0)
      return false;
    auto zero = [&](Value operand) {
      return isZeroWhen(operand, isZero, depth - 1);
    };
    if (isa<arith::MulFOp>(def))
      return zero(def->getOperand(0)) || zero(def->getOperand(1));
    if (isa<arith::DivFOp, arith::NegFOp>(def))
      return zero(def->getOperand(0));
    if (isa<arith::AddFOp, arith::SubFOp>(def))
      return zero(def->getOperand(0)) && zero(def->getOperand(1));
    if (isa<math::PowFOp>(def)) {
      auto exponent = def->getOperand(1).getDefiningOp<arith::ConstantOp>();
      auto value =
          exponent ? dyn_cast<FloatAttr>(exponent.getValue()) : FloatAttr();
      return value && value.getValueAsDouble() > 0 && zero(def->getOperand(0));
    }
    return false;
  }

  /// True if what `operand` reads is zero at the padded heads: it is read
  /// through a pad of zeros, or its widened value is made so.
  bool isZeroAtPadding(OpOperand &operand, unsigned depth = 16) const {
    if (pads.contains(&operand))
      return true;
    Value v = operand.get();
    auto it = values.find(v);
    if (it == values.end() || depth == 0)
      return false;
    if (isCache(v))
      return true; // its new heads hold what the zero keys and values wrote
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
            tensor::ExtractSliceOp, tensor::PadOp>(def))
      return isZeroAtPadding(def->getOpOperand(0), depth - 1);
    if (isa<CacheUpdateOp, tensor::ConcatOp>(def))
      return llvm::all_of(def->getOpOperands(), [&](OpOperand &input) {
        return !isa<RankedTensorType>(input.get().getType()) ||
               isZeroAtPadding(input, depth - 1);
      });
    auto op = dyn_cast<linalg::LinalgOp>(def);
    if (!op || op->getNumResults() != 1)
      return false;
    // A weight contraction's new columns: zero weights (and a zero bias).
    if (getWeightOperand(op))
      return true;
    auto loop = dyn_cast<AffineDimExpr>(
        op.getIndexingMapMatchingResult(cast<OpResult>(v))
            .getResult(it->second.dim));
    if (!loop || op.getNumReductionLoops() != 0)
      return false;
    return isZeroWhen(op.getBlock()->getTerminator()->getOperand(0),
                      [&](BlockArgument arg) {
                        OpOperand *input = op.getMatchingOpOperand(arg);
                        return op.isDpsInput(input) &&
                               op.getMatchingIndexingMap(input).isFunctionOfDim(
                                   loop.getPosition()) &&
                               isZeroAtPadding(*input, depth - 1);
                      });
  }

  /// The loop that `expr` reads: a loop, or a loop plus loops of one
  /// iteration (a depthwise convolution reads its channel as d1 + d4, d4
  /// over the one channel of its group).
  static std::optional<unsigned> plainLoop(AffineExpr expr,
                                           ArrayRef<int64_t> ranges) {
    if (auto d = dyn_cast<AffineDimExpr>(expr))
      return d.getPosition();
    auto add = dyn_cast<AffineBinaryOpExpr>(expr);
    if (!add || add.getKind() != AffineExprKind::Add)
      return std::nullopt;
    std::optional<unsigned> lhs = plainLoop(add.getLHS(), ranges);
    std::optional<unsigned> rhs = plainLoop(add.getRHS(), ranges);
    if (!lhs || !rhs || (ranges[*lhs] == 1) == (ranges[*rhs] == 1))
      return std::nullopt;
    return ranges[*lhs] == 1 ? rhs : lhs;
  }

  /// Loop `loop` of `op` grows to `size`: every operand and result that it
  /// indexes grows with it.
  LogicalResult widenLoop(linalg::LinalgOp op, unsigned loop, int64_t size) {
    auto [it, inserted] = loops.try_emplace({op, loop}, size);
    if (!inserted)
      return success(it->second == size);
    // A body that reads the head index computes per head (an ALiBi slope,
    // say): what it would compute for a padded head is unknown.
    bool readsIndex = false;
    op->walk(
        [&](linalg::IndexOp index) { readsIndex |= index.getDim() == loop; });
    if (readsIndex)
      return failure();
    if (op.getIteratorTypesArray()[loop] == utils::IteratorType::reduction) {
      // A sum over repeated heads would count each K/V head R times.
      if (mode == Mode::Repeat)
        return failure();
      // Only a contraction with a weight, whose padded rows are zeros, may
      // sum over the padded heads; or a sum of terms (a norm's statistics
      // over all heads' features, OLMo 2's: its mean divides by the count
      // of the real ones), whose terms are or are made zero there.
      std::optional<unsigned> weight = getWeightOperand(op);
      if (weight && op.getMatchingIndexingMap(&op->getOpOperand(*weight))
                        .isFunctionOfDim(loop))
        ++rows;
      else if (isSumOfTerms(op))
        sums.push_back({op, loop});
      else
        return failure();
    } else if (std::optional<unsigned> weight = getWeightOperand(op)) {
      if (op.getMatchingIndexingMap(&op->getOpOperand(*weight))
              .isFunctionOfDim(loop))
        ++columns;
    }
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    for (OpOperand &operand : op->getOpOperands()) {
      AffineMap map = op.getMatchingIndexingMap(&operand);
      for (auto [d, expr] : llvm::enumerate(map.getResults())) {
        if (!expr.isFunctionOfDim(loop))
          continue;
        if (plainLoop(expr, ranges) != loop)
          return failure();
        if (failed(require(operand, {int64_t(d), size})))
          return failure();
      }
    }
    for (OpResult result : op->getResults()) {
      AffineMap map = op.getIndexingMapMatchingResult(result);
      for (auto [d, expr] : llvm::enumerate(map.getResults()))
        if (expr.isFunctionOfDim(loop) &&
            failed(widen(result, {int64_t(d), size})))
          return failure();
    }
    return success();
  }

  Mode mode = Mode::Pad;
  int64_t kvHeads = 0, times = 1;
  llvm::MapVector<Value, Widening> values;
  /// Mode::Repeat: weight operands read with their heads repeated, and the
  /// broadcasts to the query heads with the dim of their K/V heads.
  llvm::MapVector<OpOperand *, Widening> repeats;
  llvm::MapVector<linalg::GenericOp, unsigned> shrinks;
  llvm::MapVector<OpOperand *, Widening> pads;
  DenseMap<std::pair<Operation *, unsigned>, int64_t> loops;
  /// Sums over padded heads that are not weight contractions, with their
  /// loop: exact if their terms are zero there, else masked (apply).
  SmallVector<std::pair<linalg::LinalgOp, unsigned>> sums;
  int64_t columns = 0, rows = 0;
  bool cachesWiden = false;
};

} // namespace mlir::tp::heads

#endif // TP_LIB_TRANSFORMS_HEADBLOCK_H
