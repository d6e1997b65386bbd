//===- tp-export-weights.cpp - unsharded weights from an artifact ---------===//
//
// The inverse of tp-compile's sharding: one safetensors file with every
// weight whole, checked against the rank files' checksums first.
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
static cl::opt<std::string> output("o", cl::Required,
                                   cl::desc("safetensors file to write"),
                                   cl::value_desc("full.safetensors"),
                                   cl::cat(category));
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
  if (!mlir::tp::exportWeights(artifact, output, !quiet, error, checkpoint)) {
    llvm::WithColor::error(llvm::errs(), "tp-export-weights") << error << "\n";
    return 1;
  }
  return 0;
}
