//===- tp-compile.cpp - ONNX model to a tp-mlir artifact ------------------===//
//
// A command line over mlir::tp::compileModel (include/tp/Driver/Compile.h):
// import, plan and split, write the artifact folder and, for --target cpu
// or cuda, the library built from its emitted C++ or CUDA.
//
//===----------------------------------------------------------------------===//

#include "tp/Driver/Compile.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

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
static cl::opt<bool> gradients(
    "gradients",
    cl::desc("Also compute the gradient of the loss with respect to every "
             "trainable weight, as outputs named grad.<weight>"),
    cl::cat(category));
static cl::opt<std::string>
    loss("loss",
         cl::desc("With --gradients: the output to differentiate (default: "
                  "the only scalar float output)"),
         cl::cat(category));
static cl::opt<std::string>
    freeze("freeze",
           cl::desc("With --gradients: weights whose name matches this "
                    "regex are not trained (no gradient)"),
           cl::cat(category));
static cl::opt<std::string> train(
    "train",
    cl::desc("Compile a training step: the loss, the gradients and the "
             "optimizer the runtime applies after each step (adamw or sgd; "
             "tp-run --train)"),
    cl::value_desc("adamw|sgd"), cl::cat(category));
static cl::opt<double> learningRate(
    "lr", cl::init(1e-3),
    cl::desc("With --train: the learning rate (tp-run --lr overrides it)"),
    cl::cat(category));
static cl::list<double>
    betas("betas", cl::CommaSeparated,
          cl::desc("With --train adamw: beta1,beta2 (default 0.9,0.999)"),
          cl::cat(category));
static cl::opt<double> eps("eps", cl::init(1e-8),
                           cl::desc("With --train adamw: epsilon"),
                           cl::cat(category));
static cl::opt<double> weightDecay(
    "weight-decay",
    cl::desc("With --train: decoupled weight decay for adamw (default "
             "0.01), L2 added to the gradient for sgd (default 0)"),
    cl::cat(category));
static cl::opt<double> momentum("momentum", cl::init(0),
                                cl::desc("With --train sgd: momentum"),
                                cl::cat(category));
static cl::opt<double> clipNorm(
    "clip-norm", cl::init(0),
    cl::desc("With --train: clip the gradients to this global norm (0: "
             "none)"),
    cl::cat(category));
static cl::opt<int64_t> accumulate(
    "accumulate", cl::init(1),
    cl::desc("With --train: micro-batches whose gradients are averaged "
             "into each step"),
    cl::cat(category));
static cl::opt<int64_t>
    maxSeq("max-seq", cl::init(0),
           cl::desc("Compile the decode step of a decoder exported with its "
                    "KV cache, for contexts of up to this many tokens"),
           cl::cat(category));
static cl::opt<int64_t>
    maxBatch("max-batch", cl::init(1),
             cl::desc("Sequences decoded at once (with --max-seq)"),
             cl::cat(category));
static cl::opt<int64_t> prefillLength(
    "prefill-len", cl::init(-1),
    cl::desc("With --max-seq: one prefill chunk of this many tokens, the same "
             "as --prefill-chunks N (0: none, the prompt runs through decode "
             "steps)"),
    cl::cat(category));
static cl::list<int64_t> prefillChunks(
    "prefill-chunks", cl::CommaSeparated,
    cl::desc("With --max-seq: the prompt runs in chunks of these sizes, each "
             "reading the cache written before it, the sequence of them "
             "with the least work (default 16,64,256: those below "
             "--max-seq)"),
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
    dtype("dtype",
          cl::desc("Store an f32 model's weights and activations as bf16 or "
                   "f16, computing and accumulating in f32 (default: the "
                   "model's own types)"),
          cl::value_desc("bf16|f16|f32"), cl::cat(category));
static cl::opt<std::string>
    cudaArch("cuda-arch", cl::init("sm_90"),
             cl::desc("GPU architecture for --target cuda (nvcc -arch)"),
             cl::cat(category));
static cl::opt<std::string>
    cxxFlags("cxx-flags",
             cl::desc("Extra flags for the C++ compiler (--target cpu) or "
                      "nvcc (--target cuda)"),
             cl::cat(category));
static cl::opt<std::string> buildCache(
    "build-cache",
    cl::desc("Keep built libraries in this folder and reuse one when the "
             "generated code, compiler and flags are identical (default: "
             "$TP_BUILD_CACHE; none if unset)"),
    cl::value_desc("dir"), cl::cat(category));
// Tests use a small chunk so that runs cross chunk boundaries.
static cl::opt<uint64_t>
    chunkBytes("chunk-bytes", cl::init(16u << 20), cl::Hidden,
               cl::desc("Bytes read from an initializer at a time"),
               cl::cat(category));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "tp-mlir compiler: ONNX model -> artifact\n");
  mlir::tp::CompileOptions options;
  options.model = inputPath;
  options.output = outputPath;
  options.devices = devices;
  options.sequenceParallel = sequenceParallel;
  options.stages = stages;
  options.microbatches = microbatches;
  options.maxSeq = maxSeq;
  options.maxBatch = maxBatch;
  options.gradients = gradients;
  options.loss = loss;
  options.freeze = freeze;
  if (train.getNumOccurrences()) {
    ::tp::rt::TrainingSpec spec;
    spec.optimizer = train;
    spec.lr = learningRate;
    if (!betas.empty()) {
      if (betas.size() != 2) {
        llvm::WithColor::error(llvm::errs(), "tp-compile")
            << "--betas takes two values, beta1,beta2\n";
        return 1;
      }
      spec.beta1 = betas[0];
      spec.beta2 = betas[1];
    }
    spec.eps = eps;
    spec.weightDecay = weightDecay.getNumOccurrences() ? double(weightDecay)
                       : train == "adamw"                ? 0.01
                                                         : 0.0;
    spec.momentum = momentum;
    spec.clipNorm = clipNorm;
    spec.accumulate = accumulate;
    options.train = spec;
  } else if (learningRate.getNumOccurrences() || betas.getNumOccurrences() ||
             eps.getNumOccurrences() || weightDecay.getNumOccurrences() ||
             momentum.getNumOccurrences() || clipNorm.getNumOccurrences() ||
             accumulate.getNumOccurrences()) {
    llvm::WithColor::error(llvm::errs(), "tp-compile")
        << "--lr, --betas, --eps, --weight-decay, --momentum, --clip-norm "
           "and --accumulate need --train\n";
    return 1;
  }
  options.prefillLength = prefillLength;
  options.prefillChunks.assign(prefillChunks.begin(), prefillChunks.end());
  options.strategy = strategy;
  options.config = config;
  options.inputShapes.assign(inputShapes.begin(), inputShapes.end());
  options.padding = padding;
  options.explain = explain;
  options.target = target;
  options.cudaArch = cudaArch;
  options.dtype = dtype;
  options.cxxFlags = cxxFlags;
  options.chunkBytes = chunkBytes;
  options.buildCache = buildCache;
  if (buildCache.getNumOccurrences() == 0)
    if (const char *dir = std::getenv("TP_BUILD_CACHE"))
      options.buildCache = dir;

  DialectRegistry registry;
  mlir::tp::registerCompileDialects(registry);
  MLIRContext context(registry);
  // Print every diagnostic, warnings included (MLIR's default handler shows
  // only errors): the planner explains each weight it leaves whole.
  context.getDiagEngine().registerHandler([](Diagnostic &diag) {
    llvm::errs() << mlir::tp::formatDiagnostic(diag, "tp-compile");
    return success();
  });
  if (failed(mlir::tp::compileModel(context, options)))
    return 1;
  llvm::errs() << "tp-compile: wrote " << outputPath << " (" << devices << " x "
               << stages << " ranks)\n";
  return 0;
}
