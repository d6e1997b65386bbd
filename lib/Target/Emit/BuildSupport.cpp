//===- BuildSupport.cpp - headers and compiler runs for library builds ----===//

#include "BuildSupport.h"
#include "BuildCache.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
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

LogicalResult mlir::tp::writeModelAbiHeader(Location loc, StringRef outDir) {
  return writeArtifactHeader(loc, outDir, "tp_model_abi.h", kModelAbiHeader);
}

LogicalResult mlir::tp::runBuild(Location loc, ArrayRef<std::string> args,
                                 StringRef sourcePath,
                                 const std::function<bool()> &interrupted) {
  auto failedWith = [&](const Twine &why) {
    return emitError(loc) << "compiling " << sourcePath << " with "
                          << args.front() << " failed" << why;
  };
  std::vector<char *> argv;
  for (const std::string &arg : args)
    argv.push_back(const_cast<char *>(arg.c_str()));
  argv.push_back(nullptr);
  // An interruptible build runs in a process group of its own, so that
  // stopping it stops what the driver started too (cc1plus, as, ptxas);
  // otherwise it stays in ours, where a terminal's Ctrl-C reaches it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  if (interrupted) {
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
  }
  pid_t pid = 0;
  int spawned = posix_spawnp(&pid, args.front().c_str(), nullptr, &attributes,
                            argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0)
    return failedWith(": " + Twine(std::strerror(spawned)));
  // Poll, so that a long build (a large model's C++, nvcc) can be stopped.
  while (true) {
    int status = 0;
    pid_t done = waitpid(pid, &status, interrupted ? WNOHANG : 0);
    if (done == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return success();
      if (WIFSIGNALED(status))
        return failedWith(" (killed by signal " + Twine(WTERMSIG(status)) +
                          ")");
      return failedWith(" (exit code " + Twine(WEXITSTATUS(status)) + ")");
    }
    if (done < 0 && errno != EINTR)
      return failedWith(": waitpid: " + Twine(std::strerror(errno)));
    if (interrupted && interrupted()) {
      ::kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return emitError(loc) << "interrupted while compiling " << sourcePath
                            << "; no artifact was written";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

LogicalResult mlir::tp::runCachedBuild(Location loc, ArrayRef<std::string> args,
                                       StringRef outDir,
                                       ArrayRef<StringRef> inputs,
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
