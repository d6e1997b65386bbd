//===- tp-compile.cpp - ONNX model to a tp-mlir artifact ------------------===//
//
// Imports an ONNX model, runs the same tp-parallelize pipeline that tp-opt
// registers, and writes the artifact folder (manifest, per-rank weight
// shards, partitioned MLIR) and, for --target cpu or cuda, the emitted C++
// or CUDA source and the library built from it.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/Shard/ShardingExtensions.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/Artifact/ArtifactWriter.h"
#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"
#include "tp/Target/ONNX/ImportONNX.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory category("tp-compile options");
static cl::opt<std::string> inputPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::cat(category));
static cl::opt<std::string> outputPath("o", cl::Required,
                                       cl::desc("Artifact folder to write"),
                                       cl::value_desc("model.tpa"),
                                       cl::cat(category));
static cl::opt<int64_t> devices("devices", cl::Required,
                                cl::desc("Tensor-parallel ranks per stage"),
                                cl::cat(category));
static cl::opt<bool> sequenceParallel(
    "sequence-parallel",
    cl::desc("Split activations between blocks on the sequence dim"),
    cl::cat(category));
static cl::opt<int64_t> stages("pp", cl::init(1),
                               cl::desc("Pipeline stages (1: none)"),
                               cl::cat(category));
static cl::opt<int64_t>
    microbatches("microbatches", cl::init(1),
                 cl::desc("Micro-batches per step for the 1F1B schedule"),
                 cl::cat(category));
static cl::opt<std::string> strategy("strategy", cl::init("auto"),
                                     cl::desc("auto or config"),
                                     cl::cat(category));
static cl::opt<std::string> config("config",
                                   cl::desc("JSON rules for --strategy=config"),
                                   cl::cat(category));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Static shape of a model input, e.g. "
                         "input_ids=1x128 (repeatable)"),
                cl::value_desc("name=DIMS"), cl::cat(category));
static cl::opt<bool> padding(
    "padding", cl::init(true),
    cl::desc("Pad vocabularies that the device count does not divide, as "
             "Megatron-LM does (--padding=false: replicate them, with a "
             "warning)"),
    cl::cat(category));
static cl::opt<bool> explain("explain",
                             cl::desc("Print tp-explain's report to stdout"),
                             cl::cat(category));
static cl::opt<std::string>
    target("target", cl::init("none"),
           cl::desc("Code to generate: cpu (C++ with BLAS, built with the "
                    "host compiler), cuda (CUDA with cuBLAS and NCCL, built "
                    "with nvcc), or none (plan and weight shards only)"),
           cl::cat(category));
static cl::opt<std::string>
    cudaArch("cuda-arch", cl::init("sm_90"),
             cl::desc("GPU architecture for --target cuda (nvcc -arch)"),
             cl::cat(category));
static cl::opt<std::string>
    cxxFlags("cxx-flags",
             cl::desc("Extra flags for the C++ compiler (--target cpu) or "
                      "nvcc (--target cuda)"),
             cl::cat(category));
// Tests use a small chunk so that runs cross chunk boundaries.
static cl::opt<uint64_t>
    chunkBytes("chunk-bytes", cl::init(16u << 20), cl::Hidden,
               cl::desc("Bytes read from an initializer at a time"),
               cl::cat(category));

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "tp-compile") << message << "\n";
  return 1;
}

/// "model.onnx: warning: at '/h.0/attn/MatMul': message": the model file
/// and the ONNX node from the op's location (NameLoc(node, model:0:0)).
static void printDiagnosticLine(Location loc, DiagnosticSeverity severity,
                                StringRef message, bool note) {
  std::string file, node;
  loc->walk([&](Location inner) {
    if (auto name = dyn_cast<NameLoc>(inner); name && node.empty())
      node = name.getName().str();
    if (auto fileLoc = dyn_cast<FileLineColLoc>(inner); fileLoc && file.empty())
      file = fileLoc.getFilename().str();
    return WalkResult::advance();
  });
  llvm::raw_ostream &os = llvm::errs();
  os << (file.empty() ? std::string("tp-compile") : file) << ": ";
  switch (severity) {
  case DiagnosticSeverity::Error:
    llvm::WithColor(os, llvm::HighlightColor::Error) << "error";
    break;
  case DiagnosticSeverity::Warning:
    llvm::WithColor(os, llvm::HighlightColor::Warning) << "warning";
    break;
  case DiagnosticSeverity::Note:
    llvm::WithColor(os, llvm::HighlightColor::Note) << "note";
    break;
  case DiagnosticSeverity::Remark:
    llvm::WithColor(os, llvm::HighlightColor::Remark) << "remark";
    break;
  }
  os << ": ";
  // Importer messages already name their node.
  if (!node.empty() && !note && !message.contains(node))
    os << "at '" << node << "': ";
  os << message << "\n";
}

static LogicalResult printDiagnostic(Diagnostic &diag) {
  printDiagnosticLine(diag.getLocation(), diag.getSeverity(), diag.str(),
                      /*note=*/false);
  for (Diagnostic &note : diag.getNotes())
    printDiagnosticLine(note.getLocation(), note.getSeverity(), note.str(),
                        /*note=*/true);
  return success();
}

/// Builds the artifact in a fresh folder beside `path` and renames it into
/// place only when it is complete: a failed compile leaves an existing
/// artifact at `path` as it was. Refuses to replace anything at `path` that
/// is not an artifact.
static LogicalResult writeArtifactAtomically(ModuleOp module, StringRef path,
                                             const tp::ArtifactOptions &options) {
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
  if (failed(tp::writeArtifact(module, building, options))) {
    (void)fs::remove_directories(building);
    return failure();
  }
  bool replacing = fs::exists(path);
  if (replacing)
    if (std::error_code ec = fs::rename(path, old)) {
      (void)fs::remove_directories(building);
      return emitError(loc) << "cannot move the old '" << path
                            << "' aside: " << ec.message();
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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "tp-mlir compiler: ONNX model -> artifact\n");

  if (target != "none" && target != "cpu" && target != "cuda")
    return fail("unknown --target '" + target +
                "'; expected none, cpu or cuda");
  if (devices < 1 || stages < 1 || microbatches < 1)
    return fail("--devices, --pp and --microbatches must be at least 1");
  if (strategy != "auto" && strategy != "config")
    return fail("unknown --strategy '" + strategy +
                "'; expected auto or config");
  if ((strategy == "config") != !config.empty())
    return fail("--strategy=config and --config FILE go together");
  if (target == "cuda") {
    // Before any work: without nvcc there is no artifact to write.
    std::string error;
    if (tp::findNvcc(tp::CudaBuildOptions(), error).empty())
      return fail(error);
  }

  tp::ONNXImportOptions importOptions;
  for (const std::string &text : inputShapes) {
    std::string error;
    if (!tp::parseInputShape(text, importOptions, error))
      return fail(error);
  }

  DialectRegistry registry;
  tp::registerONNXImportDialects(registry);
  registry.insert<tp::TPDialect, shard::ShardDialect>();
  tp::registerShardingExtensions(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Print every diagnostic, warnings included (MLIR's default handler shows
  // only errors): the planner explains each weight it leaves whole.
  context.getDiagEngine().registerHandler(printDiagnostic);

  // Micro-batches: the stage functions are compiled for one micro-batch, a
  // 1/M slice of every input's batch dim (dim 0); tp-run feeds them in turn.
  if (microbatches > 1) {
    if (stages < 2)
      return fail("--microbatches needs a pipeline (--pp 2 or more)");
    OwningOpRef<ModuleOp> probe =
        tp::importONNXFile(inputPath, &context, importOptions);
    if (!probe)
      return 1;
    auto main = probe->lookupSymbol<func::FuncOp>("main");
    for (BlockArgument arg : main.getArguments()) {
      auto name = main.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   "tp.input");
      if (!name)
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() == 0 || type.getDimSize(0) % microbatches != 0)
        return fail("--microbatches " + llvm::Twine(microbatches) +
                    " must divide the batch dim (dim 0) of input '" +
                    name.getValue() + "'" +
                    (type.getRank() ? " (" + llvm::Twine(type.getDimSize(0)) +
                                          ")"
                                    : llvm::Twine(", a scalar")));
      SmallVector<int64_t> shape(type.getShape());
      shape[0] /= microbatches;
      importOptions.inputShapes[name.getValue()] = shape;
    }
  }

  OwningOpRef<ModuleOp> module =
      tp::importONNXFile(inputPath, &context, importOptions);
  if (!module) {
    if (microbatches > 1)
      llvm::WithColor::note(llvm::errs(), "tp-compile")
          << "--microbatches " << microbatches
          << " imports the model with dim 0 of every input divided by "
          << microbatches
          << "; a graph that fixes its batch size (a Reshape to a "
             "constant shape) cannot be split into micro-batches\n";
    return 1;
  }

  tp::ParallelizeOptions options;
  options.devices = devices;
  options.sequenceParallel = sequenceParallel;
  options.padding = padding;
  options.stages = stages;
  options.microbatches = microbatches;
  options.strategy = strategy;
  options.config = config;
  PassManager pm(&context, ModuleOp::getOperationName());
  tp::buildParallelizePipeline(pm, options);
  if (explain)
    pm.addPass(tp::createExplain());
  if (failed(pm.run(*module)))
    return 1;

  tp::ArtifactOptions artifactOptions;
  artifactOptions.chunkBytes = chunkBytes;
  artifactOptions.target = target;
  if (target == "cuda") {
    ModuleOp partitioned = *module;
    artifactOptions.generateCode = [partitioned](StringRef dir,
                                                 std::string &source,
                                                 std::string &library) {
      tp::CudaBuildOptions build;
      build.arch = cudaArch;
      build.extraFlags = cxxFlags;
      return tp::buildCudaLibrary(partitioned, dir, build, source, library);
    };
  }
  if (target == "cpu") {
    ModuleOp partitioned = *module;
    artifactOptions.generateCode = [partitioned](StringRef dir,
                                                 std::string &source,
                                                 std::string &library) {
      tp::BuildOptions build;
      build.extraFlags = cxxFlags;
      return tp::buildCpuLibrary(partitioned, dir, build, source, library);
    };
  }
  if (failed(writeArtifactAtomically(*module, outputPath, artifactOptions)))
    return 1;
  llvm::errs() << "tp-compile: wrote " << outputPath << " (" << devices << " x "
               << stages << " ranks)\n";
  return 0;
}
