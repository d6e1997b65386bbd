//===- PlanSequenceParallel.cpp - tp-plan-sequence-parallel ---------------===//
//
// Sequence parallelism as Megatron-LM does it: between tensor-parallel
// blocks every rank holds a slice of the sequence instead of all of it.
// The pass marks the residual stream, found by structure (the residual add
// after each row-parallel contraction, and the stream it adds to), as split
// on the sequence dim; propagation carries the split through the norms.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::tp {
#define GEN_PASS_DEF_PLANSEQUENCEPARALLEL
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

std::optional<SplitRole> getLayoutRole(linalg::LinalgOp op);

/// The role the tensor-parallel plan gave the weight that `op` contracts
/// with, if it split one.
std::optional<SplitRole> getSplitRole(linalg::LinalgOp op) {
  std::optional<SplitRole> role = getLayoutRole(op);
  if (role == SplitRole::Replicated)
    return std::nullopt;
  return role;
}

/// The role of the layout the weight that `op` contracts with has, if any
/// (a fused piece left whole has one: replicated).
std::optional<SplitRole> getLayoutRole(linalg::LinalgOp op) {
  if (op.getNumReductionLoops() == 0)
    return std::nullopt;
  for (Value input : op.getDpsInputs()) {
    auto shardOp = input.getDefiningOp<shard::ShardOp>();
    if (!shardOp)
      continue;
    // The plan's layout is on the weight argument, or on the op that reads
    // it (a zero pad of a padded weight).
    if (LayoutAttr layout = getLayout(shardOp.getSrc()))
      return layout.getRole();
  }
  return std::nullopt;
}

/// True if `op` reads a weight that the tensor-parallel plan split as row.
bool isRowParallel(linalg::LinalgOp op) {
  return getSplitRole(op) == SplitRole::Row;
}

/// A `tp.weight` argument, read through its plan annotation.
bool isWeight(Value v) {
  if (auto shardOp = v.getDefiningOp<shard::ShardOp>())
    v = shardOp.getSrc();
  if (auto pad = v.getDefiningOp<tensor::PadOp>())
    v = pad.getSource();
  auto arg = dyn_cast<BlockArgument>(v);
  auto func =
      arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()) : nullptr;
  return func &&
         func.getArgAttr(arg.getArgNumber(), TPDialect::kWeightAttrName);
}

bool isElementwise(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp && linalgOp.getNumReductionLoops() == 0 &&
         op->getNumResults() == 1 &&
         linalgOp.getIndexingMapMatchingResult(op->getOpResult(0)).isIdentity();
}

/// True if `v` is the output of a row-parallel block: a row-parallel
/// contraction, through single-use elementwise ops (its bias add).
bool isRowParallelOutput(Value v) {
  for (int steps = 0; steps < 4; ++steps) {
    Operation *def = v.getDefiningOp();
    auto op = dyn_cast_or_null<linalg::LinalgOp>(def);
    if (!op || !v.hasOneUse())
      return false;
    if (isRowParallel(op))
      return true;
    if (!isElementwise(def))
      return false;
    // The chain goes on through the input of the same shape that is not a
    // weight (the other one is the bias).
    Value next;
    for (Value input : op.getDpsInputs())
      if (input.getType() == v.getType() && !isWeight(input))
        next = input;
    if (!next)
      return false;
    v = next;
  }
  return false;
}

/// True if the linalg op `op` indexes dim `seqDim` of its result and of
/// every operand in `region` (or `v`) by one parallel loop.
bool readsOnePosition(linalg::LinalgOp op, Value v, int64_t seqDim,
                      const llvm::SmallPtrSetImpl<Value> &region) {
  AffineExpr loop =
      op.getIndexingMapMatchingResult(op->getOpResult(0)).getResult(seqDim);
  auto dim = dyn_cast<AffineDimExpr>(loop);
  if (!dim || op.getIteratorTypesArray()[dim.getPosition()] !=
                  utils::IteratorType::parallel)
    return false;
  for (OpOperand *input : op.getDpsInputOperands()) {
    if (input->get() != v && !region.contains(input->get()))
      continue;
    AffineMap map = op.getMatchingIndexingMap(input);
    if (map.getNumResults() <= seqDim || map.getResult(seqDim) != loop)
      return false;
  }
  return true;
}

/// True if `op` computes each position of the sequence from that position
/// alone, keeping the leading dims [.., seq] of `v`'s type: a reshape of the
/// trailing dims, or a linalg op whose result and every operand in `region`
/// (or `v`) index dim `seqDim` by one parallel loop.
bool isPerToken(Operation *op, Value v, int64_t seqDim,
                const llvm::SmallPtrSetImpl<Value> &region) {
  if (op->getNumResults() != 1)
    return false;
  auto vType = cast<RankedTensorType>(v.getType());
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || type.getRank() <= seqDim ||
      type.getShape().take_front(seqDim + 1) !=
          vType.getShape().take_front(seqDim + 1))
    return false;
  // Each leading dim keeps a group of its own, with unit dims at most.
  auto keepsLeading = [&](ArrayRef<ReassociationIndices> groups,
                          RankedTensorType expanded) {
    for (int64_t d = 0; d <= seqDim; ++d) {
      if (groups.size() <= size_t(d))
        return false;
      for (int64_t e : groups[d])
        if (expanded.getDimSize(e) != 1 &&
            expanded.getDimSize(e) != vType.getDimSize(d))
          return false;
    }
    return true;
  };
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return keepsLeading(expand.getReassociationIndices(),
                        expand.getResultType());
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return keepsLeading(collapse.getReassociationIndices(),
                        collapse.getSrcType());
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp && linalgOp.hasPureTensorSemantics() &&
         readsOnePosition(linalgOp, v, seqDim, region);
}

/// The value that a per-token computation on `v` closes in: the ops after
/// it that read it or each other, none mixing positions of the sequence
/// (isPerToken: a norm, whose reductions run over the hidden dim), until
/// one value of `v`'s type is all that the rest of the function reads of
/// them. So a norm between a block and its residual add (Gemma 2's and
/// OLMo 2's "sandwich" norms) is passed over: on a slice of the sequence it
/// computes the same rows. Null if the ops do not close so.
Value skipPerTokenOps(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return {};
  auto type = cast<RankedTensorType>(v.getType());
  int64_t seqDim = type.getRank() - 2;
  if (seqDim < 0)
    return {};
  llvm::SmallPtrSet<Value, 16> region;
  llvm::SmallPtrSet<Operation *, 16> ops;
  // Values of the region some op outside it has yet to read.
  llvm::SmallPtrSet<Value, 8> open = {v};
  for (Operation *op = def->getNextNode(); op && ops.size() < 24;
       op = op->getNextNode()) {
    bool reads = llvm::any_of(op->getOperands(), [&](Value operand) {
      return operand == v || region.contains(operand);
    });
    if (!reads)
      continue;
    if (!isPerToken(op, v, seqDim, region))
      return {};
    ops.insert(op);
    region.insert(op->getResult(0));
    open.insert(op->getResult(0));
    for (Value operand : op->getOperands())
      if (open.contains(operand) &&
          llvm::all_of(operand.getUsers(),
                       [&](Operation *user) { return ops.contains(user); }))
        open.erase(operand);
    if (open.size() == 1 && *open.begin() != v &&
        (*open.begin()).getType() == v.getType())
      return *open.begin();
  }
  return {};
}

/// The residual add after a row-parallel contraction: following single-use
/// elementwise ops (a bias add) and per-token computations that close in
/// one value (a norm: skipPerTokenOps), the first elementwise op with a
/// second activation input. Returns it and that other input. In a
/// parallel-residual block (GPT-NeoX, GPT-J: attention and MLP read the
/// same input) the two block outputs are added first; that add is passed
/// over, so that both blocks find the same residual add, after their sum.
std::optional<std::pair<Operation *, Value>> findResidualAdd(Operation *row) {
  Value v = row->getResult(0);
  for (int steps = 0; steps < 6; ++steps) {
    if (!v.hasOneUse()) {
      v = skipPerTokenOps(v);
      if (!v || !v.hasOneUse())
        return std::nullopt;
    }
    Operation *user = *v.getUsers().begin();
    if (!isElementwise(user))
      return std::nullopt;
    auto linalgOp = cast<linalg::LinalgOp>(user);
    for (Value input : linalgOp.getDpsInputs()) {
      if (input == v || input.getType() != v.getType())
        continue;
      // Another full activation, not a weight: the stream this block adds
      // to (a model input counts), unless it is another block's output.
      if (!isWeight(input) && !isRowParallelOutput(input))
        return std::make_pair(user, input);
    }
    v = user->getResult(0);
  }
  return std::nullopt;
}

/// True if `v` is already split on the sequence by another block that ends
/// in the same residual add (a producer annotation, not what its users read:
/// the plan marks results for the function's return that way).
bool isAnnotated(Value v) {
  return llvm::any_of(v.getUsers(), [](Operation *user) {
    auto shardOp = dyn_cast<shard::ShardOp>(user);
    return shardOp && !shardOp.getAnnotateForUsers();
  });
}

/// The activation operand of a contraction with a weight, if `op` is one.
OpOperand *getActivationOperand(linalg::LinalgOp op) {
  if (op.getNumDpsInputs() != 2 || !linalg::isaContractionOpInterface(op))
    return nullptr;
  bool lhs = isWeight(op.getDpsInputs()[0]);
  bool rhs = isWeight(op.getDpsInputs()[1]);
  if (lhs == rhs)
    return nullptr;
  return op.getDpsInputOperand(lhs ? 1 : 0);
}

/// True if `v` is computed from a stream marked as split on the sequence
/// through a few ops (a norm, say), without a contraction between.
bool readsSplitStream(Value v, llvm::SmallPtrSetImpl<Operation *> &seen,
                      int depth = 0) {
  Operation *def = v.getDefiningOp();
  if (!def || depth > 12 || !seen.insert(def).second)
    return false;
  if (auto split = dyn_cast<shard::ShardOp>(def))
    return !split.getAnnotateForUsers();
  auto op = dyn_cast<linalg::LinalgOp>(def);
  if (!op || linalg::isaContractionOpInterface(op))
    return false;
  return llvm::any_of(op.getDpsInputs(), [&](Value input) {
    return isa<RankedTensorType>(input.getType()) && !isWeight(input) &&
           readsSplitStream(input, seen, depth + 1);
  });
}

/// True if what `v` becomes is read whole on the sequence: through
/// reshapes and ops without reductions (a norm's scale, a view to heads, a
/// transpose), it reaches a column-parallel contraction (which gathers its
/// input) or a contraction of two activations (attention mixes positions).
bool isReadWhole(Value v, unsigned depth = 8) {
  for (Operation *user : v.getUsers()) {
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(user)) {
      if (depth > 0 && isReadWhole(user->getResult(0), depth - 1))
        return true;
      continue;
    }
    auto op = dyn_cast<linalg::LinalgOp>(user);
    if (!op || op->getNumResults() != 1)
      continue;
    if (linalg::isaContractionOpInterface(op)) {
      if (getSplitRole(op) == SplitRole::Column ||
          llvm::none_of(op.getDpsInputs(), isWeight))
        return true;
      continue;
    }
    if (op.getNumReductionLoops() == 0 && depth > 0 &&
        isReadWhole(op->getResult(0), depth - 1))
      return true;
  }
  return false;
}

/// A projection whose weight the plan keeps whole (K/V heads that the ranks
/// do not divide) beside a column-parallel one that reads the same
/// activation (the query projection): the column-parallel one gathers the
/// sequence, and the whole one reads that gathered activation too, as it
/// does without sequence parallelism. Left to propagation, it would read its
/// rank's slice of the sequence, and its result, which attention needs
/// whole, would be gathered by a collective of its own. So too for several
/// whole projections of one activation whose results are all read whole
/// (multi-query V and a shared Q-K bottleneck): one gather of their input
/// per block, as Megatron-LM's, not one of each result (which may move
/// somewhat fewer bytes when they are narrower than it, in more
/// collectives).
void gatherForWholeProjections(func::FuncOp func, shard::GridOp grid) {
  SmallVector<OpOperand *> reads;
  llvm::MapVector<Value, SmallVector<OpOperand *>> wholeReads;
  func.walk([&](linalg::LinalgOp op) {
    OpOperand *input = getActivationOperand(op);
    if (!input || getSplitRole(op) || op->hasAttr(TPDialect::kBackwardAttrName))
      return;
    if (llvm::any_of(input->get().getUsers(), [&](Operation *user) {
          auto other = dyn_cast<linalg::LinalgOp>(user);
          return other && other != op &&
                 getSplitRole(other) == SplitRole::Column;
        }))
      reads.push_back(input);
    else if (op->getNumResults() == 1 && isReadWhole(op->getResult(0)))
      wholeReads[input->get()].push_back(input);
  });
  for (auto &[activation, group] : wholeReads)
    if (group.size() > 1)
      reads.append(group.begin(), group.end());
  for (OpOperand *read : reads) {
    Operation *op = read->getOwner();
    OpBuilder b(op);
    auto type = cast<RankedTensorType>(read->get().getType());
    SmallVector<shard::GridAxesAttr> axes(type.getRank(),
                                          b.getDenseI16ArrayAttr({}));
    Value sharding = shard::ShardingOp::create(
        b, op->getLoc(), FlatSymbolRefAttr::get(grid.getSymNameAttr()), axes);
    read->set(shard::ShardOp::create(b, op->getLoc(), read->get(), sharding,
                                     /*annotate_for_users=*/true));
  }
}

struct PlanSequenceParallel
    : tp::impl::PlanSequenceParallelBase<PlanSequenceParallel> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    shard::GridOp grid = lookupGrid(module, GridRole::Tensor);
    if (!grid) {
      module.emitError() << "tp-plan-sequence-parallel: no shard.grid; run "
                            "tp-plan-tensor-parallel first";
      return signalPassFailure();
    }
    int64_t devices = 1;
    for (int64_t d : grid.getShape())
      devices *= d;
    module.walk([&](func::FuncOp func) {
      SmallVector<linalg::LinalgOp> rows;
      // Blocks of the forward: the backward (tp.backward ops) reads the
      // same weights, and follows the forward's splits through propagation.
      func.walk([&](linalg::LinalgOp op) {
        if (isRowParallel(op) && !op->hasAttr(TPDialect::kBackwardAttrName))
          rows.push_back(op);
      });
      gatherForWholeProjections(func, grid);
      for (linalg::LinalgOp row : rows)
        markResidualStream(row, grid, devices);
      // A projection whose weight the plan keeps whole acts on each token
      // alone: reading the split stream, it keeps the split, and so does
      // the residual add after it (a bottleneck's up projection, added to
      // the stream that its down projection read).
      SmallVector<linalg::LinalgOp> whole;
      func.walk([&](linalg::LinalgOp op) {
        OpOperand *input = getActivationOperand(op);
        llvm::SmallPtrSet<Operation *, 32> seen;
        if (input && !getSplitRole(op) &&
            !op->hasAttr(TPDialect::kBackwardAttrName) &&
            readsSplitStream(input->get(), seen))
          whole.push_back(op);
      });
      for (linalg::LinalgOp op : whole)
        if (findResidualAdd(op))
          markResidualStream(op, grid, devices);
    });
  }

  /// Marks the residual add after `block` and the stream it adds to as split
  /// on the sequence, if they are not yet.
  void markResidualStream(linalg::LinalgOp block, shard::GridOp grid,
                          int64_t devices) {
    auto residual = findResidualAdd(block);
    if (!residual) {
      emitWarning(block->getLoc())
          << "tp-plan-sequence-parallel: no residual add after this "
             "row-parallel block; it keeps its all-reduce";
      return;
    }
    auto [add, stream] = *residual;
    auto type = cast<RankedTensorType>(add->getResult(0).getType());
    int64_t seqDim = type.getRank() - 2;
    if (seqDim < 0 || type.getDimSize(seqDim) % devices != 0) {
      emitWarning(add->getLoc())
          << "tp-plan-sequence-parallel: sequence dim of " << type
          << " does not divide by " << devices
          << " devices; this block keeps its all-reduce";
      return;
    }
    if (isAnnotated(add->getResult(0)))
      return;
    splitOnSequence(add->getResult(0), grid, seqDim);
    if (stream.getDefiningOp<shard::ShardOp>())
      return;
    // A vocabulary-parallel lookup already splits a loop on the grid axis:
    // a copy of its result carries the sequence split, so that its
    // all-reduce becomes a reduce-scatter. (Its users cannot ask for the
    // split themselves: in a post-norm model the first Q/K/V projections
    // read the lookup directly, and a column-parallel contraction cannot
    // read a sequence split as its users' demand.)
    Operation *def = stream.getDefiningOp();
    if (def && def->hasAttr(TPDialect::kEmbeddingAttrName))
      stream = copyForUsers(stream);
    splitOnSequence(stream, grid, seqDim);
    readWeightsOnSequence(stream, grid, seqDim);
  }

  /// The weights that the op computing `stream` reads along its sequence
  /// dim `seqDim` (a position table added to the embeddings, as Whisper's
  /// encoder adds its sinusoids) are read split there too: each rank reads
  /// the rows of its own positions. The plan reads every whole weight
  /// through a replicated annotation, which sharding propagation cannot
  /// reconcile with a result split on a loop that the weight reads.
  static void readWeightsOnSequence(Value stream, shard::GridOp grid,
                                    int64_t seqDim) {
    auto op = stream.getDefiningOp<linalg::GenericOp>();
    if (!op || !isElementwise(op))
      return;
    for (OpOperand *input : op.getDpsInputOperands()) {
      if (!isWeight(input->get()))
        continue;
      AffineMap map = op.getMatchingIndexingMap(input);
      std::optional<unsigned> dim =
          map.getResultPosition(getAffineDimExpr(seqDim, op.getContext()));
      auto type = cast<RankedTensorType>(input->get().getType());
      if (!dim ||
          type.getDimSize(*dim) !=
              cast<RankedTensorType>(stream.getType()).getDimSize(seqDim))
        continue;
      OpBuilder b(op);
      SmallVector<shard::GridAxesAttr> axes(*dim, b.getDenseI16ArrayAttr({}));
      axes.push_back(b.getDenseI16ArrayAttr({0}));
      Value sharding = shard::ShardingOp::create(
          b, op.getLoc(), FlatSymbolRefAttr::get(grid.getSymNameAttr()), axes);
      input->set(shard::ShardOp::create(b, op.getLoc(), input->get(), sharding,
                                        /*annotate_for_users=*/true));
    }
  }

  /// An identity copy of `v` that all its users read instead.
  static Value copyForUsers(Value v) {
    OpBuilder b(v.getContext());
    b.setInsertionPointAfterValue(v);
    auto type = cast<RankedTensorType>(v.getType());
    Location loc = v.getLoc();
    Value init =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    auto copy = linalg::CopyOp::create(b, loc, v, init);
    v.replaceAllUsesExcept(copy->getResult(0), copy);
    return copy->getResult(0);
  }

  /// Annotates `v` as split on `dim`.
  void splitOnSequence(Value v, shard::GridOp grid, int64_t dim) {
    OpBuilder b(v.getContext());
    b.setInsertionPointAfterValue(v);
    SmallVector<shard::GridAxesAttr> axes;
    for (int64_t d = 0; d < dim; ++d)
      axes.push_back(b.getDenseI16ArrayAttr({}));
    axes.push_back(b.getDenseI16ArrayAttr({0}));
    Value sharding = shard::ShardingOp::create(
        b, v.getLoc(), FlatSymbolRefAttr::get(grid.getSymNameAttr()), axes);
    auto shardOp = shard::ShardOp::create(b, v.getLoc(), v, sharding,
                                          /*annotate_for_users=*/false);
    v.replaceAllUsesExcept(shardOp.getResult(), shardOp);
  }
};

} // namespace
