//===- Manifest.cpp - manifest.json parsed and validated ------------------===//
//
// Every field the runtime uses is checked here, before any byte of a rank
// file or input is read into a buffer sized from it: a manifest that passes
// describes a grid of ranks laid out as tp-compile lays them out, tensors
// whose byte counts cannot overflow, stage arguments that name model inputs
// and rank-file entries of matching dtype and shape, and entries that lie
// inside their files without overlapping.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Artifact.h"

#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <tuple>

using namespace tp::rt;

int64_t tp::rt::dtypeNameBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64")
    return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32")
    return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
    return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL")
    return 1;
  return 0;
}

int64_t TensorSpec::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

int64_t TensorSpec::bytes() const {
  return numElements() * dtypeNameBytes(dtype);
}

static std::string shapeText(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

/// A file name inside the artifact folder: no directory part, not `.` or
/// `..`, no control characters.
static bool isPlainFileName(const std::string &name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255)
    return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
}

/// A C identifier: stage functions become symbol names.
static bool isIdentifier(const std::string &name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

static bool isIntegerDType(const std::string &dtype) {
  return dtype[0] == 'I' || dtype[0] == 'U';
}

namespace {
/// Typed access to the JSON tree, with errors that name the manifest and
/// the field.
class Reader {
public:
  explicit Reader(std::string path) : path(std::move(path)) {}

  [[noreturn]] void fail(const std::string &what) const {
    throw Error(path + ": " + what);
  }
  const llvm::json::Object &object(const llvm::json::Value *value,
                                   const std::string &what) const {
    const llvm::json::Object *object = value ? value->getAsObject() : nullptr;
    if (!object)
      fail(what + " is not an object");
    return *object;
  }
  const llvm::json::Array &array(const llvm::json::Object &in,
                                 const char *key) const {
    const llvm::json::Array *array = in.getArray(key);
    if (!array)
      fail(std::string("missing array '") + key + "'");
    return *array;
  }
  /// `what`, if given, names the object in errors.
  int64_t integer(const llvm::json::Object &in, const char *key, int64_t min,
                  int64_t max, const std::string &what = "") const {
    std::string prefix = what.empty() ? "" : what + ": ";
    std::optional<int64_t> value = in.getInteger(key);
    if (!value)
      fail(prefix + "missing integer '" + key + "'");
    if (*value < min || *value > max)
      fail(prefix + "'" + key + "' is " + std::to_string(*value) +
           ", outside [" + std::to_string(min) + ", " + std::to_string(max) +
           "]");
    return *value;
  }
  /// A finite number in [min, max].
  double number(const llvm::json::Object &in, const char *key, double min,
                double max, const std::string &what) const {
    std::optional<double> value = in.getNumber(key);
    if (!value)
      fail(what + ": missing number '" + key + "'");
    if (!std::isfinite(*value) || *value < min || *value > max)
      fail(what + ": '" + key + "' is " + std::to_string(*value) +
           ", outside [" + std::to_string(min) + ", " + std::to_string(max) +
           "]");
    return *value;
  }
  std::string string(const llvm::json::Object &in, const char *key,
                     bool required = true) const {
    std::optional<llvm::StringRef> value = in.getString(key);
    if (!value && (required || in.get(key)))
      fail(std::string("missing string '") + key + "'");
    return value ? value->str() : std::string();
  }
  std::vector<int64_t> integers(const llvm::json::Object &in, const char *key,
                                int64_t min, int64_t max) const {
    std::vector<int64_t> values;
    for (const llvm::json::Value &v : array(in, key)) {
      std::optional<int64_t> value = v.getAsInteger();
      if (!value || *value < min || *value > max)
        fail(std::string("'") + key + "' holds a value that is not an " +
             "integer in [" + std::to_string(min) + ", " + std::to_string(max) +
             "]");
      values.push_back(*value);
    }
    return values;
  }
  std::string dtype(const llvm::json::Object &in,
                    const std::string &what) const {
    std::string dtype = string(in, "dtype");
    if (dtypeNameBytes(dtype) == 0)
      fail(what + " has unknown dtype '" + dtype + "'");
    return dtype;
  }
  /// A shape whose byte count at `dtype` fits below kMaxTensorBytes.
  std::vector<int64_t> shape(const llvm::json::Object &in, const char *key,
                             const std::string &dtype,
                             const std::string &what) const {
    std::vector<int64_t> dims = integers(in, key, 0, kMaxTensorBytes);
    if (dims.size() > 32)
      fail(what + " has rank " + std::to_string(dims.size()));
    int64_t bytes = dtypeNameBytes(dtype);
    for (int64_t dim : dims) {
      if (dim != 0 && bytes > kMaxTensorBytes / dim)
        fail(what + " of shape " + shapeText(dims) + " is larger than " +
             std::to_string(kMaxTensorBytes) + " bytes");
      bytes *= dim;
    }
    return dims;
  }
  TensorSpec tensor(const llvm::json::Value &value, const char *defaultKind,
                    const std::string &where) const {
    const llvm::json::Object &in = object(&value, where);
    TensorSpec spec;
    spec.kind = string(in, "kind", false);
    if (spec.kind.empty())
      spec.kind = defaultKind;
    spec.name = string(in, "name", false);
    std::string what =
        where + (spec.name.empty() ? "" : " '" + spec.name + "'");
    spec.dtype = dtype(in, what);
    spec.shape = shape(in, "shape", spec.dtype, what);
    if (in.get("stage"))
      spec.stage = integer(in, "stage", 0, kMaxRanks - 1);
    if (in.get("index_range")) {
      std::vector<int64_t> range =
          integers(in, "index_range", INT64_MIN, INT64_MAX);
      if (range.size() != 2 || range[0] > range[1] ||
          !isIntegerDType(spec.dtype))
        fail(what + " has a bad index_range");
      spec.indexRange = {range[0], range[1]};
    }
    if (in.get("split_dim")) {
      spec.splitDim = integer(in, "split_dim", 0, 31, what);
      if (spec.splitDim >= static_cast<int64_t>(spec.shape.size()))
        fail(what + " has split_dim " + std::to_string(spec.splitDim) +
             " but rank " + std::to_string(spec.shape.size()));
    }
    return spec;
  }

  std::string path;
};
} // namespace

/// Reads how `weight` was cut from its initializer and checks that its
/// shape is what the cut makes of the initializer's on `tp` ranks, as
/// tp-compile's planner computes it (ArtifactPlan.cpp).
static void parseCut(const Reader &reader, const llvm::json::Object &in,
                     int64_t tp, WeightSpec &weight, const std::string &what) {
  weight.initializer = reader.string(in, "initializer");
  weight.globalShape = reader.shape(in, "global_shape", weight.dtype, what);
  int64_t rank = static_cast<int64_t>(weight.shape.size());
  if (static_cast<int64_t>(weight.globalShape.size()) != rank)
    reader.fail(what + " has rank " + std::to_string(rank) +
                " but its initializer '" + weight.initializer + "' has rank " +
                std::to_string(weight.globalShape.size()));
  int64_t splitDim = reader.integer(in, "split_dim", -1, rank - 1, what);
  weight.isSplit = splitDim >= 0;
  weight.dim = splitDim;
  if (in.get("slice")) {
    const llvm::json::Object &slice =
        reader.object(in.get("slice"), what + " slice");
    weight.isSlice = true;
    weight.dim = reader.integer(slice, "dim", 0, rank - 1, what + " slice");
    if (weight.isSplit && splitDim != weight.dim)
      reader.fail(what + " is a slice of dim " + std::to_string(weight.dim) +
                  " split on dim " + std::to_string(splitDim));
    int64_t rows = weight.globalShape[weight.dim];
    weight.sliceOffset =
        reader.integer(slice, "offset", 0, rows, what + " slice");
    weight.sliceSize = reader.integer(
        slice, "size", 1, rows - weight.sliceOffset, what + " slice");
  }
  if (in.get("repeat")) {
    const llvm::json::Object &repeat =
        reader.object(in.get("repeat"), what + " repeat");
    int64_t dim = reader.integer(repeat, "dim", 0, rank - 1, what + " repeat");
    if (weight.dim >= 0 && dim != weight.dim)
      reader.fail(what + " repeats dim " + std::to_string(dim) +
                  " but is cut on dim " + std::to_string(weight.dim));
    weight.dim = dim;
    weight.repeat = {
        reader.integer(repeat, "blocks", 1, kMaxTensorBytes, what + " repeat"),
        reader.integer(repeat, "times", 2, kMaxTensorBytes, what + " repeat")};
  }
  if (!weight.isSlice && weight.dim >= 0)
    weight.sliceSize = weight.globalShape[weight.dim];
  if (!weight.repeat.empty() && weight.sliceSize % weight.repeat[0] != 0)
    reader.fail(what + " repeats " + std::to_string(weight.repeat[0]) +
                " blocks of " + std::to_string(weight.sliceSize) + " rows");
  if (in.get("padded_size")) {
    if (!weight.isSplit)
      reader.fail(what + " is padded but not split");
    weight.paddedSize = reader.integer(in, "padded_size", weight.sliceSize,
                                       kMaxTensorBytes, what);
  }
  for (int64_t d = 0; d < rank; ++d) {
    int64_t expected = weight.globalShape[d];
    if (d == weight.dim) {
      int64_t rows = weight.paddedSize ? weight.paddedSize : weight.sliceSize;
      if (!weight.repeat.empty())
        rows *= weight.repeat[1];
      if (weight.isSplit && rows % tp != 0)
        reader.fail(what + " splits " + std::to_string(rows) + " rows over " +
                    std::to_string(tp) + " ranks");
      expected = weight.isSplit ? rows / tp : rows;
    }
    if (weight.shape[d] != expected)
      reader.fail(what + " has " + std::to_string(weight.shape[d]) +
                  " rows in dim " + std::to_string(d) +
                  " but its cut of initializer '" + weight.initializer + "' " +
                  shapeText(weight.globalShape) + " makes " +
                  std::to_string(expected));
  }
}

static WeightSpec parseWeight(const Reader &reader,
                              const llvm::json::Value &value, int64_t tp,
                              const std::string &where) {
  const llvm::json::Object &in = reader.object(&value, where);
  WeightSpec weight;
  weight.name = reader.string(in, "name");
  std::string what = where + " '" + weight.name + "'";
  weight.dtype = reader.dtype(in, what);
  weight.shape = reader.shape(in, "shape", weight.dtype, what);
  weight.fileOffset = static_cast<uint64_t>(
      reader.integer(in, "file_offset", 8, kMaxTensorBytes));
  std::vector<int64_t> offsets =
      reader.integers(in, "data_offsets", 0, kMaxTensorBytes);
  if (offsets.size() != 2 || offsets[1] < offsets[0])
    reader.fail(what + " has bad data_offsets");
  weight.dataBegin = static_cast<uint64_t>(offsets[0]);
  weight.bytes = static_cast<uint64_t>(offsets[1] - offsets[0]);
  TensorSpec asTensor{"weight", weight.name, weight.dtype, weight.shape};
  if (static_cast<int64_t>(weight.bytes) != asTensor.bytes())
    reader.fail(what + " spans " + std::to_string(weight.bytes) +
                " bytes, but " + weight.dtype + " " + shapeText(weight.shape) +
                " needs " + std::to_string(asTensor.bytes()));
  parseCut(reader, in, tp, weight, what);
  weight.role = reader.string(in, "role", false);
  return weight;
}

static RankSpec parseRank(const Reader &reader, const llvm::json::Value &value,
                          size_t index, int64_t tp) {
  std::string where = "ranks[" + std::to_string(index) + "]";
  const llvm::json::Object &in = reader.object(&value, where);
  RankSpec rank;
  rank.rank =
      static_cast<int32_t>(reader.integer(in, "rank", 0, kMaxRanks - 1));
  rank.stage = reader.integer(in, "stage", 0, kMaxRanks - 1);
  rank.tpIndex = reader.integer(in, "tp_index", 0, kMaxRanks - 1);
  rank.function = reader.string(in, "function", false);
  rank.file = reader.string(in, "file");
  if (!isPlainFileName(rank.file))
    reader.fail(where + " names file '" + rank.file +
                "', which is not a file name inside the artifact");
  rank.sha256 = reader.string(in, "sha256");
  if (rank.sha256.size() != 64 ||
      !std::all_of(rank.sha256.begin(), rank.sha256.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) ||
               (c >= 'a' && c <= 'f');
      }))
    reader.fail(where + " has a sha256 that is not 64 lowercase hex digits");
  rank.bytes =
      static_cast<uint64_t>(reader.integer(in, "bytes", 8, kMaxTensorBytes));
  std::set<std::string> names;
  for (const llvm::json::Value &w : reader.array(in, "weights")) {
    WeightSpec weight = parseWeight(reader, w, tp, where + " weight");
    if (!names.insert(weight.name).second)
      reader.fail(where + " lists weight '" + weight.name + "' twice");
    rank.weights.push_back(std::move(weight));
  }
  // The data section starts right after the header, the same for every
  // entry; entries lie inside the file and do not overlap.
  std::vector<const WeightSpec *> sorted;
  for (const WeightSpec &weight : rank.weights)
    sorted.push_back(&weight);
  std::sort(sorted.begin(), sorted.end(),
            [](const WeightSpec *a, const WeightSpec *b) {
              return a->dataBegin < b->dataBegin;
            });
  uint64_t dataStart = 0, end = 0;
  for (const WeightSpec *weight : sorted) {
    if (weight->fileOffset < weight->dataBegin + 8 ||
        (weight != sorted.front() &&
         weight->fileOffset - weight->dataBegin != dataStart))
      reader.fail(where + " weight '" + weight->name +
                  "': file_offset disagrees with data_offsets");
    dataStart = weight->fileOffset - weight->dataBegin;
    if (weight->dataBegin < end)
      reader.fail(where + " weight '" + weight->name +
                  "' overlaps the entry before it");
    end = weight->dataBegin + weight->bytes;
    if (weight->fileOffset + weight->bytes > rank.bytes)
      reader.fail(where + " weight '" + weight->name + "' ends at byte " +
                  std::to_string(weight->fileOffset + weight->bytes) +
                  ", past the end of " + rank.file + " (" +
                  std::to_string(rank.bytes) + " bytes)");
  }
  return rank;
}

/// `arg` (one micro-batch of a stage) carries `whole` (the model's input or
/// output): the same dtype, and the same shape but for dim 0, which is
/// `microbatches` times smaller, and for a split output's split dim, where
/// the `tp` ranks' blocks cover the whole output (padding past it).
static bool carries(const TensorSpec &arg, const TensorSpec &whole,
                    int64_t microbatches, int64_t tp = 1) {
  if (arg.dtype != whole.dtype || arg.shape.size() != whole.shape.size())
    return false;
  for (size_t d = 0; d < arg.shape.size(); ++d) {
    int64_t dim = arg.shape[d] * (d == 0 ? microbatches : 1);
    if (static_cast<int64_t>(d) == whole.splitDim) {
      // Each block is at most the whole (a 32-bit count of blocks cannot
      // overflow it), and together they cover it.
      if ((d == 0 && microbatches > 1) || dim < 1 || dim > whole.shape[d] ||
          dim * tp < whole.shape[d])
        return false;
    } else if (dim != whole.shape[d]) {
      return false;
    }
  }
  return microbatches == 1 || !arg.shape.empty();
}

static const TensorSpec *findByName(const std::vector<TensorSpec> &list,
                                    const std::string &name) {
  for (const TensorSpec &spec : list)
    if (spec.name == name)
      return &spec;
  return nullptr;
}

/// Checks one program's stages (the decode step or forward pass, or a
/// generation artifact's prefill) against the grid, the rank files and the
/// program's `inputs` and `outputs`; `program` prefixes messages.
static void validateStages(const Reader &reader, const Manifest &manifest,
                           const std::vector<StageSpec> &stages,
                           const std::vector<TensorSpec> &inputs,
                           const std::vector<TensorSpec> &outputs,
                           const std::string &program) {
  if (static_cast<int64_t>(stages.size()) != manifest.pp)
    reader.fail(program + "the grid has pp = " + std::to_string(manifest.pp) +
                " but " + std::to_string(stages.size()) + " stages are listed");
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageSpec &stage = stages[s];
    std::string where = program + "stage " + std::to_string(s);
    if (stage.stage != static_cast<int64_t>(s))
      reader.fail("stages[" + std::to_string(s) + "] is stage " +
                  std::to_string(stage.stage));
    if (!isIdentifier(stage.function))
      reader.fail(where + " names function '" + stage.function +
                  "', which is not an identifier");
    // tp-compile's layout: rank = stage * tp + tp index.
    bool laidOut = static_cast<int64_t>(stage.ranks.size()) == manifest.tp;
    for (size_t t = 0; laidOut && t < stage.ranks.size(); ++t)
      laidOut = stage.ranks[t] ==
                static_cast<int64_t>(s) * manifest.tp + static_cast<int64_t>(t);
    if (!laidOut)
      reader.fail(where + " does not hold ranks " +
                  std::to_string(s * manifest.tp) + " .. " +
                  std::to_string((s + 1) * manifest.tp - 1));
    for (const TensorSpec &arg : stage.args) {
      if (arg.kind == "input") {
        const TensorSpec *input = findByName(inputs, arg.name);
        if (!input || !carries(arg, *input, manifest.microbatches))
          reader.fail(where + " argument '" + arg.name + "' (" + arg.dtype +
                      " " + shapeText(arg.shape) +
                      ") is not one micro-batch of a model input");
      } else if (arg.kind == "weight") {
        for (int32_t r : stage.ranks) {
          const RankSpec &rank = manifest.rankSpecs[r];
          auto it = std::find_if(
              rank.weights.begin(), rank.weights.end(),
              [&](const WeightSpec &w) { return w.name == arg.name; });
          if (it == rank.weights.end())
            reader.fail(where + " argument '" + arg.name + "' is not in " +
                        rank.file);
          if (it->dtype != arg.dtype || it->shape != arg.shape)
            reader.fail(where + " argument '" + arg.name + "' is " + arg.dtype +
                        " " + shapeText(arg.shape) + " but " + rank.file +
                        " holds " + it->dtype + " " + shapeText(it->shape));
        }
      } else if (arg.kind == "cache") {
        // A KV cache: the runtime allocates it; each name once per stage.
        if (manifest.maxSeq == 0)
          reader.fail(where + " has a KV cache argument '" + arg.name +
                      "' but the manifest has no 'generation'");
        if (arg.name.empty() ||
            std::count_if(stage.args.begin(), stage.args.end(),
                          [&](const TensorSpec &other) {
                            return other.kind == "cache" &&
                                   other.name == arg.name;
                          }) != 1)
          reader.fail(where + " has a KV cache argument without a name of "
                              "its own");
      } else {
        reader.fail(where + " has an argument of unknown kind '" + arg.kind +
                    "'");
      }
    }
    for (const TensorSpec &result : stage.results) {
      if (result.kind == "output") {
        const TensorSpec *output = findByName(outputs, result.name);
        if (!output ||
            !carries(result, *output, manifest.microbatches, manifest.tp))
          reader.fail(where + " result '" + result.name +
                      "' is not one micro-batch of a model output");
      } else if (result.kind != "send") {
        reader.fail(where + " has a result of unknown kind '" + result.kind +
                    "'");
      }
    }
  }
  // Every model output is a result of the last stage, once.
  const StageSpec &last = stages.back();
  for (const TensorSpec &output : outputs)
    if (std::count_if(last.results.begin(), last.results.end(),
                      [&](const TensorSpec &r) {
                        return r.kind == "output" && r.name == output.name;
                      }) != 1)
      reader.fail("model output '" + output.name +
                  "' is not one result of the last stage");
}

static void validateSignature(const Reader &reader,
                              const std::vector<TensorSpec> &list,
                              const char *what) {
  std::set<std::string> names;
  for (const TensorSpec &spec : list)
    if (spec.name.empty() || !names.insert(spec.name).second)
      reader.fail(std::string("model ") + what + " '" + spec.name +
                  "' is unnamed or listed twice");
}

/// A program: its stages, inputs and outputs (the manifest's own, or a
/// generation artifact's prefill chunk), `prefix` naming it in errors.
static void parseProgram(const Reader &reader, const llvm::json::Object &from,
                         std::vector<StageSpec> &stages,
                         std::vector<TensorSpec> &inputs,
                         std::vector<TensorSpec> &outputs,
                         const std::string &prefix) {
  for (const llvm::json::Value &value : reader.array(from, "stages")) {
    std::string where =
        prefix + "stages[" + std::to_string(stages.size()) + "]";
    const llvm::json::Object &in = reader.object(&value, where);
    StageSpec stage;
    stage.stage = reader.integer(in, "stage", 0, kMaxRanks - 1);
    stage.function = reader.string(in, "function");
    for (int64_t rank : reader.integers(in, "ranks", 0, kMaxRanks - 1))
      stage.ranks.push_back(static_cast<int32_t>(rank));
    for (const llvm::json::Value &arg : reader.array(in, "args"))
      stage.args.push_back(reader.tensor(arg, "argument", where + " argument"));
    for (const llvm::json::Value &result : reader.array(in, "results"))
      stage.results.push_back(reader.tensor(result, "send", where + " result"));
    stages.push_back(std::move(stage));
  }
  for (const llvm::json::Value &value : reader.array(from, "inputs"))
    inputs.push_back(reader.tensor(value, "input", prefix + "model input"));
  for (const llvm::json::Value &value : reader.array(from, "outputs"))
    outputs.push_back(reader.tensor(value, "output", prefix + "model output"));
  validateSignature(reader, inputs, "input");
  validateSignature(reader, outputs, "output");
}

/// 'generation': the cache's sizes and the prefill chunks' programs.
static void parseGeneration(const Reader &reader,
                            const llvm::json::Value *generation,
                            Manifest &manifest) {
  const llvm::json::Object &in = reader.object(generation, "'generation'");
  manifest.maxSeq = reader.integer(in, "max_seq", 2, kMaxSequence);
  manifest.maxBatch = reader.integer(in, "max_batch", 1, kMaxSequence);
  if (!in.get("prefill"))
    return;
  for (const llvm::json::Value &value : reader.array(in, "prefill")) {
    std::string where =
        "prefill[" + std::to_string(manifest.prefill.size()) + "] ";
    const llvm::json::Object &program =
        reader.object(&value, "'generation." + where + "'");
    PrefillSpec chunk;
    chunk.length = reader.integer(program, "length", 2, manifest.maxSeq - 1);
    if (!manifest.prefill.empty() &&
        chunk.length <= manifest.prefill.back().length)
      reader.fail("generation.prefill's chunks must be listed by "
                  "ascending length");
    parseProgram(reader, program, chunk.stages, chunk.inputs, chunk.outputs,
                 where);
    manifest.prefill.push_back(std::move(chunk));
  }
}

/// 'training': the optimizer and how the trainer runs it, checked against
/// the program's inputs and outputs.
static TrainingSpec parseTraining(const Reader &reader,
                                  const llvm::json::Value *training,
                                  const Manifest &manifest) {
  const llvm::json::Object &in = reader.object(training, "'training'");
  TrainingSpec spec;
  spec.optimizer = reader.string(in, "optimizer");
  if (spec.optimizer != "adamw" && spec.optimizer != "sgd")
    reader.fail("training: unknown optimizer '" + spec.optimizer +
                "' (adamw or sgd)");
  spec.lr = reader.number(in, "lr", 0, 1e6, "training");
  spec.beta1 = reader.number(in, "beta1", 0, 1, "training");
  spec.beta2 = reader.number(in, "beta2", 0, 1, "training");
  spec.eps = reader.number(in, "eps", 0, 1e6, "training");
  spec.weightDecay = reader.number(in, "weight_decay", 0, 1e6, "training");
  spec.momentum = reader.number(in, "momentum", 0, 1, "training");
  spec.clipNorm = reader.number(in, "clip_norm", 0, 1e30, "training");
  spec.accumulate = reader.integer(in, "accumulate", 1, 1 << 20, "training");
  // Absent in manifests written before data parallelism: one replica.
  if (in.get("data_parallel"))
    spec.dataParallel =
        reader.integer(in, "data_parallel", 1, kMaxRanks, "training");
  if (in.get("zero"))
    spec.zero = reader.integer(in, "zero", 0, 1, "training");
  if (in.get("bucket_bytes"))
    spec.bucketBytes =
        reader.integer(in, "bucket_bytes", 4, int64_t(1) << 40, "training");
  if (in.get("loss_scale")) {
    spec.lossScale = reader.number(in, "loss_scale", 0, 1e30, "training");
    spec.lossScaleWindow = reader.integer(in, "loss_scale_window", 1,
                                          int64_t(1) << 40, "training");
    auto input = std::find_if(
        manifest.inputs.begin(), manifest.inputs.end(),
        [](const TensorSpec &i) { return i.name == kLossScaleInput; });
    if (spec.lossScale > 0 &&
        (input == manifest.inputs.end() || input->numElements() != 1 ||
         input->dtype != "F32"))
      reader.fail("training: 'loss_scale' is set but the program has no "
                  "scalar F32 input 'loss_scale' to start its backward "
                  "from");
  }
  spec.loss = reader.string(in, "loss");
  if (manifest.maxSeq > 0 || manifest.pp > 1)
    reader.fail("training: an artifact that trains has one stage and no "
                "'generation'");
  auto loss =
      std::find_if(manifest.outputs.begin(), manifest.outputs.end(),
                   [&](const TensorSpec &o) { return o.name == spec.loss; });
  if (loss == manifest.outputs.end() || loss->numElements() != 1 ||
      loss->dtype != "F32")
    reader.fail("training: the loss '" + spec.loss +
                "' is not a scalar F32 model output");
  return spec;
}

/// 'ranks': one entry per rank of the grid, in grid order.
static void parseRanks(const Reader &reader, const llvm::json::Object &root,
                       Manifest &manifest) {
  const llvm::json::Array &ranks = reader.array(root, "ranks");
  if (static_cast<int64_t>(ranks.size()) != manifest.ranks)
    reader.fail("the grid has " + std::to_string(manifest.ranks) +
                " ranks but " + std::to_string(ranks.size()) + " are listed");
  std::set<std::string> files;
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankSpec rank = parseRank(reader, ranks[r], r, manifest.tp);
    if (rank.rank != static_cast<int64_t>(r) ||
        rank.stage != static_cast<int64_t>(r) / manifest.tp ||
        rank.tpIndex != static_cast<int64_t>(r) % manifest.tp)
      reader.fail("ranks[" + std::to_string(r) + "] is rank " +
                  std::to_string(rank.rank) + " (stage " +
                  std::to_string(rank.stage) + ", tp index " +
                  std::to_string(rank.tpIndex) + "), not rank " +
                  std::to_string(r) + " of the grid");
    if (!files.insert(rank.file).second)
      reader.fail("two ranks read the same file " + rank.file);
    manifest.rankSpecs.push_back(std::move(rank));
  }
}

/// Each prefill chunk's stages, which write the caches the decode step
/// reads.
static void validatePrefill(const Reader &reader, const Manifest &manifest) {
  for (const PrefillSpec &chunk : manifest.prefill) {
    std::string where =
        "prefill chunk of " + std::to_string(chunk.length) + " ";
    validateStages(reader, manifest, chunk.stages, chunk.inputs, chunk.outputs,
                   where);
    // A chunk writes the caches the decode step reads: the same ones.
    for (size_t s = 0; s < manifest.stages.size(); ++s) {
      auto caches = [](const StageSpec &stage) {
        std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>
            list;
        for (const TensorSpec &arg : stage.args)
          if (arg.kind == "cache")
            list.emplace_back(arg.name, arg.dtype, arg.shape);
        std::sort(list.begin(), list.end());
        return list;
      };
      if (caches(manifest.stages[s]) != caches(chunk.stages.at(s)))
        reader.fail(where + "stage " + std::to_string(s) +
                    " does not write the KV caches that decode stage " +
                    std::to_string(s) + " reads");
    }
  }
}

Manifest tp::rt::parseManifest(const std::string &json,
                               const std::string &dir) {
  Manifest manifest;
  manifest.dir = dir;
  Reader reader(dir + "/manifest.json");
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  if (!parsed)
    reader.fail("not valid JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object &root = reader.object(&*parsed, "the manifest");
  if (reader.string(root, "format") != "tp-artifact")
    reader.fail("not a tp-artifact manifest");
  if (std::optional<int64_t> version = root.getInteger("format_version");
      !version || *version != kArtifactFormatVersion)
    reader.fail("format_version " +
                (version ? std::to_string(*version) : std::string("missing")) +
                ", but this tp-mlir reads version " +
                std::to_string(kArtifactFormatVersion) +
                ": compile the model again with this tp-compile");
  manifest.model = reader.string(root, "model", false);
  manifest.mlir = reader.string(root, "mlir", false);
  manifest.target = reader.string(root, "target", false);
  manifest.library = reader.string(root, "library", false);
  manifest.source = reader.string(root, "source", false);
  bool hasCode = manifest.target == "cpu" || manifest.target == "cuda";
  if (hasCode && !isPlainFileName(manifest.library))
    reader.fail("library '" + manifest.library +
                "' is not a file name inside the artifact");
  const llvm::json::Object &grid = reader.object(root.get("grid"), "'grid'");
  manifest.tp = reader.integer(grid, "tp", 1, kMaxRanks);
  manifest.pp = reader.integer(grid, "pp", 1, kMaxRanks);
  manifest.microbatches = reader.integer(grid, "microbatches", 1, 1 << 20);
  manifest.ranks = reader.integer(grid, "ranks", 1, kMaxRanks);
  if (manifest.tp * manifest.pp != manifest.ranks)
    reader.fail("the grid has tp " + std::to_string(manifest.tp) + " x pp " +
                std::to_string(manifest.pp) + " but " +
                std::to_string(manifest.ranks) + " ranks");
  parseProgram(reader, root, manifest.stages, manifest.inputs, manifest.outputs,
               "");
  if (const llvm::json::Value *generation = root.get("generation"))
    parseGeneration(reader, generation, manifest);
  if (const llvm::json::Value *training = root.get("training"))
    manifest.training = parseTraining(reader, training, manifest);
  if (root.get("tied"))
    for (const llvm::json::Value &value : reader.array(root, "tied")) {
      const llvm::json::Object &in = reader.object(&value, "'tied' entry");
      Manifest::TiedWeight tie;
      tie.copy = reader.string(in, "copy");
      tie.source = reader.string(in, "source");
      std::optional<bool> transposed = in.getBoolean("transposed");
      if (!transposed)
        reader.fail("'tied' entry '" + tie.copy +
                    "': missing boolean 'transposed'");
      tie.transposed = *transposed;
      manifest.tied.push_back(std::move(tie));
    }

  parseRanks(reader, root, manifest);
  validateStages(reader, manifest, manifest.stages, manifest.inputs,
                 manifest.outputs, "");
  for (const RankSpec &rank : manifest.rankSpecs) {
    const std::string &function = manifest.stages.at(rank.stage).function;
    if (!rank.function.empty() && rank.function != function)
      reader.fail("ranks[" + std::to_string(rank.rank) + "] runs function '" +
                  rank.function + "', but stage " + std::to_string(rank.stage) +
                  " runs '" + function + "'");
  }
  validatePrefill(reader, manifest);
  return manifest;
}

std::string tp::rt::getManifestSignature(const Manifest &manifest) {
  std::ostringstream os;
  os << "tp-model-signature " << TP_MODEL_SIGNATURE_VERSION << "\n"
     << "grid tp=" << manifest.tp << " pp=" << manifest.pp
     << " microbatches=" << manifest.microbatches << "\n";
  auto list = [&](const std::vector<TensorSpec> &specs) {
    for (size_t i = 0; i < specs.size(); ++i)
      os << (i ? "," : "") << specs[i].dtype << shapeText(specs[i].shape);
  };
  std::vector<StageSpec> all(manifest.stages);
  for (const PrefillSpec &chunk : manifest.prefill)
    all.insert(all.end(), chunk.stages.begin(), chunk.stages.end());
  for (const StageSpec &stage : all) {
    os << stage.function << "(";
    list(stage.args);
    os << ")->(";
    list(stage.results);
    os << ")\n";
  }
  return os.str();
}
