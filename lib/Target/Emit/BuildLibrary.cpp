//===- BuildLibrary.cpp - emitted C++ to a shared library -----------------===//
//
// tp-compile --target cpu: emit, then run the host C++ compiler. The
// compiler's own diagnostics are passed through; a failure names the file.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Emit/EmitCpp.h"

#include "BuildSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

using namespace mlir;

#include "PackedGemmHeader.inc"
#include "RuntimeHeader.inc"

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

  OwningOpRef<ModuleOp> copy(module.clone());
  if (failed(prepareForEmission(*copy)))
    return failure();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(sourcePath, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return emitError(loc) << "cannot write '" << sourcePath
                            << "': " << ec.message();
    if (failed(emitCpp(*copy, os)))
      return failure();
  }
  if (failed(writeArtifactHeader(loc, outDir, "tp_runtime.h", kRuntimeHeader)) ||
      failed(writeArtifactHeader(loc, outDir, "tp_packed_gemm.h",
                                 kPackedGemmHeader)) ||
      failed(writeModelAbiHeader(loc, outDir)))
    return failure();

  std::string compiler = findCompiler(options);
  if (compiler.empty())
    return emitError(loc) << "no C++ compiler found (set CXX) to build "
                          << sourcePath;
  SmallVector<std::string> args = {compiler,
                                   "-std=c++17",
                                   "-O3",
                                   "-march=native",
                                   "-fPIC",
                                   "-fvisibility=hidden",
                                   "-shared",
                                   "-w",
                                   "-I",
                                   outDir.str(),
                                   sourcePath.str().str(),
                                   "-o",
                                   libraryPath.str().str(),
                                   "-lopenblas"};
  SmallVector<StringRef> extra;
  StringRef(options.extraFlags).split(extra, ' ', -1, /*KeepEmpty=*/false);
  args.append(extra.begin(), extra.end());
  return runCachedBuild(loc, args, outDir,
                        {source, "tp_runtime.h", "tp_packed_gemm.h",
                         "tp_model_abi.h"},
                        libraryPath, options.cacheDir, options.interrupted);
}
