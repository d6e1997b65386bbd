//===- UnpreparedModuleTest.cpp - Emitters on modules not prepared -------===//
//
// The emitters only print what tp-prepare-for-emission recorded in the IR
// (#tp.kernel on each linalg op). tp-translate always prepares the module
// first, so these errors are unreachable from the tools: they guard a caller
// of emitCpp/emitCuda that skips preparation or edits the kernels after it.
// Each message is checked here, on both targets where both have it.
//
//===----------------------------------------------------------------------===//

#include "tp/Driver/Compile.h"
#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

/// An elementwise linalg.generic (a doubling) that carries `kernel`, or no
/// #tp.kernel when it is empty.
std::string doubling(const std::string &kernel) {
  std::string attrs =
      kernel.empty() ? "" : " attrs = {tp.kernel = #tp.kernel<" + kernel + ">}";
  return R"mlir(
#id = affine_map<(i) -> (i)>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %y = linalg.generic {indexing_maps = [#id, #id],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>))mlir" +
         attrs + R"mlir( {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %y : tensor<4xf32>
}
)mlir";
}

enum class Target { Cpu, Cuda };

/// Emits `source` unprepared for `target`; returns the first error, or ""
/// when the emission succeeded.
std::string emitError(const std::string &source, Target target) {
  DialectRegistry registry;
  tp::registerCompileDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    if (diagnostic.getSeverity() == DiagnosticSeverity::Error &&
        message.empty())
      message = diagnostic.str();
    return success();
  });
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&context));
  if (!module)
    return "parse error: " + message;
  std::string code;
  llvm::raw_string_ostream os(code);
  LogicalResult emitted = target == Target::Cpu ? tp::emitCpp(*module, os)
                                                : tp::emitCuda(*module, os);
  if (succeeded(emitted))
    return "";
  return message.empty() ? "failed without an error" : message;
}

TEST(UnpreparedModuleTest, NoKernel) {
  for (Target target : {Target::Cpu, Target::Cuda})
    EXPECT_EQ(emitError(doubling(""), target),
              "code generation: no #tp.kernel (the module was not prepared: "
              "tp-prepare-for-emission)");
}

TEST(UnpreparedModuleTest, GemmOnElementwise) {
  for (Target target : {Target::Cpu, Target::Cuda})
    EXPECT_EQ(emitError(doubling("gemm"), target),
              "code generation: #tp.kernel<gemm> on an op that is not a GEMM");
}

TEST(UnpreparedModuleTest, LookupOnElementwise) {
  EXPECT_EQ(emitError(doubling("lookup"), Target::Cpu),
            "code generation: #tp.kernel<lookup> on an op that is not one");
  EXPECT_EQ(emitError(doubling("scatter_add"), Target::Cpu),
            "code generation: #tp.kernel<scatter_add> on an op that is not "
            "one");
  EXPECT_EQ(emitError(doubling("lookup"), Target::Cuda),
            "code generation: #tp.kernel<lookup> on an op that is not one");
}

TEST(UnpreparedModuleTest, ScatterAddOnCuda) {
  EXPECT_EQ(emitError(doubling("scatter_add"), Target::Cuda),
            "code generation: the CUDA target runs no "
            "#tp.kernel<scatter_add> (tp-select-kernels target=cuda makes "
            "it a loop nest)");
}

TEST(UnpreparedModuleTest, AttentionOnElementwise) {
  for (Target target : {Target::Cpu, Target::Cuda})
    EXPECT_EQ(emitError(doubling("attention"), target),
              "code generation: #tp.kernel<attention> on a product that does "
              "not end a fusable attention chain");
}

TEST(UnpreparedModuleTest, PreparedModuleEmits) {
  // The same op with the kernel tp-select-kernels gives it: no error, so
  // the failures above come from the kernel alone.
  for (Target target : {Target::Cpu, Target::Cuda})
    EXPECT_EQ(emitError(doubling("loop_nest"), target), "");
}

} // namespace
