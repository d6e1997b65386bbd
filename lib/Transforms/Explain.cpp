//===- Explain.cpp - tp-explain -------------------------------------------===//
//
// Reads a partitioned module back to the user: which weights split, which
// collectives run and how many bytes each rank moves, what stayed
// replicated and why, and what a rank holds. The cost model is the
// textbook ring one: all-reduce 2·A·(t−1)/t, all-gather and reduce-scatter
// A·(t−1)/t per rank for an activation of A bytes on t ranks.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/TensorParallelPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_EXPLAIN
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

int64_t bytesOf(Type type) {
  auto shaped = dyn_cast<RankedTensorType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  return shaped.getNumElements() *
         llvm::divideCeil(shaped.getElementTypeBitWidth(), 8);
}

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

/// The ONNX node an op came from (its NameLoc; imported IR printed with
/// -mlir-print-debuginfo keeps them), else the location as printed.
std::string nodeName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (auto name = dyn_cast<NameLoc>(inner))
        return name.getName().str();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return llvm::formatv("{0}:{1}", file.getFilename(), file.getLine()).str();
  return "?";
}

struct WeightInfo {
  /// The initializer, and how this argument is named: the initializer's
  /// name, or its range for a piece of a fused weight.
  std::string initializer, name, localType;
  SplitRole role = SplitRole::Replicated;
  int64_t block = -1, localBytes = 0;
  /// A piece: its range of the initializer along `sliceDim`.
  int64_t sliceDim = -1, sliceOffset = 0, sliceSize = 0;
  /// `padded = [V, P]`: the split dim's original and padded sizes, and the
  /// bytes of zeros that padding adds across all ranks.
  int64_t original = 0, padded = 0, paddingBytes = 0;
};

/// The plan's block of `v`'s layout; -1 if none.
int64_t getBlock(Value v) {
  LayoutAttr layout = getLayout(v);
  return layout ? layout.getBlock() : -1;
}

struct CollectiveInfo {
  std::string kind, type, node;
  int64_t activationBytes = 0, movedBytes = 0, block = -1;
};

/// The block of the nearest weight an op reads, walking producers back a
/// few steps (a collective follows the contraction it completes).
int64_t findBlock(Value v, func::FuncOp func, unsigned depth = 6) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getOwner()->getParentOp() == func ? getBlock(arg) : -1;
  Operation *def = v.getDefiningOp();
  if (!def || depth == 0)
    return -1;
  if (int64_t block = getBlock(v); block >= 0)
    return block;
  for (Value operand : def->getOperands())
    if (int64_t b = findBlock(operand, func, depth - 1); b >= 0)
      return b;
  return -1;
}

/// The block of the nearest weight read by an op that consumes `v`: an
/// all-gather belongs to the block it feeds.
int64_t findBlockForward(Value v, func::FuncOp func, unsigned depth = 4) {
  for (Operation *user : v.getUsers()) {
    for (Value operand : user->getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner()->getParentOp() != func)
        continue;
      if (int64_t block = getBlock(arg); block >= 0)
        return block;
    }
    if (depth > 0)
      for (Value result : user->getResults())
        if (int64_t b = findBlockForward(result, func, depth - 1); b >= 0)
          return b;
  }
  return -1;
}

/// A model output each rank returns its block of (tp-split-outputs).
struct SplitOutputInfo {
  std::string name, localType;
  int64_t dim, size;
};

/// What a training program (tp-differentiate's `tp.backward` ops) holds
/// per rank besides the weights: the gradients it returns, counted as each
/// rank computes them (before an output's gather), and the stash, the
/// forward values the backward reads.
struct TrainingMemory {
  bool backward = false;
  int64_t gradientBytes = 0, stashBytes = 0, stashValues = 0;
  /// tp-recompute-layers: the stash before it, and the ops it copied; -1
  /// when it did not run.
  int64_t stashWithoutRecompute = -1, recomputedOps = 0;
};

TrainingMemory getTrainingMemory(func::FuncOp func) {
  TrainingMemory memory;
  Block &block = func.getBody().front();
  // The backward follows the forward in the block; constants may have
  // been hoisted or shared, so the first non-constant backward op marks
  // where it starts.
  Operation *start = nullptr;
  for (Operation &op : block)
    if (op.hasAttr(TPDialect::kBackwardAttrName) &&
        !op.hasTrait<OpTrait::ConstantLike>()) {
      start = &op;
      break;
    }
  if (!start)
    return memory;
  memory.backward = true;
  llvm::DenseSet<Value> stash;
  for (Operation *op = start; op; op = op->getNextNode())
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || def->getBlock() != &block || !def->isBeforeInBlock(start) ||
          def->hasTrait<OpTrait::ConstantLike>() ||
          !isa<RankedTensorType>(operand.getType()))
        continue;
      if (stash.insert(operand).second)
        memory.stashBytes += bytesOf(operand.getType());
    }
  memory.stashValues = stash.size();
  if (auto before = func->getAttrOfType<IntegerAttr>(
          TPDialect::kStashWithoutRecomputeAttrName))
    memory.stashWithoutRecompute = before.getInt();
  func.walk([&](Operation *op) {
    if (op->hasAttr(TPDialect::kRecomputedAttrName))
      ++memory.recomputedOps;
  });
  Operation *ret = block.getTerminator();
  for (OpOperand &operand : ret->getOpOperands()) {
    auto name = func.getResultAttrOfType<StringAttr>(
        operand.getOperandNumber(), TPDialect::kOutputAttrName);
    if (!name || !name.getValue().starts_with("grad."))
      continue;
    Value g = operand.get();
    if (auto gather = g.getDefiningOp<shard::AllGatherOp>())
      g = gather.getInput();
    memory.gradientBytes += bytesOf(g.getType());
  }
  return memory;
}

SmallVector<SplitOutputInfo> getSplitOutputs(func::FuncOp func) {
  SmallVector<SplitOutputInfo> splits;
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    auto split = func.getResultAttrOfType<SplitOutputAttr>(
        i, TPDialect::kSplitOutputAttrName);
    auto name =
        func.getResultAttrOfType<StringAttr>(i, TPDialect::kOutputAttrName);
    if (!split || !name)
      continue;
    std::string type;
    llvm::raw_string_ostream(type) << func.getResultTypes()[i];
    splits.push_back(
        {name.getValue().str(), type, split.getDim(), split.getSize()});
  }
  return splits;
}

struct Explain : tp::impl::ExplainBase<Explain> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Bytes are per tensor-parallel group: the size of its grid. Pipeline
    // stages talk point to point.
    int64_t devices = 1;
    std::string gridName;
    if (shard::GridOp grid = lookupGrid(module, GridRole::Tensor)) {
      gridName = grid.getSymName().str();
      for (int64_t d : grid.getShape())
        devices *= d;
    }
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file = openOutputFile(output, &error);
    if (!file) {
      module.emitError("tp-explain: ") << error;
      return signalPassFailure();
    }
    os = &file->os();
    module.walk([&](func::FuncOp func) {
      if (!func.isExternal())
        explain(func, devices, gridName);
    });
    file->keep();
    markAllAnalysesPreserved();
  }

  /// Where the report goes (`output`).
  llvm::raw_ostream *os = nullptr;

  void explain(func::FuncOp func, int64_t devices, StringRef gridName) {
    std::vector<WeightInfo> weights;
    int64_t weightBytes = 0, modelBytes = 0;
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    TPDialect::kWeightAttrName);
      if (!name)
        continue;
      WeightInfo w;
      w.initializer = name.str();
      LayoutAttr layout = getLayout(func, arg.getArgNumber());
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      w.name = getPieceName(w.initializer, layout, type ? type.getRank() : 0);
      if (layout) {
        w.role = layout.getRole();
        w.block = layout.getBlock();
        if (layout.isPiece()) {
          w.sliceDim = layout.getDim();
          w.sliceOffset = layout.getSliceOffset();
          w.sliceSize = layout.getSliceSize();
        }
      }
      w.localType = typeString(arg.getType());
      w.localBytes = bytesOf(arg.getType());
      weightBytes += w.localBytes;
      bool split = layout && layout.isSplit();
      modelBytes += split ? w.localBytes * devices : w.localBytes;
      if (layout && layout.isPadded()) {
        w.original = layout.getUnpaddedSize();
        w.padded = layout.getPaddedSize();
        // The model holds the original rows; the rest are zeros.
        int64_t whole = w.localBytes * devices;
        w.paddingBytes = whole / w.padded * (w.padded - w.original);
        modelBytes -= w.paddingBytes;
      }
      if (layout && layout.isRepeated()) {
        // The model holds each repeated block once.
        int64_t held = split ? w.localBytes * devices : w.localBytes;
        modelBytes -= held - held / layout.getRepeatTimes();
      }
      weights.push_back(std::move(w));
    }
    // A weight the plan split through a slice or a pad that is still there
    // carries its layout on that op.
    func.walk([&](Operation *op) {
      auto layout = op->getAttrOfType<LayoutAttr>(TPDialect::kLayoutAttrName);
      if (!layout || isa<func::FuncOp>(op))
        return;
      WeightInfo w;
      w.name = nodeName(op->getLoc()) +
               (isa<tensor::PadOp>(op)      ? " (padded weight)"
                : isa<linalg::LinalgOp>(op) ? " (transposed weight)"
                                            : " (slice of a weight)");
      w.initializer = w.name;
      w.role = layout.getRole();
      w.block = layout.getBlock();
      // Each rank cuts its part locally (shard.all_slice).
      Type local = op->getResult(0).getType();
      for (Operation *user : op->getResult(0).getUsers())
        if (isa<shard::AllSliceOp>(user))
          local = user->getResult(0).getType();
      w.localType = typeString(local);
      weights.push_back(std::move(w));
    });

    std::vector<CollectiveInfo> collectives;
    std::vector<std::pair<std::string, std::string>> replicated;
    int64_t activationBytes = 0, largestActivation = 0;
    double t = static_cast<double>(devices);
    func.walk([&](Operation *op) {
      if (auto why =
              op->getAttrOfType<StringAttr>(TPDialect::kReplicatedAttrName))
        replicated.push_back({nodeName(op->getLoc()), why.str()});
      CollectiveInfo c;
      if (isa<shard::AllReduceOp>(op)) {
        c.kind = "all_reduce";
        c.activationBytes = bytesOf(op->getOperand(0).getType());
        c.movedBytes =
            static_cast<int64_t>(2 * c.activationBytes * (t - 1) / t);
      } else if (isa<shard::AllGatherOp>(op)) {
        c.kind = "all_gather";
        c.activationBytes = bytesOf(op->getResult(0).getType());
        c.movedBytes = static_cast<int64_t>(c.activationBytes * (t - 1) / t);
      } else if (isa<shard::ReduceScatterOp>(op)) {
        c.kind = "reduce_scatter";
        c.activationBytes = bytesOf(op->getOperand(0).getType());
        c.movedBytes = static_cast<int64_t>(c.activationBytes * (t - 1) / t);
      } else if (isa<shard::AllToAllOp>(op)) {
        c.kind = "all_to_all";
        c.activationBytes = bytesOf(op->getOperand(0).getType());
        c.movedBytes = static_cast<int64_t>(c.activationBytes * (t - 1) / t);
      } else if (isa<shard::SendOp>(op)) {
        c.kind = "send";
        c.activationBytes = bytesOf(op->getOperand(0).getType());
        c.movedBytes = c.activationBytes;
      } else if (isa<shard::AllSliceOp>(op)) {
        c.kind = "all_slice";
        c.activationBytes = bytesOf(op->getOperand(0).getType());
      } else {
        if (op->getParentOp() == func && !isa<shard::ShardingOp>(op))
          for (Value result : op->getResults()) {
            activationBytes += bytesOf(result.getType());
            largestActivation =
                std::max(largestActivation, bytesOf(result.getType()));
          }
        return;
      }
      c.type = typeString(op->getOperand(0).getType());
      c.node = nodeName(op->getLoc());
      if (isa<shard::AllGatherOp>(op))
        c.block = findBlockForward(op->getResult(0), func);
      if (c.block < 0)
        c.block = findBlock(op->getOperand(0), func);
      collectives.push_back(std::move(c));
    });

    TrainingMemory training = getTrainingMemory(func);

    bool tensorParallel = llvm::any_of(weights, [](const WeightInfo &w) {
      return w.role != SplitRole::Replicated;
    });
    // Sequence parallelism applies wherever a row-parallel block ends;
    // pipeline parallelism needs block boundaries to cut at (or was done).
    bool sequenceParallel = llvm::any_of(
        weights, [](const WeightInfo &w) { return w.role == SplitRole::Row; });
    bool pipelineParallel =
        func->hasAttr(TPDialect::kStageAttrName) ||
        llvm::any_of(func.getBody().front(),
                     [](Operation &op) { return isResidualAdd(&op); });
    if (json)
      printJSON(func, devices, weights, collectives, replicated, weightBytes,
                modelBytes, activationBytes, largestActivation, training,
                tensorParallel, sequenceParallel, pipelineParallel);
    else
      printText(func, devices, gridName, weights, collectives, replicated,
                weightBytes, modelBytes, activationBytes, largestActivation,
                training, tensorParallel, sequenceParallel, pipelineParallel);
  }

  /// What the data axis reduces per step: each rank's gradients and the
  /// loss (one f32), cut into buckets of at most bucketBytes; a ring
  /// all-reduce sends 2·B·(D−1)/D of B bytes per rank.
  /// ZeRO-1 instead reduce-scatters and all-gathers the gradients alone,
  /// in buckets of D chunks (the last padded), each way (D−1)/D of them.
  struct DataAxis {
    int64_t bytes = 0, buckets = 0, sentBytes = 0;
  };
  DataAxis getDataAxis(const TrainingMemory &training) const {
    DataAxis data;
    int64_t d = dataParallel;
    if (zero == 1) {
      data.bytes = training.gradientBytes;
      int64_t total = data.bytes / 4;
      int64_t chunk = std::max<int64_t>(
          1, std::min<int64_t>(bucketBytes / 4 / d, (total + d - 1) / d));
      data.buckets = (total + chunk * d - 1) / (chunk * d);
      data.sentBytes = 2 * data.buckets * chunk * 4 * (d - 1);
      return data;
    }
    data.bytes = training.gradientBytes + 4;
    int64_t bucket = std::max<int64_t>(bucketBytes, 4) / 4 * 4;
    data.buckets = (data.bytes + bucket - 1) / bucket;
    data.sentBytes = 2 * data.bytes * (d - 1) / d;
    return data;
  }
  /// The optimizer's states per rank: 1/D of them (rounded up) under
  /// ZeRO-1.
  bool zeroStates() const { return zero == 1 && dataParallel > 1; }
  int64_t getOptimizerBytes(const TrainingMemory &training) const {
    int64_t d = zeroStates() ? int64_t(dataParallel) : 1;
    return optimizerStates * ((training.gradientBytes / 4 + d - 1) / d * 4);
  }
  /// The gradient buffers per rank; ZeRO-1 adds this replica's part of
  /// the reduced gradients.
  int64_t getBufferBytes(const TrainingMemory &training) const {
    int64_t bytes = gradientBuffers * training.gradientBytes;
    if (zeroStates())
      bytes +=
          (training.gradientBytes / 4 + dataParallel - 1) / dataParallel * 4;
    return bytes;
  }

  void printText(func::FuncOp func, int64_t devices, StringRef gridName,
                 ArrayRef<WeightInfo> weights,
                 ArrayRef<CollectiveInfo> collectives,
                 ArrayRef<std::pair<std::string, std::string>> replicated,
                 int64_t weightBytes, int64_t modelBytes,
                 int64_t activationBytes, int64_t largestActivation,
                 const TrainingMemory &training, bool tensorParallel,
                 bool sequenceParallel, bool pipelineParallel) {
    llvm::raw_ostream &os = *this->os;
    os << "tp-explain: @" << func.getName() << " on " << devices << " device(s)"
       << (gridName.empty() ? "" : " (grid @") << gridName
       << (gridName.empty() ? "" : ")") << "\n";
    std::map<int64_t, std::pair<std::vector<const WeightInfo *>,
                                std::vector<const CollectiveInfo *>>>
        blocks;
    for (const WeightInfo &w : weights)
      if (w.role != SplitRole::Replicated)
        blocks[w.block].first.push_back(&w);
    for (const CollectiveInfo &c : collectives)
      blocks[c.block].second.push_back(&c);
    for (auto &[block, entry] : blocks) {
      if (block >= 0)
        os << "block " << block << ":\n";
      else
        os << "outside blocks:\n";
      for (const WeightInfo *w : entry.first) {
        os << llvm::formatv("  {0,-16} {1} -> {2} per device\n",
                            stringifySplitRole(w->role), w->name, w->localType);
        if (w->padded)
          os << llvm::formatv("  {0,-16} {1}: {2} -> {3} on its split dim "
                              "(Megatron-style), {4} B of zeros in all, "
                              "{5:P} more FLOPs in its contraction\n",
                              "padding", w->name, w->original, w->padded,
                              w->paddingBytes,
                              double(w->padded - w->original) / w->original);
      }
      for (const CollectiveInfo *c : entry.second)
        os << llvm::formatv("  {0,-16} {1} at '{2}': activation {3} B, {4} B "
                            "sent per rank\n",
                            c->kind, c->type, c->node, c->activationBytes,
                            c->movedBytes);
    }
    if (!replicated.empty()) {
      os << "replicated contractions:\n";
      for (const auto &[node, why] : replicated)
        os << "  '" << node << "': " << why << "\n";
    }
    SmallVector<SplitOutputInfo> splits = getSplitOutputs(func);
    if (!splits.empty()) {
      os << "split outputs (each rank returns its block; not gathered):\n";
      for (const SplitOutputInfo &split : splits)
        os << llvm::formatv("  {0}: {1} per device, of {2} on dim {3}\n",
                            split.name, split.localType, split.size, split.dim);
    }
    std::map<std::string, int64_t> counts;
    int64_t moved = 0;
    for (const CollectiveInfo &c : collectives) {
      ++counts[c.kind];
      moved += c.movedBytes;
    }
    os << "collectives:";
    for (const auto &[kind, n] : counts)
      os << " " << n << " " << kind;
    if (counts.empty())
      os << " none";
    os << "; " << moved << " B sent per rank per forward pass\n";
    os << "per device: weights " << weightBytes << " B (whole model "
       << modelBytes << " B), activations " << activationBytes
       << " B produced, largest " << largestActivation << " B\n";
    if (training.backward)
      os << "training per device: gradients " << training.gradientBytes
         << " B (of the weights above), optimizer states "
         << getOptimizerBytes(training) << " B"
         << (zeroStates()
                 ? " (1/" + std::to_string(dataParallel) + " of them, ZeRO-1)"
                 : std::string())
         << (getBufferBytes(training)
                 ? ", gradient buffers " +
                       std::to_string(getBufferBytes(training)) + " B"
                 : std::string())
         << ", stash " << training.stashBytes << " B (" << training.stashValues
         << " forward values the backward reads)\n";
    if (training.backward && training.stashWithoutRecompute >= 0)
      os << "recomputation: stash " << training.stashBytes << " B, "
         << training.stashWithoutRecompute << " B without; "
         << training.recomputedOps
         << " forward ops run again in the backward\n";
    if (training.backward && lossScale > 0)
      os << "loss scaling: dynamic, from "
         << llvm::format("%g", static_cast<double>(lossScale))
         << " (the backward starts from the input "
         << TPDialect::kLossScaleInputName
         << "); a step whose gradients overflow is skipped and the scale "
            "halved, "
         << lossScaleWindow << " steps in a row without overflow double it\n";
    if (training.backward && dataParallel > 1) {
      DataAxis data = getDataAxis(training);
      os << "grid: data " << dataParallel << " x tensor " << devices << " = "
         << dataParallel * devices << " ranks\n";
      if (zero == 1)
        os << "data parallel (ZeRO-1): each rank reduce-scatters its "
              "gradients ("
           << data.bytes << " B) over the " << dataParallel
           << " replicas, updates its 1/" << dataParallel << " with 1/"
           << dataParallel
           << " of the optimizer states and all-gathers the weights, once "
              "per step, in "
           << data.buckets << " bucket(s) of at most " << bucketBytes
           << " B: " << data.sentBytes
           << " B sent per rank per step (and 16 B all-reduced: the loss "
              "and the squared norm)\n";
      else
        os << "data parallel: each rank all-reduces its gradients and the "
              "loss ("
           << data.bytes << " B) over the " << dataParallel
           << " replicas once per step, in " << data.buckets
           << " bucket(s) of at most " << bucketBytes
           << " B: " << data.sentBytes << " B sent per rank per step\n";
    }
    os << "support (tensor, sequence, pipeline): ("
       << (tensorParallel ? "true" : "false") << ", "
       << (sequenceParallel ? "true" : "false") << ", "
       << (pipelineParallel ? "true" : "false") << ")\n";
  }

  void printJSON(func::FuncOp func, int64_t devices,
                 ArrayRef<WeightInfo> weights,
                 ArrayRef<CollectiveInfo> collectives,
                 ArrayRef<std::pair<std::string, std::string>> replicated,
                 int64_t weightBytes, int64_t modelBytes,
                 int64_t activationBytes, int64_t largestActivation,
                 const TrainingMemory &training, bool tensorParallel,
                 bool sequenceParallel, bool pipelineParallel) {
    llvm::json::Array w, c, r;
    for (const WeightInfo &x : weights) {
      llvm::json::Object weight{{"name", x.name},
                                {"initializer", x.initializer},
                                {"role", stringifySplitRole(x.role)},
                                {"block", x.block},
                                {"local_type", x.localType},
                                {"local_bytes", x.localBytes}};
      if (x.sliceDim >= 0)
        weight["slice"] = llvm::json::Object{{"dim", x.sliceDim},
                                             {"offset", x.sliceOffset},
                                             {"size", x.sliceSize}};
      if (x.padded)
        weight["padding"] = llvm::json::Object{{"original", x.original},
                                               {"padded", x.padded},
                                               {"bytes", x.paddingBytes}};
      w.push_back(std::move(weight));
    }
    for (const CollectiveInfo &x : collectives)
      c.push_back(llvm::json::Object{{"kind", x.kind},
                                     {"type", x.type},
                                     {"node", x.node},
                                     {"block", x.block},
                                     {"activation_bytes", x.activationBytes},
                                     {"bytes_sent_per_rank", x.movedBytes}});
    for (const auto &[node, why] : replicated)
      r.push_back(llvm::json::Object{{"node", node}, {"reason", why}});
    llvm::json::Array splits;
    for (const SplitOutputInfo &x : getSplitOutputs(func))
      splits.push_back(llvm::json::Object{{"name", x.name},
                                          {"local_type", x.localType},
                                          {"dim", x.dim},
                                          {"size", x.size}});
    llvm::json::Object root{
        {"function", func.getName().str()},
        {"devices", devices},
        {"weights", std::move(w)},
        {"collectives", std::move(c)},
        {"replicated", std::move(r)},
        {"split_outputs", std::move(splits)},
        {"weight_bytes_per_device", weightBytes},
        {"model_weight_bytes", modelBytes},
        {"activation_bytes_per_device", activationBytes},
        {"largest_activation_bytes", largestActivation},
        {"gradient_bytes_per_device", training.gradientBytes},
        {"stash_bytes_per_device", training.stashBytes},
        {"stash_bytes_without_recompute",
         training.stashWithoutRecompute >= 0
             ? llvm::json::Value(training.stashWithoutRecompute)
             : llvm::json::Value(nullptr)},
        {"recomputed_ops", training.recomputedOps},
        {"optimizer_state_bytes_per_device", getOptimizerBytes(training)},
        {"gradient_buffer_bytes_per_device", getBufferBytes(training)},
        {"data_parallel", static_cast<int64_t>(dataParallel)},
        {"loss_scale", static_cast<double>(lossScale)},
        {"support", llvm::json::Object{{"tensor", tensorParallel},
                                       {"sequence", sequenceParallel},
                                       {"pipeline", pipelineParallel}}}};
    if (training.backward && dataParallel > 1) {
      DataAxis data = getDataAxis(training);
      root["data_axis"] = llvm::json::Object{
          {"bytes", data.bytes},
          {"buckets", data.buckets},
          {"bucket_bytes", static_cast<int64_t>(bucketBytes)},
          {"zero", static_cast<int64_t>(zero)},
          {"bytes_sent_per_rank", data.sentBytes}};
    }
    *os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  }
};

} // namespace
