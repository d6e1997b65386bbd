//===- BuildLibrary.cpp - emitted C++ to a shared library -----------------===//
//
// tp-compile --target cpu: emit, then run the host C++ compiler. The
// compiler's own diagnostics are passed through; a failure names the file.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Emit/EmitCpp.h"

#include "BuildSupport.h"
#include "CppEmitter.h"
#include "SharedBuildParts.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

using namespace mlir;

#include "MathHeader.inc"
#include "PackedGemmHeader.inc"
#include "RuntimeHeader.inc"
#include "ScalarOpsHeader.inc"

static std::string findCompiler(const tp::BuildOptions &options) {
  if (!options.compiler.empty())
    return options.compiler;
  if (const char *env = std::getenv("CXX"))
    if (*env)
      return env;
  for (StringRef name : {"c++", "g++", "clang++"})
    if (auto path = llvm::sys::findProgramByName(name))
      return *path;
  return "";
}

LogicalResult mlir::tp::buildCpuLibrary(ModuleOp module, StringRef outDir,
                                        const BuildOptions &options,
                                        std::string &source,
                                        std::string &library) {
  Location loc = module.getLoc();
  source = "model.cpp";
  library = "libmodel.so";
  SmallString<256> sourcePath(outDir), libraryPath(outDir);
  llvm::sys::path::append(sourcePath, source);
  llvm::sys::path::append(libraryPath, library);

  if (failed(writeModelSources(module, outDir, source, "cpu", emitCpp,
                               {{"tp_runtime.h", kRuntimeHeader},
                                {"tp_packed_gemm.h", kPackedGemmHeader},
                                {"tp_math.h", kMathHeader},
                                {"tp_scalar_ops.h", kScalarOpsHeader}})))
    return failure();

  std::string compiler = findCompiler(options);
  if (compiler.empty())
    return emitError(loc) << "no C++ compiler found (set CXX) to build "
                          << sourcePath;
  // Flags that shape the code (the shared parts are built with them too),
  // then the build's own. -fno-trapping-math: nothing reads the FP
  // exception flags, and without it GCC keeps a branch around any division
  // it sank under a select (tanhF's), and the loop does not vectorise.
  SmallVector<std::string> flags = {compiler,
                                    "-std=c++17",
                                    "-O3",
                                    "-march=native",
                                    "-fno-trapping-math",
                                    "-fPIC",
                                    "-fvisibility=hidden",
                                    "-w"};
  SmallVector<StringRef> extra;
  StringRef(options.extraFlags).split(extra, ' ', -1, /*KeepEmpty=*/false);
  flags.append(extra.begin(), extra.end());
  std::string glue =
      getSharedObject(options.cacheDir, flags,
                      {{"tp_model_glue.cpp", "#define TP_CPU_MODEL_LIBRARY\n"
                                             "#include \"tp_runtime.h\"\n"},
                       {"tp_runtime.h", kRuntimeHeader},
                       {"tp_model_abi.h", modelAbiHeader()}},
                      options.interrupted);
  if (!glue.empty())
    flags.push_back("-DTP_CPU_MODEL_GLUE_LINKED");
  std::string prelude = emit::cppModelPrelude();
  std::string precompiled =
      getPrecompiledPrelude(options.cacheDir, flags,
                            {{"tp_model_prelude.h", prelude},
                             {"tp_runtime.h", kRuntimeHeader},
                             {"tp_packed_gemm.h", kPackedGemmHeader},
                             {"tp_math.h", kMathHeader},
                             {"tp_scalar_ops.h", kScalarOpsHeader},
                             {"tp_model_abi.h", modelAbiHeader()}},
                            options.interrupted);
  SmallVector<std::string> args(flags.begin(), flags.end());
  args.append({"-shared", "-I", outDir.str()});
  if (!precompiled.empty())
    args.append({"-include", precompiled});
  args.push_back(sourcePath.str().str());
  if (!glue.empty())
    args.push_back(glue);
  args.append({"-o", libraryPath.str().str(), "-lopenblas"});
  return runCachedBuild(loc, args, outDir,
                        {source, "tp_runtime.h", "tp_packed_gemm.h",
                         "tp_math.h", "tp_scalar_ops.h", "tp_model_abi.h"},
                        libraryPath, options.cacheDir, options.interrupted);
}
