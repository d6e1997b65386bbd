//===- Artifact.h - reading a tp-compile artifact at run time ---*- C++ -*-===//
//
// manifest.json parsed into plain structs, and one rank's weight file read
// and checked against the SHA-256 the compiler recorded. Errors are
// tp::rt::Error naming the file and what is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_ARTIFACT_H
#define TP_RUNTIME_ARTIFACT_H

#include "tp/Runtime/ArtifactFormat.h"
#include "tp/Runtime/RankContext.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tp::rt {

/// The manifest's `format_version` this runtime reads.
constexpr int64_t kArtifactFormatVersion = TP_ARTIFACT_FORMAT_VERSION;

/// An argument or result of a stage function, or a model input/output.
struct TensorSpec {
  std::string kind; // input, weight, output, send
  std::string name;
  std::string dtype; // safetensors spelling: F32, I64, BOOL, ...
  std::vector<int64_t> shape;
  int64_t stage = 0;
  int64_t numElements() const;
  int64_t bytes() const;
};

struct StageSpec {
  int64_t stage = 0;
  std::string function;
  std::vector<int32_t> ranks;
  std::vector<TensorSpec> args, results;
};

struct WeightSpec {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t fileOffset = 0, bytes = 0;
};

struct RankSpec {
  int32_t rank = 0;
  int64_t stage = 0, tpIndex = 0;
  std::string file, sha256;
  uint64_t bytes = 0;
  std::vector<WeightSpec> weights;
};

struct Manifest {
  std::string dir;
  std::string target, library, source;
  int64_t tp = 1, pp = 1, microbatches = 1, ranks = 1;
  std::vector<StageSpec> stages;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<RankSpec> rankSpecs;
};

/// Reads `<dir>/manifest.json`.
Manifest loadManifest(const std::string &dir);

/// One rank's weights: the file's bytes (checked) and a pointer per name.
struct RankWeights {
  std::unique_ptr<char, void (*)(void *)> data{nullptr, release};
  std::map<std::string, void *> byName;
};

/// Reads rank `rank`'s weight file whole, checks its size and SHA-256
/// against the manifest, and locates every weight in it.
RankWeights loadRankWeights(const Manifest &manifest, int32_t rank);

/// Bytes per element of a safetensors dtype name; 0 if unknown.
int64_t dtypeNameBytes(const std::string &dtype);

} // namespace tp::rt

#endif // TP_RUNTIME_ARTIFACT_H
