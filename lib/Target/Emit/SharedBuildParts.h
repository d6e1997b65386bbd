//===- SharedBuildParts.h - what every model library build shares -*- C++
//-*-===//
//
// Every model.cpp opens with the same text (emit::cppModelPrelude: the
// runtime headers, <cmath>, <vector>, the scalar semantics) and every CPU
// model library carries the same glue to the C ABI (RankContext.h's
// TP_CPU_MODEL_LIBRARY part). Parsing the one and compiling the other were
// about 0.9 s and 0.45 s of the 2 s a small model's library took to build.
// With a build cache (tp-compile --build-cache), both are made once per
// compiler, flags and header text and kept there: the prelude precompiled
// for the host compiler (GCC's .gch, Clang's .pch) and passed with
// -include, so the include guard in model.cpp skips the model's own copy;
// the glue as an object the library links. Without a cache, or where one
// cannot be made, the build compiles them as part of model.cpp as before.
//
// An entry is a folder of the cache, `<kind>-<key>`: the sources, the part
// built from them, and `complete`, which holds that part's size. It is made
// in a temporary folder and renamed into place, so no build sees half of
// one; one whose size does not match (a damaged copy) is made again.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_TARGET_EMIT_SHAREDBUILDPARTS_H
#define LIB_TARGET_EMIT_SHAREDBUILDPARTS_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
#include <string>

namespace mlir::tp {

/// A source of a shared part: its file name and its text.
struct SourceFile {
  StringRef name;
  StringRef text;
};

/// The header to pass with -include to a build with `flags` (the compiler
/// first, then the flags that affect code generation: no inputs, outputs
/// or link flags), precompiled in `cacheDir` if it is not there yet.
/// `files` are the prelude first, then the headers it includes. "" when
/// `cacheDir` is empty or the prelude cannot be precompiled, or when
/// `interrupted` (polled as runProgram does) stopped it.
std::string getPrecompiledPrelude(StringRef cacheDir,
                                  ArrayRef<std::string> flags,
                                  ArrayRef<SourceFile> files,
                                  const std::function<bool()> &interrupted);

/// The object file compiled from `files` (the source first, then the
/// headers it includes) with `flags`, as getPrecompiledPrelude; "" when
/// there is no cache or it does not compile.
std::string getSharedObject(StringRef cacheDir, ArrayRef<std::string> flags,
                            ArrayRef<SourceFile> files,
                            const std::function<bool()> &interrupted);

} // namespace mlir::tp

#endif // LIB_TARGET_EMIT_SHAREDBUILDPARTS_H
