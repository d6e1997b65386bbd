//===- BuildSupport.cpp - headers and compiler runs for library builds ----===//

#include "BuildSupport.h"
#include "BuildCache.h"
#include "tp/Target/Emit/EmitCpp.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>

extern char **environ;

using namespace mlir;

#include "ModelAbiHeader.inc"

LogicalResult mlir::tp::writeArtifactHeader(Location loc, StringRef outDir,
                                            StringRef name, StringRef text) {
  SmallString<256> path(outDir);
  llvm::sys::path::append(path, name);
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return emitError(loc) << "cannot write '" << path << "': " << ec.message();
  os << text;
  os.close();
  if (os.has_error())
    return emitError(loc) << "cannot write '" << path
                          << "': " << os.error().message();
  return success();
}

StringRef mlir::tp::modelAbiHeader() { return kModelAbiHeader; }

LogicalResult mlir::tp::writeModelAbiHeader(Location loc, StringRef outDir) {
  return writeArtifactHeader(loc, outDir, "tp_model_abi.h", kModelAbiHeader);
}

LogicalResult mlir::tp::writeModelSources(
    ModuleOp module, StringRef outDir, StringRef source, StringRef target,
    function_ref<LogicalResult(ModuleOp, raw_ostream &)> emit,
    ArrayRef<RuntimeHeader> headers) {
  Location loc = module.getLoc();
  OwningOpRef<ModuleOp> copy(module.clone());
  if (failed(prepareForEmission(*copy, target)))
    return failure();
  SmallString<256> sourcePath(outDir);
  llvm::sys::path::append(sourcePath, source);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(sourcePath, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return emitError(loc)
             << "cannot write '" << sourcePath << "': " << ec.message();
    if (failed(emit(*copy, os)))
      return failure();
  }
  for (const RuntimeHeader &header : headers)
    if (failed(writeArtifactHeader(loc, outDir, header.name, header.text)))
      return failure();
  return writeModelAbiHeader(loc, outDir);
}

tp::ProgramRun mlir::tp::runProgram(ArrayRef<std::string> args,
                                    const std::function<bool()> &interrupted,
                                    StringRef stdoutPath) {
  ProgramRun run;
  if (interrupted && interrupted()) {
    run.outcome = ProgramRun::Interrupted;
    return run;
  }
  std::vector<char *> argv;
  for (const std::string &arg : args)
    argv.push_back(const_cast<char *>(arg.c_str()));
  argv.push_back(nullptr);
  // An interruptible run has a process group of its own, so that stopping
  // it stops what the driver started too (cc1plus, as, ptxas); otherwise it
  // stays in ours, where a terminal's Ctrl-C reaches it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  if (interrupted) {
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
  }
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  std::string out = stdoutPath.str();
  if (!out.empty()) {
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, 1, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  int spawned = posix_spawnp(&pid, args.front().c_str(), &files, &attributes,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    run.outcome = ProgramRun::NotStarted;
    run.error = spawned;
    return run;
  }
  // Poll, so that a long build (a large model's C++, nvcc) can be stopped.
  while (true) {
    int status = 0;
    pid_t done = waitpid(pid, &status, interrupted ? WNOHANG : 0);
    if (done == pid) {
      if (WIFSIGNALED(status)) {
        run.outcome = ProgramRun::Signalled;
        run.code = WTERMSIG(status);
      } else {
        run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        run.outcome =
            run.code == 0 ? ProgramRun::Succeeded : ProgramRun::Exited;
      }
      return run;
    }
    if (done < 0 && errno != EINTR) {
      run.outcome = ProgramRun::NotStarted;
      run.error = errno;
      return run;
    }
    if (interrupted && interrupted()) {
      ::kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      run.outcome = ProgramRun::Interrupted;
      return run;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

LogicalResult mlir::tp::runBuild(Location loc, ArrayRef<std::string> args,
                                 StringRef sourcePath,
                                 const std::function<bool()> &interrupted) {
  auto failedWith = [&](const Twine &why) {
    return emitError(loc) << "compiling " << sourcePath << " with "
                          << args.front() << " failed" << why;
  };
  ProgramRun run = runProgram(args, interrupted);
  switch (run.outcome) {
  case ProgramRun::Succeeded:
    return success();
  case ProgramRun::NotStarted:
    return failedWith(": " + Twine(std::strerror(run.error)));
  case ProgramRun::Signalled:
    return failedWith(" (killed by signal " + Twine(run.code) + ")");
  case ProgramRun::Exited:
    return failedWith(" (exit code " + Twine(run.code) + ")");
  case ProgramRun::Interrupted:
    return emitError(loc) << "interrupted while compiling " << sourcePath
                          << "; no artifact was written";
  }
  llvm_unreachable("every outcome is handled");
}

LogicalResult
mlir::tp::runCachedBuild(Location loc, ArrayRef<std::string> args,
                         StringRef outDir, ArrayRef<StringRef> inputs,
                         StringRef libraryPath, StringRef cacheDir,
                         const std::function<bool()> &interrupted) {
  BuildCache cache(cacheDir, args, outDir, inputs);
  if (cache.fetch(libraryPath))
    return success();
  SmallString<256> sourcePath(outDir);
  llvm::sys::path::append(sourcePath, inputs.front());
  if (failed(runBuild(loc, args, sourcePath, interrupted)))
    return failure();
  cache.store(loc, libraryPath);
  return success();
}
