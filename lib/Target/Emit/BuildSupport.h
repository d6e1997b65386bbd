//===- BuildSupport.h - what both library builds share ----------*- C++ -*-===//
//
// The emitted source of a model library includes its runtime header
// (tp_runtime.h or tp_cuda_runtime.h), which includes tp_model_abi.h, the
// library's C ABI; tp-compile writes them beside the source, then runs the
// host compiler or nvcc, which the caller may interrupt.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_TARGET_EMIT_BUILDSUPPORT_H
#define LIB_TARGET_EMIT_BUILDSUPPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"

#include <functional>
#include <string>

namespace mlir::tp {

/// Writes `text` to `outDir`/`name`; an error names the file.
LogicalResult writeArtifactHeader(Location loc, StringRef outDir,
                                  StringRef name, StringRef text);

/// The text of tp_model_abi.h.
StringRef modelAbiHeader();

/// Writes tp_model_abi.h into `outDir`.
LogicalResult writeModelAbiHeader(Location loc, StringRef outDir);

/// A file of the runtime that travels beside the emitted source.
struct RuntimeHeader {
  StringRef name;
  StringRef text;
};

/// What both builds do before compiling: `emit` (emitCpp or emitCuda) run
/// on a copy of `module` prepared for `target` (prepareForEmission) into
/// `outDir`/`source`, and `headers` and tp_model_abi.h written beside it.
/// The module itself is not changed.
LogicalResult
writeModelSources(ModuleOp module, StringRef outDir, StringRef source,
                  StringRef target,
                  function_ref<LogicalResult(ModuleOp, raw_ostream &)> emit,
                  ArrayRef<RuntimeHeader> headers);

/// How a program that runProgram started ended.
struct ProgramRun {
  enum Outcome { Succeeded, Exited, Signalled, NotStarted, Interrupted };
  Outcome outcome = NotStarted;
  /// The exit code (Exited) or the signal (Signalled).
  int code = 0;
  /// errno when it could not be started or waited for.
  int error = 0;
};

/// Runs `args` (args[0] is the program, found on PATH), polling
/// `interrupted` (if set) while it runs: when it returns true the program
/// and what it started are killed. With a `stdoutPath`, its standard output
/// goes there and its other streams to /dev/null; otherwise they are ours.
ProgramRun runProgram(ArrayRef<std::string> args,
                      const std::function<bool()> &interrupted,
                      StringRef stdoutPath = "");

/// Runs `args` (args[0] is the program) to build `sourcePath`, polling
/// `interrupted` (if set) while it runs: when it returns true the build is
/// killed. Errors name the source, the program and its exit code.
LogicalResult runBuild(Location loc, ArrayRef<std::string> args,
                       StringRef sourcePath,
                       const std::function<bool()> &interrupted);

/// Builds `libraryPath` in `outDir` from the files `inputs` there, as
/// runBuild does; with a `cacheDir`, a library an identical build left there
/// is copied instead (BuildCache.h), and a new one is kept there.
LogicalResult runCachedBuild(Location loc, ArrayRef<std::string> args,
                             StringRef outDir, ArrayRef<StringRef> inputs,
                             StringRef libraryPath, StringRef cacheDir,
                             const std::function<bool()> &interrupted);

} // namespace mlir::tp

#endif // LIB_TARGET_EMIT_BUILDSUPPORT_H
