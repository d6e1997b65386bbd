//===- BuildCache.cpp - model libraries kept by what they are built from --===//
//
// An entry is one file, `<key>.so`, written to a temporary name and renamed,
// so concurrent compiles never see half of one: a line
// "tp-build-cache 1 <sha256 of the library>" and then the library's bytes.
//
//===----------------------------------------------------------------------===//

#include "BuildCache.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::tp;

static constexpr StringLiteral kEntryMagic = "tp-build-cache 1 ";

static std::string sha256Hex(StringRef bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes)),
                     /*LowerCase=*/true);
}

/// Adds a length-prefixed field, so that no two lists of fields hash alike.
static void addField(llvm::SHA256 &hash, StringRef field) {
  hash.update(std::to_string(field.size()) + ":");
  hash.update(field);
}

/// The compiler as its resolved file, size and modification time: a new
/// compiler at the same path (an upgrade) makes a new key.
static bool addCompiler(llvm::SHA256 &hash, StringRef program) {
  std::string path = program.str();
  if (!program.contains('/')) {
    auto found = llvm::sys::findProgramByName(program);
    if (!found)
      return false;
    path = *found;
  }
  SmallString<256> real;
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::real_path(path, real) ||
      llvm::sys::fs::status(real, status))
    return false;
  addField(hash, real);
  addField(hash, std::to_string(status.getSize()));
  addField(hash,
           std::to_string(
               status.getLastModificationTime().time_since_epoch().count()));
  return true;
}

/// -march=native compiles for this machine's CPU: the CPU joins the key.
static void addHostCpu(llvm::SHA256 &hash) {
  addField(hash, llvm::sys::getHostCPUName());
  SmallVector<std::string> features;
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    if (feature.second)
      features.push_back(feature.first().str());
  llvm::sort(features);
  for (const std::string &feature : features)
    addField(hash, feature);
}

std::string mlir::tp::buildKey(ArrayRef<std::string> args, StringRef outDir,
                               ArrayRef<StringRef> inputs) {
  if (args.empty())
    return "";
  llvm::SHA256 hash;
  addField(hash, kEntryMagic);
  if (!addCompiler(hash, args.front()))
    return "";
  bool native = false;
  for (const std::string &arg : ArrayRef(args).drop_front()) {
    StringRef text(arg);
    native |= text.contains("native");
    // The build folder is a fresh temporary one each time.
    if (text.consume_front(outDir))
      addField(hash, "<out>" + text.str());
    else
      addField(hash, text);
  }
  if (native)
    addHostCpu(hash);
  for (StringRef input : inputs) {
    SmallString<256> path(outDir);
    llvm::sys::path::append(path, input);
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer)
      return "";
    addField(hash, input);
    addField(hash, (*buffer)->getBuffer());
  }
  return llvm::toHex(hash.final(), /*LowerCase=*/true);
}

BuildCache::BuildCache(StringRef dir, ArrayRef<std::string> args,
                       StringRef outDir, ArrayRef<StringRef> inputs)
    : dir(dir.str()) {
  if (!dir.empty())
    key = buildKey(args, outDir, inputs);
}

std::string BuildCache::entryPath() const {
  SmallString<256> path(dir);
  llvm::sys::path::append(path, key + ".so");
  return path.str().str();
}

bool BuildCache::fetch(StringRef libraryPath) const {
  if (key.empty())
    return false;
  auto entry = llvm::MemoryBuffer::getFile(entryPath(), /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!entry)
    return false;
  StringRef bytes = (*entry)->getBuffer();
  auto [header, library] = bytes.split('\n');
  if (!header.consume_front(kEntryMagic) || header != sha256Hex(library))
    return false;
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(libraryPath, ec, llvm::sys::fs::OF_None);
    if (!ec) {
      os << library;
      os.close();
      ec = os.error();
    }
  }
  if (!ec)
    return true;
  llvm::sys::fs::remove(libraryPath);
  return false;
}

void BuildCache::store(Location loc, StringRef libraryPath) const {
  if (key.empty())
    return;
  auto warn = [&](const Twine &what, std::error_code ec) {
    emitWarning(loc) << "build cache '" << dir << "': cannot " << what << ": "
                     << ec.message() << " (the library is not cached)";
  };
  auto library = llvm::MemoryBuffer::getFile(libraryPath, /*IsText=*/false,
                                             /*RequiresNullTerminator=*/false);
  if (!library)
    return warn("read " + libraryPath, library.getError());
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return warn("create it", ec);
  std::string entry = entryPath();
  std::string temporary =
      entry + ".tmp-" + std::to_string(llvm::sys::Process::getProcessId());
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(temporary, ec, llvm::sys::fs::OF_None);
    if (!ec) {
      StringRef bytes = (*library)->getBuffer();
      os << kEntryMagic << sha256Hex(bytes) << '\n' << bytes;
      os.close();
      ec = os.error();
    }
  }
  if (!ec)
    ec = llvm::sys::fs::rename(temporary, entry);
  if (ec) {
    llvm::sys::fs::remove(temporary);
    warn("write " + entry, ec);
  }
}
