//===- tp-compile.cpp - ONNX model to a tp-mlir artifact ------------------===//
//
// A command line over mlir::tp::compileModel (include/tp/Driver/Compile.h):
// import, plan and split, write the artifact folder and, for --target cpu
// or cuda, the library built from its emitted C++ or CUDA. Its flags are
// the rows of include/tp/Driver/CompileOptions.def.
//
//===----------------------------------------------------------------------===//

#include "tp/Driver/Compile.h"
#include "tp/Driver/CompileCommandLine.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory category("tp-compile options");

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::tp::CompileCommandLine commandLine(category);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "tp-mlir compiler: ONNX model -> artifact\n");
  mlir::tp::CompileOptions options;
  std::string error;
  if (failed(commandLine.getOptions(options, error))) {
    llvm::WithColor::error(llvm::errs(), "tp-compile") << error << "\n";
    return 1;
  }

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
  llvm::errs() << "tp-compile: wrote " << options.output << " ("
               << options.devices << " x " << options.stages << " ranks)\n";
  return 0;
}
