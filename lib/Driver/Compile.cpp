//===- Compile.cpp - ONNX model to a tp-mlir artifact ---------------------===//
//
// Imports an ONNX model, runs the same tp-parallelize pipeline that tp-opt
// registers, and writes the artifact folder (manifest, per-rank weight
// shards, partitioned MLIR) and, for --target cpu or cuda, the emitted C++
// or CUDA source and the library built from it.
//
//===----------------------------------------------------------------------===//

#include "tp/Driver/Compile.h"

#include "tp/Dialect/Shard/ShardingExtensions.h"
#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Runtime/Artifact.h"
#include "tp/Target/Artifact/ArtifactWriter.h"
#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"
#include "tp/Target/ONNX/ImportONNX.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>

using namespace mlir;
using namespace mlir::tp;

void mlir::tp::registerCompileDialects(DialectRegistry &registry) {
  registerONNXImportDialects(registry);
  registry.insert<TPDialect, shard::ShardDialect>();
  registerShardingExtensions(registry);
}

/// "model.onnx: warning: at '/h.0/attn/MatMul': message": the model file
/// and the ONNX node from the op's location (NameLoc(node, model:0:0)).
static void formatLine(llvm::raw_ostream &os, Location loc,
                       DiagnosticSeverity severity, StringRef message,
                       bool note, StringRef tool) {
  std::string file, node;
  loc->walk([&](Location inner) {
    if (auto name = dyn_cast<NameLoc>(inner); name && node.empty())
      node = name.getName().str();
    if (auto fileLoc = dyn_cast<FileLineColLoc>(inner); fileLoc && file.empty())
      file = fileLoc.getFilename().str();
    return WalkResult::advance();
  });
  os << (file.empty() ? tool.str() : file) << ": ";
  switch (severity) {
  case DiagnosticSeverity::Error:
    os << "error";
    break;
  case DiagnosticSeverity::Warning:
    os << "warning";
    break;
  case DiagnosticSeverity::Note:
    os << "note";
    break;
  case DiagnosticSeverity::Remark:
    os << "remark";
    break;
  }
  os << ": ";
  // Importer messages already name their node.
  if (!node.empty() && !note && !message.contains(node))
    os << "at '" << node << "': ";
  os << message << "\n";
}

std::string mlir::tp::formatDiagnostic(Diagnostic &diag, StringRef tool) {
  std::string text;
  llvm::raw_string_ostream os(text);
  formatLine(os, diag.getLocation(), diag.getSeverity(), diag.str(),
             /*note=*/false, tool);
  for (Diagnostic &note : diag.getNotes())
    formatLine(os, note.getLocation(), note.getSeverity(), note.str(),
               /*note=*/true, tool);
  return text;
}

/// The training artifact's loss: `--loss`, or the only scalar output that
/// is no gradient (tp-differentiate has checked that it exists).
static FailureOr<std::string> findLossOutput(ModuleOp module,
                                             StringRef wanted) {
  if (!wanted.empty())
    return wanted.str();
  SmallVector<std::string> scalars;
  module.walk([&](func::FuncOp func) {
    if (func.isPrivate())
      return;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto name =
          func.getResultAttrOfType<StringAttr>(i, TPDialect::kOutputAttrName);
      auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[i]);
      if (name && type && type.getRank() == 0 &&
          !name.getValue().starts_with("grad."))
        scalars.push_back(name.getValue().str());
    }
  });
  if (scalars.size() != 1)
    return module.emitError("--train: ")
           << scalars.size() << " scalar outputs; name the loss with --loss";
  return scalars.front();
}

/// Builds the artifact in a fresh folder beside `path` and renames it into
/// place only when it is complete: a failed compile leaves an existing
/// artifact at `path` as it was. Refuses to replace anything at `path` that
/// is not an artifact.
static LogicalResult writeArtifactAtomically(ModuleOp module, StringRef path,
                                             const ArtifactOptions &options) {
  namespace fs = llvm::sys::fs;
  Location loc = module.getLoc();
  SmallString<256> manifest(path);
  llvm::sys::path::append(manifest, "manifest.json");
  if (fs::exists(path) && (!fs::is_directory(path) || !fs::exists(manifest)))
    return emitError(loc) << "'" << path
                          << "' exists and is not a tp-mlir artifact (a folder "
                             "with a manifest.json); refusing to replace it";
  std::string suffix = "." + std::to_string(::getpid());
  std::string building = (path + ".building" + suffix).str();
  std::string old = (path + ".old" + suffix).str();
  (void)fs::remove_directories(building);
  if (failed(writeArtifact(module, building, options))) {
    (void)fs::remove_directories(building);
    return failure();
  }
  bool replacing = fs::exists(path);
  if (replacing)
    if (std::error_code ec = fs::rename(path, old)) {
      (void)fs::remove_directories(building);
      return emitError(loc)
             << "cannot move the old '" << path << "' aside: " << ec.message();
    }
  if (std::error_code ec = fs::rename(building, path)) {
    if (replacing)
      (void)fs::rename(old, path);
    (void)fs::remove_directories(building);
    return emitError(loc) << "cannot move the new artifact to '" << path
                          << "': " << ec.message();
  }
  if (replacing)
    (void)fs::remove_directories(old);
  return success();
}

std::vector<int64_t> mlir::tp::getPrefillChunks(const CompileOptions &options) {
  if (options.maxSeq == 0 || options.prefillLength == 0)
    return {};
  std::vector<int64_t> chunks;
  if (options.prefillLength > 0) {
    chunks.push_back(options.prefillLength);
  } else if (!options.prefillChunks.empty()) {
    chunks = options.prefillChunks;
  } else {
    for (int64_t chunk : kDefaultPrefillChunks)
      if (chunk < options.maxSeq)
        chunks.push_back(chunk);
    // A context shorter than every default still prefills in one chunk.
    if (chunks.empty() && options.maxSeq > 2)
      chunks.push_back(options.maxSeq - 1);
  }
  llvm::sort(chunks);
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  return chunks;
}

/// The optimizer of --train and its settings, with tp::rt::TrainingSpec's
/// defaults for those not given (and AdamW's weight decay of 0.01); none
/// without --train.
static std::optional<::tp::rt::TrainingSpec>
getTrainingSpec(const CompileOptions &options) {
  if (!options.train)
    return std::nullopt;
  ::tp::rt::TrainingSpec spec;
  spec.optimizer = stringifyChoice(*options.train).str();
  spec.lr = options.lr.value_or(spec.lr);
  if (options.betas.size() == 2) {
    spec.beta1 = options.betas[0];
    spec.beta2 = options.betas[1];
  }
  spec.eps = options.eps.value_or(spec.eps);
  spec.weightDecay = options.weightDecay.value_or(
      *options.train == TrainOptimizer::AdamW ? 0.01 : 0.0);
  spec.momentum = options.momentum.value_or(spec.momentum);
  spec.clipNorm = options.clipNorm.value_or(spec.clipNorm);
  spec.accumulate = options.accumulate.value_or(spec.accumulate);
  spec.dataParallel = options.dataParallel;
  spec.zero = options.zero;
  // Dynamic loss scaling: on by default where the backward runs in f16,
  // whose range small gradients fall out of.
  spec.lossScale = options.lossScale.value_or(
      options.dtype == CompileDType::F16 ? 65536.0 : 0.0);
  spec.lossScaleWindow = options.lossScaleWindow.value_or(2000);
  if (options.bucketMb)
    spec.bucketBytes = std::max<int64_t>(
        4, static_cast<int64_t>(*options.bucketMb * double(1 << 20)) / 4 * 4);
  return spec;
}

/// --build-cache, else $TP_BUILD_CACHE; empty: no cache.
static std::string getBuildCache(const CompileOptions &options) {
  if (options.buildCache)
    return *options.buildCache;
  const char *dir = std::getenv("TP_BUILD_CACHE");
  return dir ? dir : "";
}

/// --cxx-flags, else (for --target cpu) $TP_CXX_FLAGS.
static std::string getCxxFlags(const CompileOptions &options) {
  if (!options.cxxFlags.empty() || options.target != CompileTarget::Cpu)
    return options.cxxFlags;
  const char *flags = std::getenv("TP_CXX_FLAGS");
  return flags ? flags : "";
}

/// Checks the options that need no model.
static LogicalResult checkOptions(MLIRContext &context,
                                  const CompileOptions &options,
                                  ONNXImportOptions &importOptions) {
  Location loc = UnknownLoc::get(&context);
  if (!options.train && (options.lr || !options.betas.empty() || options.eps ||
                         options.weightDecay || options.momentum ||
                         options.clipNorm || options.accumulate))
    return emitError(loc)
           << "--lr, --betas, --eps, --weight-decay, --momentum, --clip-norm "
              "and --accumulate need --train";
  if (!options.train &&
      (options.dataParallel != 1 || options.bucketMb || options.zero))
    return emitError(loc) << "--data-parallel, --zero and --bucket-mb need "
                             "--train (the replicas average their gradients)";
  if (!options.train && (options.lossScale || options.lossScaleWindow))
    return emitError(loc) << "--loss-scale and --loss-scale-window need "
                             "--train";
  if (!options.recompute.empty() && options.recompute != "layers")
    return emitError(loc) << "unknown --recompute '" << options.recompute
                          << "'; expected layers";
  if (!options.recompute.empty() && !options.gradients && !options.train)
    return emitError(loc) << "--recompute needs --gradients or --train";
  if (options.zero == 3)
    return emitError(loc)
           << "--zero 3 (weights the plan keeps whole split over the data "
              "axis) is not built yet; --zero 1 splits the optimizer states";
  if (options.zero != 0 && options.zero != 1)
    return emitError(loc) << "--zero must be 0 or 1";
  if (options.dataParallel < 1 ||
      options.dataParallel * options.devices > ::tp::rt::kMaxRanks)
    return emitError(loc) << "--data-parallel must be at least 1, with at "
                             "most "
                          << ::tp::rt::kMaxRanks << " ranks in all";
  if (options.bucketMb &&
      !(*options.bucketMb > 0 && *options.bucketMb <= double(1 << 20)))
    return emitError(loc) << "--bucket-mb must be above 0 and at most "
                          << (1 << 20) << " (MiB)";
  if (!options.betas.empty() && options.betas.size() != 2)
    return emitError(loc) << "--betas takes two values, beta1,beta2";
  if (options.devices < 1 || options.stages < 1 || options.microbatches < 1)
    return emitError(loc)
           << "--devices, --pp and --microbatches must be at least 1";
  if ((options.strategy == PlanStrategy::Config) != !options.config.empty())
    return emitError(loc) << "--strategy=config and --config FILE go together";
  if (options.microbatches > 1 && options.stages < 2)
    return emitError(loc) << "--microbatches needs a pipeline (--pp 2 or more)";
  if (options.maxSeq < 0 || options.maxBatch < 1)
    return emitError(loc) << "--max-seq must be positive and --max-batch at "
                             "least 1";
  if (options.maxSeq == 1)
    return emitError(loc) << "--max-seq 1 leaves no room for a prompt and a "
                             "new token; give 2 or more";
  if (options.maxSeq > 0 && options.sequenceParallel)
    return emitError(loc) << "--sequence-parallel splits the tokens of a "
                             "forward pass, and a decode step has one; "
                             "leave it out with --max-seq";
  if (options.prefillLength < -1)
    return emitError(loc) << "--prefill-len must be 0 or more";
  if (options.prefillLength > 0 && !options.prefillChunks.empty())
    return emitError(loc) << "--prefill-len C is --prefill-chunks C; give "
                             "one of them";
  if ((options.prefillLength > 0 || !options.prefillChunks.empty()) &&
      options.maxSeq == 0)
    return emitError(loc) << (options.prefillLength > 0 ? "--prefill-len"
                                                        : "--prefill-chunks")
                          << " needs --max-seq";
  for (int64_t chunk : getPrefillChunks(options))
    if (chunk < 2 || chunk >= options.maxSeq)
      return emitError(loc)
             << "a prefill chunk of " << chunk << " tokens: each must be "
             << "at least 2 (a decode step takes 1) and below --max-seq "
             << options.maxSeq << " (it reads the cache written before it)";
  bool gradients = options.gradients || options.train.has_value();
  if ((!options.loss.empty() || !options.freeze.empty()) && !gradients)
    return emitError(loc) << (options.loss.empty() ? "--freeze" : "--loss")
                          << " needs --gradients or --train";
  if (gradients && (options.maxSeq > 0 || options.stages > 1))
    return emitError(loc) << (options.train ? "--train" : "--gradients")
                          << " differentiates one forward pass: leave out "
                          << (options.maxSeq > 0 ? "--max-seq" : "--pp");
  if (std::optional<::tp::rt::TrainingSpec> train = getTrainingSpec(options)) {
    if (options.dtype == CompileDType::F16 && train->lossScale == 0)
      return emitError(loc)
             << "--train with --dtype f16 needs loss scaling: leave out "
                "--loss-scale 0 (small gradients would underflow f16)";
    if (!(train->lossScale >= 0 && train->lossScale <= 1e30) ||
        train->lossScaleWindow < 1)
      return emitError(loc) << "--loss-scale must be in [0, 1e30] and "
                               "--loss-scale-window at least 1";
    if (!(train->lr >= 0) || !(train->eps > 0) || !(train->weightDecay >= 0) ||
        !(train->clipNorm >= 0) || !(train->beta1 >= 0 && train->beta1 < 1) ||
        !(train->beta2 >= 0 && train->beta2 < 1) ||
        !(train->momentum >= 0 && train->momentum <= 1) ||
        train->accumulate < 1)
      return emitError(loc)
             << "--train: --lr, --weight-decay and --clip-norm must be 0 or "
                "more, --eps positive, --betas and --momentum in [0, 1), "
                "--accumulate at least 1";
  }
  if (options.maxSeq > 0 && options.microbatches > 1)
    return emitError(loc) << "--microbatches with --max-seq: a decode step "
                             "runs all its sequences at once";
  if (options.target == CompileTarget::Cuda) {
    // Before any work: without nvcc there is no artifact to write.
    std::string error;
    if (findNvcc(CudaBuildOptions(), error).empty())
      return emitError(loc) << error;
  }
  for (const std::string &text : options.inputShapes) {
    std::string error;
    if (!parseInputShape(text, importOptions, error))
      return emitError(loc) << error;
  }
  return success();
}

/// Generation (--max-seq S --max-batch B): the programs of a decoder
/// exported with its cache, optimum's text-generation-with-past layout, for
/// `tokens` tokens of B sequences. The decode step (1 token): input_ids and
/// position_ids [B, 1], attention_mask [B, S], and each past_key_values.*
/// input S - 1 positions on its one symbolic dim after the batch. A prefill
/// chunk of C tokens is the same program for C tokens: [B, C] ids and
/// positions, and S - C past positions. tp-kv-cache then makes the past
/// inputs caches of S positions, written at cache_position.
static LogicalResult setGenerationShapes(MLIRContext &context,
                                         const CompileOptions &options,
                                         int64_t tokens,
                                         ONNXImportOptions &importOptions) {
  Location loc = FileLineColLoc::get(&context, options.model, 0, 0);
  if (!importOptions.inputShapes.empty())
    return emitError(loc) << "--max-seq chooses the input shapes itself (one "
                             "token of --max-batch sequences); leave out "
                             "--input-shape";
  FailureOr<SmallVector<ONNXGraphInput>> inputs =
      readONNXGraphInputs(options.model, &context);
  if (failed(inputs))
    return failure();
  int64_t batch = options.maxBatch;
  int64_t past = options.maxSeq - tokens;
  bool haveIds = false, haveCache = false;
  for (const ONNXGraphInput &input : *inputs) {
    StringRef name = input.name;
    SmallVector<int64_t> shape(input.dims);
    auto fail = [&](const Twine &why) {
      return emitError(loc) << "--max-seq: input '" << name << "' " << why;
    };
    if (shape.empty())
      return fail("has no declared shape");
    if (shape[0] >= 0 && shape[0] != batch)
      return fail("has a fixed batch of " + Twine(shape[0]) +
                  "; compile with --max-batch " + Twine(shape[0]));
    shape[0] = batch;
    if (name == "input_ids" || name == "position_ids" ||
        name == "attention_mask") {
      if (shape.size() != 2)
        return fail("must be [batch, sequence]");
      shape[1] = name == "attention_mask" ? past + tokens : tokens;
      haveIds |= name == "input_ids";
    } else if (name.starts_with("past_key_values.") ||
               name.starts_with("past.")) {
      SmallVector<size_t> symbolic;
      for (size_t d = 1; d < shape.size(); ++d)
        if (shape[d] < 0)
          symbolic.push_back(d);
      if (symbolic.size() != 1)
        return fail("must have exactly one symbolic dim after the batch (the "
                    "past positions); it has " +
                    Twine(symbolic.size()));
      shape[symbolic.front()] = past;
      haveCache = true;
    } else {
      return fail("is none of input_ids, attention_mask, position_ids and "
                  "past_key_values.*, the inputs of a decoder exported with "
                  "its cache");
    }
    importOptions.inputShapes[name] = shape;
  }
  if (!haveIds || !haveCache)
    return emitError(loc) << "--max-seq needs a decoder exported with its KV "
                             "cache (inputs input_ids and "
                             "past_key_values.{i}.key/value); this model has "
                          << (haveIds ? "no past_key_values inputs"
                                      : "no input_ids input");
  return success();
}

/// Moves the partitioned prefill chunk of `chunk` tokens into the decode
/// step's module: its functions are renamed (@main -> @prefill_<C>,
/// @main_stage<k> -> @prefill_<C>_stage<k>, others get a `prefill_<C>_`
/// prefix) and its stages tagged tp.prefill_stage and tp.prefill_chunk;
/// the grids must be the decode step's.
static LogicalResult mergePrefill(ModuleOp decode, ModuleOp prefill,
                                  int64_t chunk) {
  MLIRContext *ctx = decode.getContext();
  for (auto grid : prefill.getOps<shard::GridOp>()) {
    auto other = decode.lookupSymbol<shard::GridOp>(grid.getSymName());
    if (!other || other.getShape() != grid.getShape())
      return emitError(decode.getLoc())
             << "the prefill program's grid @" << grid.getSymName()
             << " differs from the decode step's";
  }
  bool pipelined = lookupGrid(prefill, GridRole::Pipeline) != nullptr;
  std::string prefix = "prefill_" + std::to_string(chunk);
  auto i64 = IntegerType::get(ctx, 64);
  SmallVector<func::FuncOp> funcs(prefill.getOps<func::FuncOp>());
  for (func::FuncOp func : funcs) {
    StringRef name = func.getSymName();
    std::string renamed = name.starts_with("main")
                              ? (prefix + name.drop_front(4)).str()
                              : (prefix + "_" + name).str();
    if (decode.lookupSymbol(renamed))
      return func.emitError("the prefill program's function @")
             << renamed << " clashes with the decode step's";
    if (failed(SymbolTable::replaceAllSymbolUses(
            func, StringAttr::get(ctx, renamed), prefill)))
      return func.emitError("cannot rename @") << name;
    func.setSymName(renamed);
    Attribute stage = func->getAttr(TPDialect::kStageAttrName);
    if (stage)
      func->removeAttr(TPDialect::kStageAttrName);
    else if (!pipelined && name == "main")
      stage = IntegerAttr::get(i64, 0);
    if (stage) {
      func->setAttr(TPDialect::kPrefillStageAttrName, stage);
      func->setAttr(TPDialect::kPrefillChunkAttrName,
                    IntegerAttr::get(i64, chunk));
    }
  }
  for (func::FuncOp func : funcs) {
    func->remove();
    decode.push_back(func);
  }
  return success();
}

/// Fails with an error when the caller interrupted the compile (Ctrl-C in
/// tp_mlir.compile) before `stage`.
static LogicalResult checkInterrupted(MLIRContext &context,
                                      const CompileOptions &options,
                                      StringRef stage) {
  if (!options.interrupted || !options.interrupted())
    return success();
  return emitError(UnknownLoc::get(&context))
         << "interrupted before " << stage << "; no artifact was written";
}

/// Micro-batches: the stage functions are compiled for one micro-batch, a
/// 1/M slice of every input's batch dim (dim 0); tp-run feeds them in turn.
static LogicalResult splitIntoMicrobatches(MLIRContext &context,
                                           const CompileOptions &options,
                                           ONNXImportOptions &importOptions) {
  OwningOpRef<ModuleOp> probe =
      importONNXFile(options.model, &context, importOptions);
  if (!probe)
    return failure();
  int64_t m = options.microbatches;
  auto main = probe->lookupSymbol<func::FuncOp>("main");
  for (BlockArgument arg : main.getArguments()) {
    auto name =
        main.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "tp.input");
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    if (type.getRank() == 0 || type.getDimSize(0) % m != 0) {
      InFlightDiagnostic diag = emitError(UnknownLoc::get(&context))
                                << "--microbatches " << m
                                << " must divide the batch dim (dim 0) of "
                                   "input '"
                                << name.getValue() << "'";
      if (type.getRank())
        diag << " (" << type.getDimSize(0) << ")";
      else
        diag << ", a scalar";
      return diag;
    }
    SmallVector<int64_t> shape(type.getShape());
    shape[0] /= m;
    importOptions.inputShapes[name.getValue()] = shape;
  }
  return success();
}

LogicalResult mlir::tp::compileModel(MLIRContext &context,
                                     const CompileOptions &options) {
  ONNXImportOptions importOptions;
  if (failed(checkOptions(context, options, importOptions)))
    return failure();
  context.loadAllAvailableDialects();
  if (options.maxSeq > 0 &&
      failed(setGenerationShapes(context, options, 1, importOptions)))
    return failure();
  if (options.microbatches > 1 &&
      failed(splitIntoMicrobatches(context, options, importOptions)))
    return failure();
  std::optional<::tp::rt::TrainingSpec> training = getTrainingSpec(options);
  // A tied parameter that the exporter wrote twice trains as one weight.
  importOptions.tieWeights = training.has_value();

  OwningOpRef<ModuleOp> module =
      importONNXFile(options.model, &context, importOptions);
  if (!module) {
    if (options.microbatches > 1)
      context.getDiagEngine().emit(UnknownLoc::get(&context),
                                   DiagnosticSeverity::Note)
          << "--microbatches " << options.microbatches
          << " imports the model with dim 0 of every input divided by "
          << options.microbatches
          << "; a graph that fixes its batch size (a Reshape to a "
             "constant shape) cannot be split into micro-batches";
    return failure();
  }

  ParallelizeOptions parallelize;
  parallelize.devices = options.devices;
  parallelize.sequenceParallel = options.sequenceParallel;
  parallelize.padding = options.padding;
  parallelize.stages = options.stages;
  parallelize.microbatches = options.microbatches;
  parallelize.strategy = stringifyChoice(options.strategy).str();
  parallelize.config = options.config;
  parallelize.dtype = stringifyChoice(options.dtype).str();
  // Generation picks the next token from each rank's block of the logits
  // (Session::generate): the decode step does not gather them. A forward
  // pass returns every gathered output as blocks, which the runtime puts
  // together where they are wanted (on thread ranks, each rank copying its
  // own block; under MPI, on rank 0), as vLLM gathers its logits to one
  // rank instead of all-gathering them.
  parallelize.splitOutputs = options.maxSeq > 0
                                 ? ArrayRef<std::string>{"logits"}
                                 : ArrayRef<std::string>{"*"};
  parallelize.gradients = options.gradients || training.has_value();
  // Training: each rank updates its own weights from its own gradients,
  // which stay split as the weights are (none is gathered, whatever dim
  // it is split on).
  parallelize.perArgumentGradients = training.has_value();
  parallelize.recompute = !options.recompute.empty();
  // Mixed-precision training (bf16): the optimizer updates f32 weights,
  // the program computes with them rounded.
  parallelize.masterWeights = training.has_value();
  parallelize.scaledLoss = training && training->lossScale > 0;
  parallelize.splitDimZero = training.has_value();
  parallelize.loss = options.loss;
  parallelize.freeze = options.freeze;
  PassManager pm(&context, ModuleOp::getOperationName());
  if (options.maxSeq > 0) {
    KVCacheOptions cache;
    cache.maxSeq = options.maxSeq;
    pm.addPass(createKVCache(cache));
  }
  buildParallelizePipeline(pm, parallelize);
  // The optimizer's copies of each gradient (--train): AdamW's two
  // moments, SGD's momentum, the sum of accumulated micro-batches, the
  // buffer the data axis all-reduces.
  // Per rank, in gradients' sizes: the optimizer's states (AdamW's two
  // moments, SGD's momentum), split over the data axis by ZeRO-1; the
  // buffers: the sum of accumulated micro-batches and the one the data
  // axis reduces (with ZeRO-1 also this replica's part of it).
  ExplainOptions trainingExplain;
  if (training) {
    trainingExplain.optimizerStates = *options.train == TrainOptimizer::AdamW
                                          ? 2
                                      : training->momentum > 0 ? 1
                                                               : 0;
    trainingExplain.gradientBuffers = (training->accumulate > 1 ? 1 : 0) +
                                      (training->dataParallel > 1 ? 1 : 0);
    trainingExplain.dataParallel = training->dataParallel;
    trainingExplain.bucketBytes = training->bucketBytes;
    trainingExplain.zero = training->zero;
    trainingExplain.lossScale = training->lossScale;
    trainingExplain.lossScaleWindow = training->lossScaleWindow;
  }
  if (options.explain) {
    ExplainOptions explainOptions = trainingExplain;
    pm.addPass(createExplain(explainOptions));
  }
  if (!options.explainJson.empty()) {
    ExplainOptions explainOptions = trainingExplain;
    explainOptions.json = true;
    explainOptions.output = options.explainJson;
    pm.addPass(createExplain(explainOptions));
  }
  if (training)
    (*module)->setAttr(TPDialect::kMutableWeightsAttrName,
                       UnitAttr::get(&context));
  if (failed(checkInterrupted(context, options, "planning")) ||
      failed(pm.run(*module)))
    return failure();
  if (training) {
    FailureOr<std::string> loss = findLossOutput(*module, options.loss);
    if (failed(loss))
      return failure();
    training->loss = *loss;
  }
  if (!options.writeArtifact)
    return success();
  if (failed(checkInterrupted(context, options, "writing the artifact")))
    return failure();

  // Generation: the prompt's chunk programs beside the decode step, on the
  // same weights and caches.
  std::vector<int64_t> chunks = getPrefillChunks(options);
  // Each chunk's stages are the decode step's (they share the weights),
  // though its FLOPs fall otherwise (its logits at one position).
  if (auto pipeline = (*module)->getAttrOfType<DictionaryAttr>(
          TPDialect::kPipelineAttrName))
    if (auto boundaries = pipeline.getAs<ArrayAttr>("boundaries"))
      for (auto ordinal : boundaries.getAsRange<IntegerAttr>())
        parallelize.pipelineBoundaries.push_back(ordinal.getInt());
  for (int64_t chunk : chunks) {
    if (failed(checkInterrupted(context, options, "planning the prefill")))
      return failure();
    ONNXImportOptions prefillImport;
    if (failed(setGenerationShapes(context, options, chunk, prefillImport)))
      return failure();
    // The chunk's causal mask, [batch, 1, chunk, context], and the indices
    // of the export's writes into it must fold, so that tp-kv-cache can
    // read it where the chunk sits.
    prefillImport.maxFoldedElements =
        std::max(prefillImport.maxFoldedElements,
                 4 * options.maxBatch * chunk * options.maxSeq);
    OwningOpRef<ModuleOp> prefill =
        importONNXFile(options.model, &context, prefillImport);
    if (!prefill)
      return failure();
    PassManager prefillPm(&context, ModuleOp::getOperationName());
    KVCacheOptions cache;
    cache.maxSeq = options.maxSeq;
    prefillPm.addPass(createKVCache(cache));
    // Generation reads the logits of the prompt's last token only.
    prefillPm.addPass(createSelectLogits());
    buildParallelizePipeline(prefillPm, parallelize);
    if (failed(prefillPm.run(*prefill)) ||
        failed(mergePrefill(*module, *prefill, chunk)))
      return failure();
  }

  ArtifactOptions artifactOptions;
  artifactOptions.chunkBytes = options.chunkBytes;
  artifactOptions.target = stringifyChoice(options.target).str();
  artifactOptions.maxSeq = options.maxSeq;
  artifactOptions.maxBatch = options.maxSeq > 0 ? options.maxBatch : 0;
  artifactOptions.training = training;
  artifactOptions.onProgress = [&options](uint64_t done, uint64_t total) {
    if (options.progress && !options.progress(done, total))
      return false;
    return !options.interrupted || !options.interrupted();
  };
  ModuleOp partitioned = *module;
  std::string buildCache = getBuildCache(options);
  if (options.target == CompileTarget::Cuda)
    artifactOptions.generateCode =
        [partitioned, &options, &context,
         buildCache](StringRef dir, std::string &source, std::string &library) {
          if (failed(checkInterrupted(context, options, "building the code")))
            return failure();
          CudaBuildOptions build;
          build.arch = options.cudaArch;
          build.extraFlags = options.cxxFlags;
          build.cacheDir = buildCache;
          build.interrupted = options.interrupted;
          return buildCudaLibrary(partitioned, dir, build, source, library);
        };
  if (options.target == CompileTarget::Cpu)
    artifactOptions.generateCode =
        [partitioned, &options, &context,
         buildCache](StringRef dir, std::string &source, std::string &library) {
          if (failed(checkInterrupted(context, options, "building the code")))
            return failure();
          BuildOptions build;
          build.extraFlags = getCxxFlags(options);
          build.cacheDir = buildCache;
          build.interrupted = options.interrupted;
          return buildCpuLibrary(partitioned, dir, build, source, library);
        };
  return writeArtifactAtomically(*module, options.output, artifactOptions);
}
