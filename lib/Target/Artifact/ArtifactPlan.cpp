//===- ArtifactPlan.cpp - what goes into each rank file -------------------===//
//
// Each weight argument's `tp.layout` says which range of its initializer it
// holds and along which dim it splits; TP rank t holds the t-th contiguous
// chunk of that range (zero-padded first if the layout pads it).
//
//===----------------------------------------------------------------------===//

#include "ArtifactPlan.h"
#include "tp/Dialect/TP/Grids.h"
#include "tp/Target/Artifact/ModelSignature.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"

#include <set>

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::artifact;

static std::vector<int64_t> getShape(Type type) {
  auto shaped = cast<ShapedType>(type);
  return std::vector<int64_t>(shaped.getShape().begin(),
                              shaped.getShape().end());
}

/// Adds stage `stage`'s use of the weight in argument `arg` to the plan.
static LogicalResult
addWeightUse(func::FuncOp func, unsigned arg, unsigned stage,
             const llvm::StringMap<const onnx::TensorProto *> &initializers,
             llvm::StringMap<unsigned> &indexOf, ArtifactPlan &plan) {
  auto nameAttr = func.getArgAttrOfType<StringAttr>(arg, "tp.weight");
  StringRef name = nameAttr.getValue();
  auto type = dyn_cast<RankedTensorType>(func.getArgument(arg).getType());
  if (!type || !type.hasStaticShape())
    return func.emitError("weight '") << name << "' has no static shape";
  auto [it, inserted] = indexOf.try_emplace(name, plan.weights.size());
  if (inserted) {
    const onnx::TensorProto *init = initializers.lookup(name);
    if (!init)
      return func.emitError("weight '")
             << name << "' is not an initializer of the model";
    WeightPlan weight;
    weight.name = name.str();
    weight.initializer = init;
    weight.globalShape.assign(init->dims().begin(), init->dims().end());
    weight.kind = getElementKind(init->data_type());
    // tp-convert-dtype narrows f32 weights; the writer converts them.
    std::string stored = getDTypeName(type.getElementType());
    if (weight.kind.safetensorsName == "F32" &&
        (stored == "BF16" || stored == "F16"))
      weight.kind = {stored == "BF16" ? "BF16" : "F16", 2};
    if (weight.kind.safetensorsName != stored)
      return func.emitError("weight '")
             << name << "' is " << type.getElementType()
             << " in the module but ONNX data type " << init->data_type()
             << " in the model";
    plan.weights.push_back(std::move(weight));
  }
  WeightPlan &weight = plan.weights[it->second];
  WeightUse use;
  use.stage = stage;
  use.localShape = getShape(type);
  LayoutAttr layout = getLayout(func, arg);
  use.key = getPieceName(name, layout, type.getRank());
  for (const WeightUse &other : weight.uses)
    if (other.stage == stage && other.key == use.key) {
      if (other.localShape != use.localShape)
        return func.emitError("weight '")
               << use.key << "' appears twice with different local shapes";
      return success();
    }
  if (use.localShape.size() != weight.globalShape.size())
    return func.emitError("weight '")
           << use.key << "' has rank " << use.localShape.size()
           << " but its initializer has rank " << weight.globalShape.size();
  if (layout) {
    use.role = layout.getRole();
    use.dim = layout.getDim();
    use.split = layout.isSplit();
    use.piece = layout.isPiece();
    int64_t global = weight.globalShape[use.dim];
    use.offset = use.piece ? layout.getSliceOffset() : 0;
    use.size = use.piece ? layout.getSliceSize() : global;
    use.padded = layout.isPadded() ? layout.getPaddedSize() : 0;
    if (layout.isRepeated()) {
      use.repeatBlocks = layout.getRepeatBlocks();
      use.repeat = layout.getRepeatTimes();
      if (use.size % use.repeatBlocks != 0)
        return func.emitError("weight '")
               << use.key << "' repeats " << use.repeatBlocks
               << " blocks of its " << use.size << " rows";
    }
    if (use.offset + use.size > global)
      return func.emitError("weight '")
             << use.key << "' reaches past the " << global << " rows of dim "
             << use.dim << " of its initializer";
    if (layout.isPadded() && layout.getUnpaddedSize() != use.size)
      return func.emitError("weight '")
             << use.key << "' pads " << layout.getUnpaddedSize()
             << " rows but holds " << use.size;
  }
  // Only the layout's dim may differ from the initializer, by what the
  // layout says.
  for (size_t d = 0; d < use.localShape.size(); ++d) {
    int64_t expected = weight.globalShape[d];
    if (int64_t(d) == use.dim)
      expected = use.split ? use.getRows() / plan.tpDevices : use.getRows();
    bool even = int64_t(d) != use.dim || !use.split ||
                use.getRows() % plan.tpDevices == 0;
    if (use.localShape[d] != expected || !even)
      return func.emitError("weight '")
             << use.key << "' dim " << d << " is " << use.localShape[d]
             << " per rank, but its initializer and tp.layout make it "
             << (even ? std::to_string(expected)
                      : "a 1/" + std::to_string(plan.tpDevices) + " share of " +
                            std::to_string(use.getRows()));
  }
  weight.uses.push_back(std::move(use));
  return success();
}

static void collectSignature(func::FuncOp func, unsigned stage,
                             std::vector<TensorSignature> &inputs,
                             std::vector<TensorSignature> &outputs) {
  auto add = [&](std::vector<TensorSignature> &list, StringAttr name,
                 Type type) {
    TensorSignature sig;
    sig.name = name.getValue().str();
    sig.stage = stage;
    if (auto shaped = dyn_cast<ShapedType>(type)) {
      sig.dtype = getDTypeName(shaped.getElementType());
      sig.shape = getShape(type);
    } else {
      sig.dtype = getDTypeName(type);
    }
    list.push_back(std::move(sig));
  };
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, TPDialect::kInputAttrName);
    if (!name)
      continue;
    // A model input feeds several stages: its index bound is the tightest.
    int64_t bound = 0;
    if (auto attr = func.getArgAttrOfType<IntegerAttr>(
            i, TPDialect::kIndexBoundAttrName))
      bound = attr.getInt();
    auto known = llvm::find_if(inputs, [&](const TensorSignature &sig) {
      return sig.name == name.getValue();
    });
    if (known != inputs.end()) {
      if (bound && (!known->indexBound || bound < known->indexBound))
        known->indexBound = bound;
      continue;
    }
    add(inputs, name, func.getArgument(i).getType());
    inputs.back().indexBound = bound;
  }
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    auto name =
        func.getResultAttrOfType<StringAttr>(i, TPDialect::kOutputAttrName);
    if (!name)
      continue;
    add(outputs, name, func.getResultTypes()[i]);
    // A block of the output on each rank: the model's output is whole.
    if (auto split = func.getResultAttrOfType<SplitOutputAttr>(
            i, TPDialect::kSplitOutputAttrName)) {
      outputs.back().splitDim = split.getDim();
      outputs.back().shape[split.getDim()] = split.getSize();
    }
  }
}

/// The weight arguments of a stage function as (rank-file key, type): a
/// prefill stage must read exactly those of its decode stage, from the
/// same rank file.
static std::set<std::pair<std::string, std::string>>
getWeightKeys(func::FuncOp func) {
  std::set<std::pair<std::string, std::string>> keys;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto name =
        func.getArgAttrOfType<StringAttr>(i, TPDialect::kWeightAttrName);
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(func.getArgumentTypes()[i]);
    std::string text;
    llvm::raw_string_ostream os(text);
    os << type;
    keys.insert(
        {getPieceName(name.getValue(), getLayout(func, i), type.getRank()),
         text});
  }
  return keys;
}

FailureOr<ArtifactPlan> mlir::tp::artifact::buildArtifactPlan(
    ModuleOp module,
    const llvm::StringMap<const onnx::TensorProto *> &initializers) {
  ArtifactPlan plan;
  plan.tpDevices = getGridSize1D(module, GridRole::Tensor);
  if (plan.tpDevices < 1)
    return module.emitError("module has no 1-D tensor-parallel shard.grid; "
                            "run tp-parallelize first");
  if (lookupGrid(module, GridRole::Pipeline)) {
    plan.stages = getGridSize1D(module, GridRole::Pipeline);
    if (plan.stages < 1)
      return module.emitError("the pipeline shard.grid is not 1-D");
  }
  if (auto pipeline = module->getAttrOfType<DictionaryAttr>("tp.pipeline"))
    if (auto m = pipeline.getAs<IntegerAttr>("microbatches"))
      plan.microbatches = m.getInt();
  FailureOr<SmallVector<func::FuncOp>> stageFuncs = getStageFunctions(module);
  if (failed(stageFuncs))
    return failure();
  plan.stageFuncs.assign(stageFuncs->begin(), stageFuncs->end());

  FailureOr<SmallVector<PrefillChunk>> chunks = getPrefillChunks(module);
  if (failed(chunks))
    return failure();
  for (const PrefillChunk &chunk : *chunks) {
    ArtifactPlan::Prefill &prefill = plan.prefills.emplace_back();
    prefill.length = chunk.length;
    prefill.funcs.assign(chunk.stages.begin(), chunk.stages.end());
    if (prefill.funcs.size() != plan.stageFuncs.size())
      return module.emitError("the prefill chunk of ")
             << chunk.length << " tokens has " << prefill.funcs.size()
             << " stages and the decode step " << plan.stageFuncs.size();
    for (auto [stage, func] : llvm::enumerate(prefill.funcs)) {
      collectSignature(func, stage, prefill.inputs, prefill.outputs);
      if (getWeightKeys(func) != getWeightKeys(plan.stageFuncs[stage]))
        return func.emitError("the prefill chunk's stage ")
               << stage << " reads other weights (or other splits of them) "
               << "than the decode step's; both run on one copy of the "
                  "weights";
    }
  }

  llvm::StringMap<unsigned> indexOf;
  for (auto [stage, func] : llvm::enumerate(plan.stageFuncs)) {
    collectSignature(func, stage, plan.inputs, plan.outputs);
    // Stage functions take one micro-batch; the model's signature is the
    // whole batch, M micro-batches along dim 0.
    if (plan.microbatches > 1)
      for (auto *list : {&plan.inputs, &plan.outputs})
        for (TensorSignature &sig : *list)
          if (sig.stage == stage && !sig.shape.empty())
            sig.shape[0] *= plan.microbatches;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (func.getArgAttr(i, "tp.weight") &&
          failed(addWeightUse(func, i, stage, initializers, indexOf, plan)))
        return failure();
  }

  // The writer reads the whole initializer once for the uses that hold all
  // of it, then each piece's range: in that order in every rank file too,
  // so that each file is written front to back.
  for (WeightPlan &weight : plan.weights)
    llvm::stable_sort(weight.uses, [](const WeightUse &a, const WeightUse &b) {
      return std::make_tuple(!a.readsWhole(), a.dim, a.offset, a.size) <
             std::make_tuple(!b.readsWhole(), b.dim, b.offset, b.size);
    });
  // Every rank file lists its shards in the global weight order, so one
  // pass over the weights writes every file front to back.
  for (int64_t stage = 0; stage < plan.stages; ++stage)
    for (int64_t t = 0; t < plan.tpDevices; ++t) {
      RankPlan rank;
      rank.stage = stage;
      rank.tpIndex = t;
      rank.rank = stage * plan.tpDevices + t;
      rank.fileName = "rank-" + std::to_string(rank.rank) + ".safetensors";
      for (auto [w, weight] : llvm::enumerate(plan.weights))
        for (auto [u, use] : llvm::enumerate(weight.uses)) {
          if (use.stage != stage)
            continue;
          uint64_t bytes = weight.kind.bytes;
          for (int64_t dim : use.localShape)
            bytes *= dim;
          rank.shards.push_back({unsigned(w), unsigned(u), rank.dataBytes,
                                 rank.dataBytes + bytes});
          rank.dataBytes += bytes;
        }
      plan.ranks.push_back(std::move(rank));
    }
  return plan;
}
