//===- tp-export-weights.cpp - unsharded weights from an artifact ---------===//
//
// The inverse of tp-compile's sharding: one safetensors file with every
// weight whole, checked against the rank files' checksums first; or, with
// -o NAME.onnx, the ONNX model itself with those weights as initializers.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/WeightExport.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory category("tp-export-weights options");
static cl::opt<std::string> artifact(cl::Positional, cl::Required,
                                     cl::desc("<model.tpa>"),
                                     cl::cat(category));
static cl::opt<std::string>
    output("o", cl::Required,
           cl::desc("File to write: safetensors, or an ONNX model if it "
                    "ends in .onnx (the source model with these weights)"),
           cl::value_desc("full.safetensors|model.onnx"), cl::cat(category));
static cl::opt<std::string> onnxModel(
    "onnx-model",
    cl::desc("With -o NAME.onnx: the ONNX model whose initializers to "
             "replace (default: the model the artifact was compiled from, "
             "as its manifest records)"),
    cl::value_desc("SOURCE.onnx"), cl::cat(category));
static cl::opt<std::string>
    checkpoint("checkpoint",
               cl::desc("The weights of this training checkpoint (tp-run "
                        "--train --save) instead of the artifact's"),
               cl::value_desc("CKPT"), cl::cat(category));
static cl::opt<bool> quiet("quiet", cl::desc("No progress on stderr"),
                           cl::cat(category));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv, "Rebuild a model's unsharded weights from a tp artifact\n");
  std::string error;
  bool onnx = llvm::StringRef(output).ends_with(".onnx");
  if (!onnx && !onnxModel.empty()) {
    llvm::WithColor::error(llvm::errs(), "tp-export-weights")
        << "--onnx-model needs -o NAME.onnx\n";
    return 1;
  }
  bool ok = onnx ? mlir::tp::exportOnnxModel(artifact, onnxModel, output,
                                             !quiet, error, checkpoint)
                 : mlir::tp::exportWeights(artifact, output, !quiet, error,
                                           checkpoint);
  if (!ok) {
    llvm::WithColor::error(llvm::errs(), "tp-export-weights") << error << "\n";
    return 1;
  }
  return 0;
}
