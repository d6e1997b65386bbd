//===- Artifact.cpp - manifest.json and rank weight files -----------------===//

#include "tp/Runtime/Artifact.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"
#include "llvm/ADT/StringExtras.h"

#include <fstream>

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

namespace {
/// Typed access to a JSON object with errors that name the manifest.
class Reader {
public:
  explicit Reader(std::string path) : path(std::move(path)) {}

  [[noreturn]] void fail(const std::string &what) const {
    throw Error(path + ": " + what);
  }
  const llvm::json::Object &object(const llvm::json::Value *value,
                                   const char *key) const {
    const llvm::json::Object *object = value ? value->getAsObject() : nullptr;
    if (!object)
      fail(std::string("'") + key + "' is not an object");
    return *object;
  }
  const llvm::json::Array &array(const llvm::json::Object &in,
                                 const char *key) const {
    const llvm::json::Array *array = in.getArray(key);
    if (!array)
      fail(std::string("missing array '") + key + "'");
    return *array;
  }
  int64_t integer(const llvm::json::Object &in, const char *key) const {
    std::optional<int64_t> value = in.getInteger(key);
    if (!value)
      fail(std::string("missing integer '") + key + "'");
    return *value;
  }
  std::string string(const llvm::json::Object &in, const char *key,
                     bool required = true) const {
    std::optional<llvm::StringRef> value = in.getString(key);
    if (!value && required)
      fail(std::string("missing string '") + key + "'");
    return value ? value->str() : std::string();
  }
  std::vector<int64_t> shape(const llvm::json::Object &in,
                             const char *key) const {
    std::vector<int64_t> dims;
    for (const llvm::json::Value &dim : array(in, key)) {
      std::optional<int64_t> value = dim.getAsInteger();
      if (!value)
        fail(std::string("'") + key + "' holds a non-integer");
      dims.push_back(*value);
    }
    return dims;
  }
  TensorSpec tensor(const llvm::json::Value &value,
                    const char *defaultKind) const {
    const llvm::json::Object &in = object(&value, "tensor");
    TensorSpec spec;
    spec.kind = string(in, "kind", false);
    if (spec.kind.empty())
      spec.kind = defaultKind;
    spec.name = string(in, "name", false);
    spec.dtype = string(in, "dtype");
    spec.shape = shape(in, "shape");
    spec.stage = in.getInteger("stage").value_or(0);
    return spec;
  }

  std::string path;
};
} // namespace

Manifest tp::rt::loadManifest(const std::string &dir) {
  Manifest manifest;
  manifest.dir = dir;
  Reader reader(dir + "/manifest.json");
  auto buffer = llvm::MemoryBuffer::getFile(reader.path);
  if (!buffer)
    reader.fail("cannot read: " + buffer.getError().message() +
                " (is this a tp-compile artifact?)");
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*buffer)->getBuffer());
  if (!parsed)
    reader.fail("not valid JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object &root = reader.object(&*parsed, "manifest");
  if (reader.string(root, "format") != "tp-artifact")
    reader.fail("not a tp-artifact manifest");
  if (int64_t version = reader.integer(root, "format_version");
      version != kArtifactFormatVersion)
    reader.fail("format_version " + std::to_string(version) +
                ", but this runtime reads version " +
                std::to_string(kArtifactFormatVersion) +
                ": compile the model again with this tp-compile");
  manifest.target = reader.string(root, "target", false);
  manifest.library = reader.string(root, "library", false);
  manifest.source = reader.string(root, "source", false);
  const llvm::json::Object &grid = reader.object(root.get("grid"), "grid");
  manifest.tp = reader.integer(grid, "tp");
  manifest.pp = reader.integer(grid, "pp");
  manifest.microbatches = reader.integer(grid, "microbatches");
  manifest.ranks = reader.integer(grid, "ranks");
  for (const llvm::json::Value &value : reader.array(root, "stages")) {
    const llvm::json::Object &in = reader.object(&value, "stages");
    StageSpec stage;
    stage.stage = reader.integer(in, "stage");
    stage.function = reader.string(in, "function");
    for (int64_t rank : reader.shape(in, "ranks"))
      stage.ranks.push_back(static_cast<int32_t>(rank));
    if (in.getArray("args")) {
      for (const llvm::json::Value &arg : reader.array(in, "args"))
        stage.args.push_back(reader.tensor(arg, "argument"));
      for (const llvm::json::Value &result : reader.array(in, "results"))
        stage.results.push_back(reader.tensor(result, "send"));
    }
    manifest.stages.push_back(std::move(stage));
  }
  for (const llvm::json::Value &value : reader.array(root, "inputs"))
    manifest.inputs.push_back(reader.tensor(value, "input"));
  for (const llvm::json::Value &value : reader.array(root, "outputs"))
    manifest.outputs.push_back(reader.tensor(value, "output"));
  for (const llvm::json::Value &value : reader.array(root, "ranks")) {
    const llvm::json::Object &in = reader.object(&value, "ranks");
    RankSpec rank;
    rank.rank = static_cast<int32_t>(reader.integer(in, "rank"));
    rank.stage = reader.integer(in, "stage");
    rank.tpIndex = reader.integer(in, "tp_index");
    rank.file = reader.string(in, "file");
    rank.sha256 = reader.string(in, "sha256");
    rank.bytes = static_cast<uint64_t>(reader.integer(in, "bytes"));
    for (const llvm::json::Value &w : reader.array(in, "weights")) {
      const llvm::json::Object &wo = reader.object(&w, "weights");
      WeightSpec weight;
      weight.name = reader.string(wo, "name");
      weight.dtype = reader.string(wo, "dtype");
      weight.shape = reader.shape(wo, "shape");
      weight.fileOffset = static_cast<uint64_t>(reader.integer(wo, "file_offset"));
      std::vector<int64_t> offsets = reader.shape(wo, "data_offsets");
      if (offsets.size() != 2 || offsets[1] < offsets[0])
        reader.fail("bad data_offsets for weight '" + weight.name + "'");
      weight.bytes = static_cast<uint64_t>(offsets[1] - offsets[0]);
      rank.weights.push_back(std::move(weight));
    }
    manifest.rankSpecs.push_back(std::move(rank));
  }
  if (static_cast<int64_t>(manifest.rankSpecs.size()) != manifest.ranks ||
      manifest.tp * manifest.pp != manifest.ranks ||
      static_cast<int64_t>(manifest.stages.size()) != manifest.pp)
    reader.fail("grid, stages and ranks disagree");
  return manifest;
}

RankWeights tp::rt::loadRankWeights(const Manifest &manifest, int32_t rank) {
  const RankSpec &spec = manifest.rankSpecs.at(rank);
  std::string path = manifest.dir + "/" + spec.file;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file)
    throw Error("rank " + std::to_string(rank) + ": cannot open weight file " +
                path);
  uint64_t size = static_cast<uint64_t>(file.tellg());
  if (size != spec.bytes)
    throw Error("rank " + std::to_string(rank) + ": weight file " + path +
                " has " + std::to_string(size) + " bytes, manifest says " +
                std::to_string(spec.bytes) + " (truncated or replaced?)");
  RankWeights weights;
  weights.data.reset(static_cast<char *>(allocate(static_cast<int64_t>(size))));
  file.seekg(0);
  if (!file.read(weights.data.get(), static_cast<std::streamsize>(size)))
    throw Error("rank " + std::to_string(rank) + ": cannot read " + path);
  llvm::SHA256 hasher;
  hasher.update(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(weights.data.get()), size));
  std::string digest = llvm::toHex(hasher.final(), /*LowerCase=*/true);
  if (digest != spec.sha256)
    throw Error("rank " + std::to_string(rank) + ": checksum mismatch in " +
                path + " (sha256 " + digest + ", manifest says " +
                spec.sha256 + "): the weight file is corrupted");
  for (const WeightSpec &weight : spec.weights) {
    if (weight.fileOffset + weight.bytes > size)
      throw Error("rank " + std::to_string(rank) + ": weight '" + weight.name +
                  "' lies outside " + path);
    weights.byName[weight.name] = weights.data.get() + weight.fileOffset;
  }
  return weights;
}
