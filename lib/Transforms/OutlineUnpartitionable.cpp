//===- OutlineUnpartitionable.cpp - tp-outline-unpartitionable ------------===//
//
// Upstream partition knows only linalg ops with projected-permutation maps;
// a convolution (maps like d2 + d6) is rejected outright. Such an op runs
// replicated here: it is moved into a private function and called with
// replicated annotations, which partition copies untouched; `inline` after
// partition restores it. One that the plan splits on a loop no window reads
// (tp.split_loop: a depthwise convolution's channels) is called with split
// annotations instead, and given a second callee with one rank's shapes,
// which partition calls (tp.local_callee).
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::tp {
#define GEN_PASS_DEF_OUTLINEUNPARTITIONABLE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

bool isUnpartitionable(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp &&
         llvm::any_of(linalgOp.getIndexingMapsArray(), [](AffineMap map) {
           return !map.isProjectedPermutation();
         });
}

bool isShardedTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() > 0;
}

/// The dim of each operand and result of `op` that reads its loop `loop`
/// (-1 where none does), if each such dim is static and divides by
/// `ranks`; the plan has checked that no window reads the loop.
std::optional<SmallVector<int64_t>> getSplitDims(linalg::LinalgOp op,
                                                 unsigned loop, int64_t ranks) {
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  for (OpOperand &init : op.getDpsInitsMutable())
    maps.push_back(op.getMatchingIndexingMap(&init));
  SmallVector<Type> types(op->getOperandTypes());
  llvm::append_range(types, op->getResultTypes());
  SmallVector<int64_t> dims;
  for (auto [map, type] : llvm::zip_equal(maps, types)) {
    dims.push_back(-1);
    for (auto [i, expr] : llvm::enumerate(map.getResults())) {
      if (!expr.isFunctionOfDim(loop))
        continue;
      int64_t size = cast<ShapedType>(type).getDimSize(i);
      if (dims.back() != -1 || ShapedType::isDynamic(size) || size % ranks)
        return std::nullopt;
      dims.back() = static_cast<int64_t>(i);
    }
  }
  return dims;
}

RankedTensorType withLocalDim(Type type, int64_t dim, int64_t ranks) {
  auto tensor = cast<RankedTensorType>(type);
  if (dim < 0)
    return tensor;
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] /= ranks;
  return tensor.clone(shape);
}

struct OutlineUnpartitionable
    : tp::impl::OutlineUnpartitionableBase<OutlineUnpartitionable> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    shard::GridOp grid = lookupGrid(module, GridRole::Tensor);
    if (!grid)
      return; // Nothing is planned, nothing will be partitioned.
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isUnpartitionable(op))
        ops.push_back(op);
    });
    SymbolTable symbols(module);
    for (auto [i, op] : llvm::enumerate(ops))
      outline(op, grid, symbols, i);
  }

  /// Replicated for `dim` < 0, else split on `dim` over the 1-D grid.
  Value sharding(OpBuilder &b, Location loc, shard::GridOp grid,
                 int64_t dim = -1) {
    SmallVector<shard::GridAxesAttr> axes(std::max<int64_t>(dim, 0),
                                          b.getDenseI16ArrayAttr({}));
    axes.push_back(b.getDenseI16ArrayAttr(dim < 0 ? ArrayRef<int16_t>{}
                                                  : ArrayRef<int16_t>{0}));
    return shard::ShardingOp::create(
        b, loc, FlatSymbolRefAttr::get(grid.getSymNameAttr()), axes);
  }

  /// The split dim of each of `inputs` and of `op`'s results (-1: whole)
  /// if `op` is planned to split on a loop and can; empty otherwise.
  SmallVector<int64_t> planSplitDims(Operation *op,
                                     const SetVector<Value> &inputs,
                                     shard::GridOp grid) {
    auto loop = op->getAttrOfType<IntegerAttr>(TPDialect::kSplitLoopAttrName);
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (!loop || !linalgOp || grid.getShape().size() != 1)
      return {};
    std::optional<SmallVector<int64_t>> dims =
        getSplitDims(linalgOp, loop.getInt(), grid.getShape()[0]);
    if (!dims)
      return {};
    // An input passed twice must split the same way both times.
    DenseMap<Value, int64_t> byValue;
    for (auto [operand, dim] : llvm::zip(op->getOperands(), *dims))
      if (!byValue.try_emplace(operand, dim).second && byValue[operand] != dim)
        return {};
    SmallVector<int64_t> split;
    for (Value v : inputs)
      split.push_back(byValue.lookup_or(v, -1));
    for (int64_t i = op->getNumOperands(); i < (int64_t)dims->size(); ++i)
      split.push_back((*dims)[i]);
    return split;
  }

  /// A copy of `callee` with one rank's part of each split dim.
  func::FuncOp createLocalCallee(func::FuncOp callee, ArrayRef<int64_t> split,
                                 int64_t ranks, SymbolTable &symbols) {
    func::FuncOp local = callee.clone();
    local.setName((callee.getName() + "_local").str());
    symbols.insert(local, ++Block::iterator(callee));
    Block &entry = local.getBody().front();
    for (auto [arg, dim] : llvm::zip(entry.getArguments(), split))
      if (dim >= 0)
        arg.setType(withLocalDim(arg.getType(), dim, ranks));
    Operation &op = entry.front();
    ArrayRef<int64_t> resultSplit = split.take_back(op.getNumResults());
    for (auto [result, dim] : llvm::zip(op.getResults(), resultSplit))
      result.setType(withLocalDim(result.getType(), dim, ranks));
    local.setType(FunctionType::get(
        local.getContext(), entry.getArgumentTypes(), op.getResultTypes()));
    return local;
  }

  void outline(Operation *op, shard::GridOp grid, SymbolTable &symbols,
               size_t index) {
    Location loc = op->getLoc();
    // Arguments: the operands, then values the body reads from outside.
    SetVector<Value> inputs(op->getOperands().begin(), op->getOperands().end());
    for (Region &region : op->getRegions())
      getUsedValuesDefinedAbove(region, inputs);

    OpBuilder moduleBuilder(op->getParentOfType<func::FuncOp>());
    auto type = moduleBuilder.getFunctionType(
        llvm::to_vector(
            llvm::map_range(inputs, [](Value v) { return v.getType(); })),
        op->getResultTypes());
    auto callee = func::FuncOp::create(
        moduleBuilder, loc, ("tp_replicated_" + Twine(index)).str(), type);
    callee.setPrivate();
    symbols.insert(callee);
    Block *entry = callee.addEntryBlock();
    OpBuilder inner = OpBuilder::atBlockEnd(entry);
    IRMapping mapping;
    for (auto [value, arg] : llvm::zip(inputs, entry->getArguments()))
      mapping.map(value, arg);
    Operation *clone = inner.clone(*op, mapping);
    clone->removeAttr(TPDialect::kSplitLoopAttrName);
    func::ReturnOp::create(inner, loc, clone->getResults());

    // The call reads and writes replicated tensors, or the split the plan
    // chose, with a callee for one rank's part.
    SmallVector<int64_t> split = planSplitDims(op, inputs, grid);
    if (split.empty())
      split.assign(inputs.size() + op->getNumResults(), -1);
    OpBuilder b(op);
    SmallVector<Value> args;
    for (auto [v, dim] : llvm::zip(inputs, split)) {
      if (!isShardedTensor(v.getType())) {
        args.push_back(v);
        continue;
      }
      args.push_back(shard::ShardOp::create(b, loc, v,
                                            sharding(b, loc, grid, dim),
                                            /*annotate_for_users=*/true));
    }
    auto call = func::CallOp::create(b, loc, callee, args);
    if (llvm::any_of(split, [](int64_t dim) { return dim >= 0; })) {
      func::FuncOp local =
          createLocalCallee(callee, split, grid.getShape()[0], symbols);
      call->setAttr(TPDialect::kLocalCalleeAttrName,
                    FlatSymbolRefAttr::get(local.getNameAttr()));
    }
    ArrayRef<int64_t> resultSplit =
        ArrayRef<int64_t>(split).take_back(op->getNumResults());
    for (auto [result, callResult, dim] :
         llvm::zip(op->getResults(), call.getResults(), resultSplit)) {
      if (!isShardedTensor(callResult.getType())) {
        result.replaceAllUsesWith(callResult);
        continue;
      }
      auto annotated = shard::ShardOp::create(b, loc, callResult,
                                              sharding(b, loc, grid, dim),
                                              /*annotate_for_users=*/false);
      result.replaceAllUsesWith(annotated.getResult());
    }
    op->erase();
  }
};

} // namespace
