//===- PlanPipeline.cpp - tp-plan-pipeline --------------------------------===//
//
// Pipeline parallelism: @main is cut where a single activation is live
// (between layers), into stage functions balanced by FLOPs that hand the
// activation on with shard.send / shard.recv.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::tp {
#define GEN_PASS_DEF_PLANPIPELINE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

constexpr StringLiteral kPipelineGrid = "pipeline";

/// Multiply-adds count twice; other linalg ops once per point.
int64_t countFlops(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp)
    return 0;
  int64_t points = 1;
  for (int64_t range : linalgOp.getStaticLoopRanges())
    points *= ShapedType::isDynamic(range) ? 1 : range;
  return linalgOp.getNumReductionLoops() > 0 ? 2 * points : points;
}

/// Cheap ops that read only function arguments or other such ops
/// (constants, fills, a rank's slice of a weight, the partial-sum init that
/// partition selects by rank) are copied into every stage that reads them
/// instead of being sent. CSE shares such values across layers, so they
/// would otherwise cross every cut.
bool isRematerializable(Operation *op) {
  if (op->getNumResults() != 1 ||
      !isa<arith::ConstantOp, arith::CmpIOp, tensor::EmptyOp,
           tensor::ExtractSliceOp, tensor::ExpandShapeOp,
           tensor::CollapseShapeOp, linalg::FillOp, shard::AllSliceOp,
           shard::ProcessMultiIndexOp, shard::ProcessLinearIndexOp, scf::IfOp,
           scf::YieldOp>(op))
    return false;
  auto fromArgOrRemat = [](Value v) {
    Operation *def = v.getDefiningOp();
    return !def || isRematerializable(def);
  };
  if (!llvm::all_of(op->getOperands(), fromArgOrRemat))
    return false;
  // An scf.if qualifies if its branches only yield such values.
  if (!isa<scf::IfOp>(op))
    return true;
  for (Region &region : op->getRegions())
    for (Operation &nested : region.getOps())
      if (auto yield = dyn_cast<scf::YieldOp>(nested)) {
        if (!llvm::all_of(yield.getOperands(), fromArgOrRemat))
          return false;
      } else if (nested.getNumResults() != 1 || !isRematerializable(&nested)) {
        return false;
      }
  return true;
}

struct PlanPipeline : tp::impl::PlanPipelineBase<PlanPipeline> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal()) {
      module.emitError() << "tp-plan-pipeline: no @main to cut";
      return signalPassFailure();
    }
    if (stages < 1 || microbatches < 1) {
      module.emitError() << "tp-plan-pipeline: stages and microbatches must "
                            "be >= 1, got "
                         << static_cast<int64_t>(stages) << " and "
                         << static_cast<int64_t>(microbatches);
      return signalPassFailure();
    }
    if (SymbolTable::lookupSymbolIn(module, kPipelineGrid)) {
      module.emitError() << "tp-plan-pipeline: the module already has a "
                            "symbol '@"
                         << kPipelineGrid << "'";
      return signalPassFailure();
    }
    Block &body = main.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    int64_t n = ops.size();
    DenseMap<Operation *, int64_t> index;
    for (auto [i, op] : llvm::enumerate(ops))
      index[op] = i;

    // live[c]: activations defined before op c and used at or after it.
    SmallVector<SmallVector<Value, 1>> live(n + 1);
    SmallVector<int64_t> flops(n + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      flops[i + 1] = flops[i] + countFlops(ops[i]);
      if (isRematerializable(ops[i]))
        continue;
      for (Value v : ops[i]->getResults()) {
        int64_t last = i;
        for (Operation *user : v.getUsers()) {
          Operation *top = body.findAncestorOpInBlock(*user);
          last = std::max(last, top && index.count(top) ? index[top] : n);
        }
        for (int64_t c = i + 1; c <= last && c <= n; ++c)
          live[c].push_back(v);
      }
    }
    // Block boundaries: right after each residual add (what a transformer
    // layer's attention and MLP blocks end in), where the residual stream
    // and whatever every layer reads (an attention mask) are live.
    auto interior = [&](int64_t c) {
      return flops[c] > 0 && flops[c] < flops[n] &&
             llvm::all_of(live[c], [](Value v) {
               return isa<RankedTensorType>(v.getType());
             });
    };
    SmallVector<int64_t> cuts;
    for (int64_t i = 0; i < n; ++i)
      if (isResidualAdd(ops[i]) && interior(i + 1))
        cuts.push_back(i + 1);
    // A model without residual blocks (a plain CNN) is cut where a single
    // activation is live: between its layers.
    StringRef kind = "block boundaries (residual adds)";
    if (cuts.empty()) {
      for (int64_t c = 1; c < n; ++c)
        if (interior(c) && live[c].size() == 1)
          cuts.push_back(c);
      kind = "points where one activation is live (no residual adds)";
    }
    if (static_cast<int64_t>(cuts.size()) < stages - 1) {
      main.emitError() << "tp-plan-pipeline: @main has " << cuts.size() << " "
                       << kind << ", too few for "
                       << static_cast<int64_t>(stages) << " stages (at most "
                       << cuts.size() + 1 << ")";
      return signalPassFailure();
    }
    // Greedy: stage k ends at the boundary nearest k/P of the FLOPs, or at
    // the boundaries given.
    SmallVector<int64_t> bounds = {0};
    if (!boundaries.empty()) {
      if (static_cast<int64_t>(boundaries.size()) != stages - 1 ||
          llvm::any_of(llvm::seq<size_t>(0, boundaries.size()), [&](size_t i) {
            int64_t ordinal = boundaries[i];
            return ordinal < 0 ||
                   ordinal >= static_cast<int64_t>(cuts.size()) ||
                   (i > 0 && ordinal <= boundaries[i - 1]);
          })) {
        main.emitError() << "tp-plan-pipeline: boundaries must be "
                         << stages - 1 << " increasing ordinals below "
                         << cuts.size() << " (the " << kind << ")";
        return signalPassFailure();
      }
      for (int64_t ordinal : boundaries)
        bounds.push_back(cuts[ordinal]);
    }
    for (int64_t k = 1; k < stages && boundaries.empty(); ++k) {
      double target = static_cast<double>(flops[n]) * k / stages;
      int64_t best = -1;
      for (int64_t c : cuts) {
        if (c <= bounds.back())
          continue;
        // Leave enough boundaries for the stages still to come.
        int64_t after = llvm::count_if(cuts, [&](int64_t x) { return x > c; });
        if (after < stages - 1 - k)
          break;
        if (best < 0 ||
            std::abs(flops[c] - target) < std::abs(flops[best] - target))
          best = c;
      }
      bounds.push_back(best);
    }
    bounds.push_back(n);

    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToStart(module.getBody());
    setGridRole(shard::GridOp::create(b, module.getLoc(), kPipelineGrid,
                                      ArrayRef<int64_t>{stages}),
                GridRole::Pipeline);
    SmallVector<Attribute> stageFlops, chosen;
    for (int64_t k = 1; k < stages; ++k)
      chosen.push_back(
          b.getI64IntegerAttr(llvm::find(cuts, bounds[k]) - cuts.begin()));
    b.setInsertionPoint(main);
    for (int64_t k = 0; k < stages; ++k) {
      buildStage(b, main, ops, bounds[k], bounds[k + 1], k,
                 k > 0 ? ArrayRef<Value>(live[bounds[k]]) : ArrayRef<Value>(),
                 k + 1 < stages ? ArrayRef<Value>(live[bounds[k + 1]])
                                : ArrayRef<Value>());
      stageFlops.push_back(
          b.getI64IntegerAttr(flops[bounds[k + 1]] - flops[bounds[k]]));
    }
    module->setAttr(
        TPDialect::kPipelineAttrName,
        b.getDictionaryAttr(
            {b.getNamedAttr("stages", b.getI64IntegerAttr(stages)),
             b.getNamedAttr("microbatches", b.getI64IntegerAttr(microbatches)),
             b.getNamedAttr("schedule", b.getStringAttr("1f1b")),
             b.getNamedAttr("flops", b.getArrayAttr(stageFlops)),
             b.getNamedAttr("boundaries", b.getArrayAttr(chosen))}));
    main.erase();
  }

  /// Builds @main_stage<k> from ops[begin, end).
  void buildStage(OpBuilder &b, func::FuncOp main, ArrayRef<Operation *> ops,
                  int64_t begin, int64_t end, int64_t k, ArrayRef<Value> inputs,
                  ArrayRef<Value> outputs) {
    Location loc = main.getLoc();
    MLIRContext *ctx = main.getContext();
    bool last = end == static_cast<int64_t>(ops.size());
    // Arguments: the @main arguments this stage reads, in order, directly
    // or through the cheap ops it copies in.
    llvm::SetVector<BlockArgument> args;
    SetVector<Operation *> inStage(ops.begin() + begin, ops.begin() + end);
    Block &mainBody = main.getBody().front();
    std::function<void(Operation *)> collect = [&](Operation *op) {
      op->walk([&](Operation *nested) {
        for (Value v : nested->getOperands()) {
          if (auto arg = dyn_cast<BlockArgument>(v)) {
            if (arg.getOwner() == &mainBody)
              args.insert(arg);
            continue;
          }
          Operation *def = v.getDefiningOp();
          if (def && def->getBlock() == &mainBody && !inStage.contains(def) &&
              isRematerializable(def))
            collect(def);
        }
      });
    };
    for (Operation *op : inStage)
      collect(op);
    Operation *ret = mainBody.getTerminator();
    if (last)
      collect(ret);
    SmallVector<Type> argTypes;
    for (BlockArgument arg : args)
      argTypes.push_back(arg.getType());
    auto stage = func::FuncOp::create(b, loc, ("main_stage" + Twine(k)).str(),
                                      b.getFunctionType(argTypes, {}));
    stage->setAttr(TPDialect::kStageAttrName, b.getI64IntegerAttr(k));
    Block *entry = stage.addEntryBlock();
    OpBuilder sb = OpBuilder::atBlockEnd(entry);
    IRMapping map;
    for (auto [i, arg] : llvm::enumerate(args)) {
      map.map(arg, entry->getArgument(i));
      stage.setArgAttrs(i, main.getArgAttrDict(arg.getArgNumber()));
    }
    auto grid = FlatSymbolRefAttr::get(ctx, kPipelineGrid);
    auto axes = sb.getDenseI16ArrayAttr({0});
    for (Value input : inputs) {
      auto type = cast<RankedTensorType>(input.getType());
      Value buffer = tensor::EmptyOp::create(sb, loc, type.getShape(),
                                             type.getElementType());
      auto recv =
          shard::RecvOp::create(sb, loc, type, grid, axes, buffer,
                                sb.getDenseI64ArrayAttr({k - 1}), ValueRange{});
      map.map(input, recv.getResult());
    }
    // Copy the cheap producers from earlier stages that this one reads,
    // their own operands first.
    std::function<void(Operation *)> rematerialize = [&](Operation *op) {
      op->walk([&](Operation *nested) {
        for (Value v : nested->getOperands()) {
          Operation *def = v.getDefiningOp();
          if (!def || map.contains(v) || def->getBlock() != &mainBody ||
              inStage.contains(def) || !isRematerializable(def))
            continue;
          rematerialize(def);
          sb.clone(*def, map);
        }
      });
    };
    for (Operation *op : inStage) {
      rematerialize(op);
      sb.clone(*op, map);
    }
    SmallVector<Value> results;
    if (last) {
      rematerialize(ret);
      for (Value v : ret->getOperands())
        results.push_back(map.lookup(v));
    } else {
      // The activations live after this stage go to the next one.
      for (Value out : outputs) {
        auto send = shard::SendOp::create(
            sb, loc, out.getType(), grid, axes, map.lookup(out),
            sb.getDenseI64ArrayAttr({k + 1}), ValueRange{});
        results.push_back(send.getResult());
      }
    }
    func::ReturnOp::create(sb, loc, results);
    stage.setType(b.getFunctionType(argTypes, ValueRange(results).getTypes()));
    if (last)
      for (unsigned i = 0; i < results.size(); ++i)
        if (DictionaryAttr attrs = main.getResultAttrDict(i))
          stage.setResultAttrs(i, attrs);
  }
};

} // namespace
