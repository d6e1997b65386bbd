//===- SharedBuildParts.cpp - what every model library build shares -------===//

#include "SharedBuildParts.h"
#include "BuildCache.h"
#include "BuildSupport.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <optional>

using namespace mlir;
using namespace mlir::tp;

static constexpr StringLiteral kCompleteFile = "complete";

/// Runs `args` with every stream on /dev/null, or stdout into `output`.
static bool runQuietly(ArrayRef<std::string> args,
                       const std::function<bool()> &interrupted,
                       StringRef output = "/dev/null") {
  return runProgram(args, interrupted, output).outcome == ProgramRun::Succeeded;
}

/// True when `dir` holds a complete entry whose built part is `product`.
static bool isComplete(StringRef dir, StringRef product) {
  SmallString<256> marker(dir);
  llvm::sys::path::append(marker, kCompleteFile);
  auto text = llvm::MemoryBuffer::getFile(marker);
  uint64_t expected = 0, actual = 0;
  return text && !(*text)->getBuffer().trim().getAsInteger(10, expected) &&
         !llvm::sys::fs::file_size(product, actual) && actual == expected;
}

/// The entry of `kind` in `cacheDir` for the build that `makeArgs(dir)`
/// runs on `files` written to `dir` and that makes `product` there: its
/// folder, made now if the cache has no complete one. "" when it cannot be
/// made.
static std::string
getEntry(StringRef cacheDir, StringRef kind, ArrayRef<SourceFile> files,
         StringRef product,
         const std::function<SmallVector<std::string>(StringRef)> &makeArgs,
         const std::function<bool()> &interrupted) {
  if (cacheDir.empty() || files.empty())
    return "";
  // createUniqueDirectory puts a relative name under the system's
  // temporary folder: the cache's own must be absolute.
  SmallString<256> scratch(cacheDir);
  if (llvm::sys::fs::make_absolute(scratch) ||
      llvm::sys::fs::create_directories(scratch))
    return "";
  SmallString<256> root = scratch;
  llvm::sys::path::append(scratch, kind + "-tmp");
  SmallString<256> work;
  if (llvm::sys::fs::createUniqueDirectory(scratch, work))
    return "";
  llvm::scope_exit cleanUp([&] { llvm::sys::fs::remove_directories(work); });

  // The key is that of the build in the temporary folder.
  SmallVector<StringRef> names;
  for (const SourceFile &file : files) {
    SmallString<256> path(work);
    llvm::sys::path::append(path, file.name);
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return "";
    os << file.text;
    os.close();
    if (os.has_error())
      return "";
    names.push_back(file.name);
  }
  SmallVector<std::string> args = makeArgs(work);
  std::string key = buildKey(args, work, names);
  if (key.empty())
    return "";
  SmallString<256> entry(root), entryProduct;
  llvm::sys::path::append(entry, kind + "-" + key);
  entryProduct = entry;
  llvm::sys::path::append(entryProduct, product);
  if (isComplete(entry, entryProduct))
    return entry.str().str();

  SmallString<256> built(work);
  llvm::sys::path::append(built, product);
  uint64_t size = 0;
  if (!runQuietly(args, interrupted) || llvm::sys::fs::file_size(built, size))
    return "";
  {
    SmallString<256> marker(work);
    llvm::sys::path::append(marker, kCompleteFile);
    std::error_code ec;
    llvm::raw_fd_ostream os(marker, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return "";
    os << size << "\n";
  }
  // A damaged entry makes way; a complete one another build has just
  // renamed into place wins over ours.
  if (llvm::sys::fs::exists(entry) && !isComplete(entry, entryProduct))
    llvm::sys::fs::remove_directories(entry);
  llvm::sys::fs::rename(work, entry);
  return isComplete(entry, entryProduct) ? entry.str().str() : "";
}

/// The suffix the compiler looks for beside an -include'd header: GCC's
/// .gch or Clang's .pch; none for a compiler it cannot tell.
static std::optional<StringRef>
precompiledSuffix(StringRef compiler,
                  const std::function<bool()> &interrupted) {
  SmallString<128> versionFile;
  if (llvm::sys::fs::createTemporaryFile("tp-cxx-version", "txt", versionFile))
    return std::nullopt;
  std::optional<StringRef> suffix;
  if (runQuietly({compiler.str(), "--version"}, interrupted, versionFile))
    if (auto text = llvm::MemoryBuffer::getFile(versionFile)) {
      StringRef version = (*text)->getBuffer();
      if (version.contains("clang"))
        suffix = ".pch";
      else if (version.contains("Free Software Foundation"))
        suffix = ".gch";
    }
  llvm::sys::fs::remove(versionFile);
  return suffix;
}

std::string
mlir::tp::getPrecompiledPrelude(StringRef cacheDir, ArrayRef<std::string> flags,
                                ArrayRef<SourceFile> files,
                                const std::function<bool()> &interrupted) {
  if (cacheDir.empty() || flags.empty() || files.empty())
    return "";
  std::optional<StringRef> suffix =
      precompiledSuffix(flags.front(), interrupted);
  if (!suffix)
    return "";
  StringRef header = files.front().name;
  std::string product = (header + *suffix).str();
  std::string entry = getEntry(
      cacheDir, "prelude", files, product,
      [&](StringRef dir) {
        SmallString<256> in(dir), out(dir);
        llvm::sys::path::append(in, header);
        llvm::sys::path::append(out, product);
        SmallVector<std::string> args(flags.begin(), flags.end());
        args.append(
            {"-x", "c++-header", in.str().str(), "-o", out.str().str()});
        return args;
      },
      interrupted);
  if (entry.empty())
    return "";
  SmallString<256> path(entry);
  llvm::sys::path::append(path, header);
  return path.str().str();
}

std::string
mlir::tp::getSharedObject(StringRef cacheDir, ArrayRef<std::string> flags,
                          ArrayRef<SourceFile> files,
                          const std::function<bool()> &interrupted) {
  if (cacheDir.empty() || flags.empty() || files.empty())
    return "";
  StringRef source = files.front().name;
  std::string product = (llvm::sys::path::stem(source) + ".o").str();
  std::string entry = getEntry(
      cacheDir, "object", files, product,
      [&](StringRef dir) {
        SmallString<256> in(dir), out(dir);
        llvm::sys::path::append(in, source);
        llvm::sys::path::append(out, product);
        SmallVector<std::string> args(flags.begin(), flags.end());
        args.append({"-c", in.str().str(), "-o", out.str().str()});
        return args;
      },
      interrupted);
  if (entry.empty())
    return "";
  SmallString<256> path(entry);
  llvm::sys::path::append(path, product);
  return path.str().str();
}
