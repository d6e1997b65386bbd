//===- BuildCache.h - model libraries kept by what they are built from ---*- C++
//-*-===//
//
// tp-compile --build-cache DIR: a library built before from the same source,
// headers, compiler and flags is copied from DIR instead of compiled again
// (the host compiler is ~90% of a small model's compile). The key is a
// SHA-256 of everything the build reads; an entry carries the SHA-256 of its
// library and is checked on every use, so a damaged entry is rebuilt, never
// packaged.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_TARGET_EMIT_BUILDCACHE_H
#define LIB_TARGET_EMIT_BUILDCACHE_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace mlir::tp {

/// The SHA-256 of everything the build that runs `args` on the files
/// `inputs` of `outDir` reads: the compiler (its resolved path, size and
/// date), the arguments (`outDir` left out of them), this CPU where
/// -march=native is among them, and the inputs' names and bytes. "" when
/// the compiler or an input cannot be found.
std::string buildKey(ArrayRef<std::string> args, StringRef outDir,
                     ArrayRef<StringRef> inputs);

class BuildCache {
public:
  /// A cache in `dir` (empty: none) for the build that runs `args` on the
  /// files `inputs` of `outDir`. Paths inside `outDir` do not enter the key,
  /// so the same model built in two folders shares one entry.
  BuildCache(StringRef dir, ArrayRef<std::string> args, StringRef outDir,
             ArrayRef<StringRef> inputs);

  /// Copies the cached library to `libraryPath`; false (and nothing left at
  /// `libraryPath`) when there is none or it fails its checksum.
  bool fetch(StringRef libraryPath) const;

  /// Keeps the library just built at `libraryPath`. A cache that cannot be
  /// written is reported as a warning at `loc`; the build still succeeds.
  void store(Location loc, StringRef libraryPath) const;

private:
  std::string entryPath() const;

  std::string dir;
  std::string key; // empty: no cache, or an input could not be read
};

} // namespace mlir::tp

#endif // LIB_TARGET_EMIT_BUILDCACHE_H
