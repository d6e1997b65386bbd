//===- EmitCuda.h - partitioned module to CUDA source -----------*- C++ -*-===//
//
// Turns the SPMD module that tp-parallelize produces into readable CUDA C++
// for one rank, with the same structure as EmitCpp's output: one host
// function per func.func; cuBLAS for contractions, a generated __global__
// kernel for every other linalg.generic, NCCL for collectives, all queued on
// the rank's stream. The library exports the C ABI of tp_model_abi.h
// (defined in include/tp/Runtime/CudaRankContext.h), which tp-run drives
// through dlsym.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_EMIT_EMITCUDA_H
#define TP_TARGET_EMIT_EMITCUDA_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace mlir::tp {

/// Emits `module` (prepared by prepareForEmission) as CUDA C++ to `os`. Ops the
/// emitter cannot lower are reported as errors at their location.
LogicalResult emitCuda(ModuleOp module, llvm::raw_ostream &os);

struct CudaBuildOptions {
  /// The CUDA compiler; empty: as findNvcc looks for it.
  std::string nvcc;
  /// The GPU architecture to compile for (nvcc -arch).
  std::string arch = "sm_90";
  /// Flags for nvcc (appended after the defaults).
  std::string extraFlags;
  /// Where built libraries are kept for identical builds to reuse (empty:
  /// nowhere; tp-compile --build-cache).
  std::string cacheDir;
  /// Polled while the compiler runs: true kills it and fails the build.
  std::function<bool()> interrupted;
};

/// The nvcc to build with: `options.nvcc`, else $NVCC, else nvcc on PATH,
/// else the toolkit's: $CUDA_HOME/bin/nvcc, else $CUDA_PATH/bin/nvcc (an
/// error if the one set has none), else /usr/local/cuda/bin/nvcc.
/// Empty, with the reason in `error`, when there is none to run.
std::string findNvcc(const CudaBuildOptions &options, std::string &error);

/// Writes `<outDir>/model.cu` (the emitted program for a copy of `module`),
/// `<outDir>/tp_cuda_runtime.h`, and compiles them with nvcc into
/// `<outDir>/libmodel.so` linked with cuBLAS, NCCL and the CUDA runtime.
/// Returns the file names.
LogicalResult buildCudaLibrary(ModuleOp module, StringRef outDir,
                               const CudaBuildOptions &options,
                               std::string &source, std::string &library);

/// Registers `tp-translate --emit-cuda`.
void registerEmitCudaTranslation();

} // namespace mlir::tp

#endif // TP_TARGET_EMIT_EMITCUDA_H
