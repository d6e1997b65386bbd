//===- Artifact.h - reading a tp-compile artifact at run time ---*- C++ -*-===//
//
// An artifact is verified before any of it is used: SHA256SUMS covers
// manifest.json and the model library; the manifest is checked against its
// schema (types, ranges, the rank grid, shapes, offsets, dtype sizes, file
// names confined to the artifact) as it is parsed; the library's exported
// signature must equal the one the manifest implies; and each rank file's
// SHA-256 and safetensors header must agree with the manifest. Errors are
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tp::rt {

/// The manifest's `format_version` this runtime reads.
constexpr int64_t kArtifactFormatVersion = TP_ARTIFACT_FORMAT_VERSION;
/// The most ranks a manifest may declare.
constexpr int64_t kMaxRanks = 4096;
/// The longest context, and the largest batch, a decode step may be
/// compiled for.
constexpr int64_t kMaxSequence = int64_t(1) << 24;
/// The most bytes one tensor or one rank file may have (256 TiB).
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;

/// An argument or result of a stage function, or a model input/output.
/// Validated: dtype known, dims non-negative, bytes() below
/// kMaxTensorBytes.
struct TensorSpec {
  std::string kind; // input, weight, cache, output, send
  std::string name;
  std::string dtype; // safetensors spelling: F32, I64, BOOL, ...
  std::vector<int64_t> shape;
  int64_t stage = 0;
  /// For a model input read as indices (an embedding's token ids): the
  /// values it may hold, [first, second].
  std::optional<std::pair<int64_t, int64_t>> indexRange;
  /// For a model output that each rank of the last stage returns a block
  /// of: the dim (rank t holds entries [t * B, (t + 1) * B), B being its
  /// stage result's size there, up to `shape`'s). -1: whole on one rank.
  int64_t splitDim = -1;
  int64_t numElements() const;
  int64_t bytes() const;
};

struct StageSpec {
  int64_t stage = 0;
  std::string function;
  std::vector<int32_t> ranks;
  std::vector<TensorSpec> args, results;
};

/// One weight argument of a rank: where its bytes are, and which part of
/// which ONNX initializer they hold. Validated: the bytes lie inside the
/// rank file, and the shape is what the cut below makes of the
/// initializer's.
struct WeightSpec {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t fileOffset = 0, bytes = 0;
  /// The range in the safetensors data section, as its header gives it.
  uint64_t dataBegin = 0;
  /// The initializer, its shape, and the cut: rows [sliceOffset,
  /// sliceOffset + sliceSize) of `dim` (all of them unless `isSlice`: a
  /// fused projection's Q, K or V), padded to `paddedSize` rows if not 0,
  /// then split over the TP ranks on `dim` if `isSplit`. `dim` is -1 for a
  /// replicated whole weight.
  std::string initializer;
  std::vector<int64_t> globalShape;
  /// The planner's name for the weight's part in the split (column, row,
  /// vocab, ...); informational.
  std::string role;
  int64_t dim = -1, sliceOffset = 0, sliceSize = 0, paddedSize = 0;
  bool isSplit = false, isSlice = false;
  /// [blocks, times] when the range is `blocks` blocks, each repeated
  /// `times` times in place before the split (grouped-query K/V heads the
  /// ranks do not divide); empty otherwise. `dim` is then set even when
  /// the weight is not split.
  std::vector<int64_t> repeat;
};

struct RankSpec {
  int32_t rank = 0;
  int64_t stage = 0, tpIndex = 0;
  /// The stage function the rank runs (its stage's).
  std::string function;
  std::string file, sha256;
  uint64_t bytes = 0;
  std::vector<WeightSpec> weights;
};

/// A generation artifact's prefill chunk program: `length` prompt tokens at
/// once, reading the cache written before them and writing theirs at
/// cache_position, on the decode stages' ranks, weights and KV caches.
struct PrefillSpec {
  int64_t length = 0;
  std::vector<StageSpec> stages;
  std::vector<TensorSpec> inputs, outputs;
};

/// The input through which a training step takes its loss scale
/// (TrainingSpec::lossScale): the Trainer feeds it, not the user's data.
inline constexpr const char *kLossScaleInput = "loss_scale";

/// A training artifact's optimizer (tp-compile --train; `training` in the
/// manifest): what the runtime's Trainer applies to each rank's weights
/// after every step, from the gradients the step returns as outputs
/// `grad.<weight>` (each rank's block, split as its weight).
struct TrainingSpec {
  /// "adamw" (torch.optim.AdamW) or "sgd" (torch.optim.SGD).
  std::string optimizer;
  /// The default learning rate (tp-run --lr overrides it at run time).
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = 0, momentum = 0;
  /// Clip the gradients to this global norm (0: no clipping).
  double clipNorm = 0;
  /// Micro-batches whose gradients are averaged into one step.
  int64_t accumulate = 1;
  /// Data-parallel replicas (tp-compile --data-parallel D): D copies of the
  /// tensor-parallel grid, each training on its own micro-batches, their
  /// gradients averaged over the data axis before every update.
  int64_t dataParallel = 1;
  /// The data axis all-reduces each rank's gradients in buckets of at most
  /// this many bytes (tp-compile --bucket-mb), one collective each.
  int64_t bucketBytes = int64_t(25) << 20;
  /// ZeRO stage over the data axis (tp-compile --zero): 0, each replica
  /// keeps whole optimizer states and all-reduces the gradients; 1, each
  /// bucket's gradients are reduce-scattered, every replica updates its
  /// 1/D of each bucket with its 1/D of the optimizer states, and the
  /// updated weights are all-gathered.
  int64_t zero = 0;
  /// Dynamic loss scaling (tp-compile --loss-scale): 0, none; else the
  /// initial scale, which the program takes as its input `loss_scale` and
  /// starts the backward from. A step whose gradients are not finite is
  /// skipped and the scale halved; `lossScaleWindow` steps in a row
  /// without overflow double it (torch's GradScaler).
  double lossScale = 0;
  int64_t lossScaleWindow = 2000;
  /// Whether the Trainer, not the user's data, feeds the input `name`.
  bool feedsInput(const std::string &name) const {
    return lossScale > 0 && name == kLossScaleInput;
  }
  /// The model output that is the loss.
  std::string loss;
};

struct Manifest {
  std::string dir;
  /// The model tp-compile read, and the partitioned module beside it.
  std::string model, mlir;
  std::string target, library, source;
  int64_t tp = 1, pp = 1, microbatches = 1, ranks = 1;
  /// Generation (`generation` in the manifest): the decode step's longest
  /// context and its batch; 0 for an artifact of one forward pass.
  int64_t maxSeq = 0, maxBatch = 0;
  /// The prefill chunk programs, by ascending length; empty: none.
  std::vector<PrefillSpec> prefill;
  /// A training artifact's optimizer; absent for inference.
  std::optional<TrainingSpec> training;
  /// Initializers of the model that are another's values (a tied
  /// parameter exported twice, #tp.tied_weight): no rank holds them;
  /// tp-export-weights writes them from their source.
  struct TiedWeight {
    std::string copy, source;
    bool transposed = false;
  };
  std::vector<TiedWeight> tied;
  std::vector<StageSpec> stages;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<RankSpec> rankSpecs;
  /// SHA256SUMS: file name -> SHA-256 (lowercase hex).
  std::map<std::string, std::string> checksums;
};

/// Parses manifest text and validates it against the schema; reads no
/// file. `dir` is recorded as the artifact folder and names it in errors.
/// Throws Error naming the first violation.
Manifest parseManifest(const std::string &json, const std::string &dir);

/// manifest.json's text for `manifest`: the schema parseManifest reads, and
/// the only code that writes it (tp-compile fills a Manifest and prints it).
/// Printing a parsed manifest gives the same text back.
std::string printManifest(const Manifest &manifest);

/// Reads `<dir>/SHA256SUMS` and `<dir>/manifest.json`, checks the manifest
/// against its checksum, and parses it.
Manifest loadManifest(const std::string &dir);

/// The path of the model library, after checking that it is a regular file
/// inside the artifact (no symlink) whose SHA-256 is the one SHA256SUMS
/// records. Call before dlopen: a library's static constructors run when
/// it is loaded.
std::string verifyLibrary(const Manifest &manifest);

/// The tp_model_signature() text the manifest implies (format in
/// ArtifactFormat.h).
std::string getManifestSignature(const Manifest &manifest);

/// Checks a loaded library's signature (ModelLibrary::signature()) against
/// the manifest.
void checkLibrarySignature(const Manifest &manifest, const std::string &actual);

/// One rank's weights: the file's bytes (checked) and a pointer per name.
struct RankWeights {
  std::unique_ptr<char, void (*)(void *)> data{nullptr, release};
  std::map<std::string, void *> byName;
};

/// Reads rank `rank`'s weight file whole (a regular file inside the
/// artifact), checks its size and SHA-256 against the manifest and its
/// safetensors header against the manifest's entries, and locates every
/// weight in it.
RankWeights loadRankWeights(const Manifest &manifest, int32_t rank);

/// Checks a rank file's safetensors header (`data`, `size` bytes: the
/// whole file) against `spec`: the rank, stage and TP index in its
/// metadata, and every tensor's dtype, shape and offsets. `path` names the
/// file in errors.
void checkSafeTensorsHeader(const RankSpec &spec, const char *data,
                            uint64_t size, const std::string &path);

/// SHA256SUMS's text (`path` names it in errors): "<64 hex>  <name>" per
/// line, as file name -> SHA-256. Throws Error for a malformed line.
std::map<std::string, std::string> parseChecksums(const std::string &text,
                                                  const std::string &path);

/// Bytes per element of a safetensors dtype name; 0 if unknown.
int64_t dtypeNameBytes(const std::string &dtype);

} // namespace tp::rt

#endif // TP_RUNTIME_ARTIFACT_H
