//===- PlanSequenceParallel.cpp - tp-plan-sequence-parallel ---------------===//
//
// Sequence parallelism as Megatron-LM does it: between tensor-parallel
// blocks every rank holds a slice of the sequence instead of all of it.
// The pass marks the residual stream, found by structure (the residual add
// after each row-parallel contraction, and the stream it adds to), as split
// on the sequence dim; propagation carries the split through the norms.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::tp {
#define GEN_PASS_DEF_PLANSEQUENCEPARALLEL
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// True if `op` reads a weight that the tensor-parallel plan split as row.
bool isRowParallel(linalg::LinalgOp op) {
  if (op.getNumReductionLoops() == 0)
    return false;
  for (Value input : op.getDpsInputs()) {
    auto shardOp = input.getDefiningOp<shard::ShardOp>();
    if (!shardOp)
      continue;
    // The plan's layout is on the weight argument, or on the op that reads
    // it (a zero pad of a padded weight).
    if (LayoutAttr layout = getLayout(shardOp.getSrc());
        layout && layout.getRole() == SplitRole::Row)
      return true;
  }
  return false;
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

/// The residual add after a row-parallel contraction: following single-use
/// elementwise ops (a bias add), the first one with a second activation
/// input. Returns it and that other input. In a parallel-residual block
/// (GPT-NeoX, GPT-J: attention and MLP read the same input) the two block
/// outputs are added first; that add is passed over, so that both blocks
/// find the same residual add, after their sum.
std::optional<std::pair<Operation *, Value>> findResidualAdd(Operation *row) {
  Value v = row->getResult(0);
  for (int steps = 0; steps < 6 && v.hasOneUse(); ++steps) {
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

struct PlanSequenceParallel
    : tp::impl::PlanSequenceParallelBase<PlanSequenceParallel> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grids = module.getOps<shard::GridOp>();
    if (grids.empty()) {
      module.emitError() << "tp-plan-sequence-parallel: no shard.grid; run "
                            "tp-plan-tensor-parallel first";
      return signalPassFailure();
    }
    shard::GridOp grid = *grids.begin();
    int64_t devices = 1;
    for (int64_t d : grid.getShape())
      devices *= d;
    module.walk([&](func::FuncOp func) {
      SmallVector<linalg::LinalgOp> rows;
      func.walk([&](linalg::LinalgOp op) {
        if (isRowParallel(op))
          rows.push_back(op);
      });
      for (linalg::LinalgOp row : rows) {
        auto residual = findResidualAdd(row);
        if (!residual) {
          emitWarning(row->getLoc())
              << "tp-plan-sequence-parallel: no residual add "
                 "after this row-parallel block; it keeps its "
                 "all-reduce";
          continue;
        }
        auto [add, stream] = *residual;
        auto type = cast<RankedTensorType>(add->getResult(0).getType());
        int64_t seqDim = type.getRank() - 2;
        if (seqDim < 0 || type.getDimSize(seqDim) % devices != 0) {
          emitWarning(add->getLoc())
              << "tp-plan-sequence-parallel: sequence dim of " << type
              << " does not divide by " << devices
              << " devices; this block keeps its all-reduce";
          continue;
        }
        if (isAnnotated(add->getResult(0)))
          continue;
        splitOnSequence(add->getResult(0), grid, seqDim);
        // A vocabulary-parallel lookup already splits a loop on the grid
        // axis; its users, not the lookup, ask for the sequence split, so
        // that its all-reduce becomes a reduce-scatter.
        Operation *def = stream.getDefiningOp();
        bool forUsers = def && def->hasAttr(TPDialect::kEmbeddingAttrName);
        if (!stream.getDefiningOp<shard::ShardOp>())
          splitOnSequence(stream, grid, seqDim, forUsers);
      }
    });
  }

  /// Annotates `v` as split on `dim`: its producer, or with `forUsers` only
  /// what its users read.
  void splitOnSequence(Value v, shard::GridOp grid, int64_t dim,
                       bool forUsers = false) {
    OpBuilder b(v.getContext());
    b.setInsertionPointAfterValue(v);
    SmallVector<shard::GridAxesAttr> axes;
    for (int64_t d = 0; d < dim; ++d)
      axes.push_back(b.getDenseI16ArrayAttr({}));
    axes.push_back(b.getDenseI16ArrayAttr({0}));
    Value sharding = shard::ShardingOp::create(
        b, v.getLoc(), FlatSymbolRefAttr::get(grid.getSymNameAttr()), axes);
    auto shardOp = shard::ShardOp::create(b, v.getLoc(), v, sharding,
                                          /*annotate_for_users=*/forUsers);
    v.replaceAllUsesExcept(shardOp.getResult(), shardOp);
  }
};

} // namespace
