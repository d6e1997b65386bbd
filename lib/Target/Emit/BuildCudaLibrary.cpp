//===- BuildCudaLibrary.cpp - emitted CUDA to a shared library ------------===//
//
// tp-compile --target cuda: emit, then run nvcc. nvcc's own diagnostics are
// passed through; a failure names the file. Kernels call std:: math and
// std::numeric_limits, whose constexpr host functions nvcc accepts in device
// code only with --expt-relaxed-constexpr.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"

#include "BuildSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

using namespace mlir;

#include "CudaRuntimeHeader.inc"
#include "ScalarOpsHeader.inc"

/// Where the CUDA toolkit's installer puts nvcc (a link to the newest
/// toolkit).
static constexpr const char *kStandardNvcc = "/usr/local/cuda/bin/nvcc";

std::string mlir::tp::findNvcc(const CudaBuildOptions &options,
                               std::string &error) {
  std::string path = options.nvcc;
  StringRef origin = "the build options";
  if (path.empty())
    if (const char *env = std::getenv("NVCC"))
      path = env, origin = "NVCC";
  if (!path.empty()) {
    // A bare name is looked up on PATH; findProgramByName returns a path
    // with a slash unchecked.
    if (StringRef(path).contains('/')) {
      if (llvm::sys::fs::can_execute(path))
        return path;
    } else if (auto found = llvm::sys::findProgramByName(path)) {
      return *found;
    }
    error = ("--target cuda: " + origin + " names '" + path +
             "', which is not an executable")
                .str();
    return "";
  }
  if (auto found = llvm::sys::findProgramByName("nvcc"))
    return *found;
  // The toolkit's install prefix, where a shell that did not source the
  // toolkit's profile (CI, cron, commands over ssh) has no nvcc on PATH: the
  // one that CUDA_HOME or CUDA_PATH names, else the standard one.
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"}) {
    const char *prefix = std::getenv(variable);
    if (!prefix || !*prefix)
      continue;
    std::string candidate = std::string(prefix) + "/bin/nvcc";
    if (llvm::sys::fs::can_execute(candidate))
      return candidate;
    error = ("--target cuda: " + Twine(variable) + " names '" + prefix +
             "', which has no bin/nvcc")
                .str();
    return "";
  }
  if (llvm::sys::fs::can_execute(kStandardNvcc))
    return kStandardNvcc;
  error = "--target cuda needs nvcc, the CUDA toolkit's compiler: none on "
          "PATH or in " +
          std::string(kStandardNvcc) +
          "; put it on PATH, or set NVCC or CUDA_HOME";
  return "";
}

LogicalResult mlir::tp::buildCudaLibrary(ModuleOp module, StringRef outDir,
                                         const CudaBuildOptions &options,
                                         std::string &source,
                                         std::string &library) {
  Location loc = module.getLoc();
  std::string error;
  std::string nvcc = findNvcc(options, error);
  if (nvcc.empty())
    return emitError(loc) << error;

  source = "model.cu";
  library = "libmodel.so";
  SmallString<256> sourcePath(outDir), libraryPath(outDir);
  llvm::sys::path::append(sourcePath, source);
  llvm::sys::path::append(libraryPath, library);

  if (failed(writeModelSources(module, outDir, source, "cuda", emitCuda,
                               {{"tp_cuda_runtime.h", kCudaRuntimeHeader},
                                {"tp_scalar_ops.h", kScalarOpsHeader}})))
    return failure();

  SmallVector<std::string> args = {nvcc,
                                   "-std=c++17",
                                   "-arch=" + options.arch,
                                   "-O3",
                                   "--expt-relaxed-constexpr",
                                   "-shared",
                                   "-Xcompiler",
                                   "-fPIC,-fvisibility=hidden",
                                   "-w",
                                   "-I",
                                   outDir.str(),
                                   sourcePath.str().str(),
                                   "-o",
                                   libraryPath.str().str(),
                                   "-lcublas",
                                   "-lnccl",
                                   "-lcudart"};
  SmallVector<StringRef> extra;
  StringRef(options.extraFlags).split(extra, ' ', -1, /*KeepEmpty=*/false);
  args.append(extra.begin(), extra.end());
  return runCachedBuild(
      loc, args, outDir,
      {source, "tp_cuda_runtime.h", "tp_scalar_ops.h", "tp_model_abi.h"},
      libraryPath, options.cacheDir, options.interrupted);
}
