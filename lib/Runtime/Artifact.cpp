//===- Artifact.cpp - the files of an artifact, checked before use --------===//

#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/Sha256.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace tp::rt;

namespace {
/// A file of the artifact opened for reading: a regular file reached
/// without following a symlink, so that nothing outside the folder is read
/// in its place.
class ArtifactFile {
public:
  /// `what` describes the file in errors ("rank 1: weight file").
  ArtifactFile(const std::string &dir, const std::string &name,
               const std::string &what = "")
      : path(dir + "/" + name) {
    fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      throw Error((what.empty() ? "cannot open " : what + ": cannot open ") +
                  path + ": " + std::strerror(errno) +
                  (errno == ELOOP ? " (a symlink; artifact files must be "
                                    "regular files inside the artifact)"
                                  : ""));
    struct stat info;
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      throw Error(path + " is not a regular file");
    }
    size = static_cast<uint64_t>(info.st_size);
  }
  ArtifactFile(const ArtifactFile &) = delete;
  ArtifactFile &operator=(const ArtifactFile &) = delete;
  ~ArtifactFile() { ::close(fd); }

  /// Reads the whole file into `buffer`, which has `size` bytes.
  void readAll(char *buffer) const {
    uint64_t done = 0;
    while (done < size) {
      ssize_t n = ::pread(fd, buffer + done, size - done, done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw Error("cannot read " + path + ": " +
                    (n < 0 ? std::strerror(errno) : "file shrank"));
      done += static_cast<uint64_t>(n);
    }
  }
  std::string readAll() const {
    std::string text(size, '\0');
    readAll(text.data());
    return text;
  }

  std::string path;
  uint64_t size = 0;
  int fd = -1;
};

} // namespace

std::map<std::string, std::string>
tp::rt::parseChecksums(const std::string &text, const std::string &path) {
  std::map<std::string, std::string> sums;
  size_t begin = 0, line = 1;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    std::string entry = text.substr(begin, end - begin);
    if (entry.size() < 67 || entry[64] != ' ' || entry[65] != ' ')
      throw Error(path + ":" + std::to_string(line) +
                  ": not a sha256sum line ('<sha256>  <file>')");
    sums[entry.substr(66)] = entry.substr(0, 64);
    begin = end + 1;
    ++line;
  }
  return sums;
}

namespace {
/// The checksum SHA256SUMS records for `name`.
const std::string &recorded(const Manifest &manifest, const std::string &name) {
  auto it = manifest.checksums.find(name);
  if (it == manifest.checksums.end())
    throw Error(manifest.dir +
                "/" TP_ARTIFACT_CHECKSUMS " has no checksum for " + name);
  return it->second;
}
} // namespace

Manifest tp::rt::loadManifest(const std::string &dir) {
  if (::access((dir + "/manifest.json").c_str(), F_OK) != 0)
    throw Error(dir + "/manifest.json: cannot read: " + std::strerror(errno) +
                " (is this a tp-compile artifact?)");
  std::string sumsPath = dir + "/" TP_ARTIFACT_CHECKSUMS;
  if (::access(sumsPath.c_str(), F_OK) != 0) {
    // An artifact of an older format has none: say which format it is.
    parseManifest(ArtifactFile(dir, "manifest.json").readAll(), dir);
    throw Error(sumsPath + " is missing: an artifact of format_version " +
                std::to_string(kArtifactFormatVersion) +
                " lists the checksum of every file; compile the model again "
                "with this tp-compile");
  }
  std::map<std::string, std::string> sums = parseChecksums(
      ArtifactFile(dir, TP_ARTIFACT_CHECKSUMS).readAll(), sumsPath);
  std::string text = ArtifactFile(dir, "manifest.json").readAll();
  auto it = sums.find("manifest.json");
  if (it == sums.end())
    throw Error(sumsPath + " has no checksum for manifest.json");
  if (std::string digest = sha256Hex(text.data(), text.size());
      digest != it->second)
    throw Error(dir + "/manifest.json: checksum mismatch (sha256 " + digest +
                ", " TP_ARTIFACT_CHECKSUMS " says " + it->second +
                "): the manifest was changed after tp-compile wrote it");
  Manifest manifest = parseManifest(text, dir);
  manifest.checksums = std::move(sums);
  for (const RankSpec &rank : manifest.rankSpecs)
    if (recorded(manifest, rank.file) != rank.sha256)
      throw Error(sumsPath + " and manifest.json disagree on the checksum of " +
                  rank.file);
  return manifest;
}

std::string tp::rt::verifyLibrary(const Manifest &manifest) {
  ArtifactFile file(manifest.dir, manifest.library, "model library");
  std::vector<char> bytes(file.size);
  file.readAll(bytes.data());
  std::string digest = sha256Hex(bytes.data(), bytes.size());
  const std::string &expected = recorded(manifest, manifest.library);
  if (digest != expected)
    throw Error(file.path + ": checksum mismatch (sha256 " + digest +
                ", " TP_ARTIFACT_CHECKSUMS " says " + expected +
                "): the model library was replaced or corrupted; not loading "
                "it");
  return file.path;
}

void tp::rt::checkLibrarySignature(const Manifest &manifest,
                                   const std::string &actual) {
  std::string path = manifest.dir + "/" + manifest.library;
  std::string expected = getManifestSignature(manifest);
  if (actual == expected)
    return;
  // Name the first line that differs.
  size_t a = 0, e = 0;
  while (true) {
    size_t aEnd = actual.find('\n', a), eEnd = expected.find('\n', e);
    std::string aLine = actual.substr(a, aEnd - a),
                eLine = expected.substr(e, eEnd - e);
    if (aLine != eLine || aEnd == std::string::npos ||
        eEnd == std::string::npos)
      throw Error(path + " was compiled for a different model than " +
                  manifest.dir +
                  "/manifest.json describes: the library says '" + aLine +
                  "', the manifest '" + eLine + "'");
    a = aEnd + 1;
    e = eEnd + 1;
  }
}

void tp::rt::checkSafeTensorsHeader(const RankSpec &spec, const char *data,
                                    uint64_t size, const std::string &path) {
  auto fail = [&](const std::string &what) {
    throw Error("rank " + std::to_string(spec.rank) + ": " + path + ": " +
                what);
  };
  if (size < 8)
    fail("too short for a safetensors header");
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = (headerBytes << 8) | static_cast<unsigned char>(data[i]);
  if (headerBytes > size - 8)
    fail("the safetensors header claims " + std::to_string(headerBytes) +
         " bytes, more than the file holds");
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse(llvm::StringRef(data + 8, headerBytes));
  if (!parsed)
    fail("the safetensors header is not valid JSON: " +
         llvm::toString(parsed.takeError()));
  const llvm::json::Object *header = parsed->getAsObject();
  if (!header)
    fail("the safetensors header is not an object");
  const llvm::json::Object *metadata = header->getObject("__metadata__");
  auto meta = [&](const char *key) -> std::string {
    std::optional<llvm::StringRef> value =
        metadata ? metadata->getString(key) : std::nullopt;
    return value ? value->str() : "(none)";
  };
  if (meta("format") != "tp-artifact" ||
      meta("rank") != std::to_string(spec.rank) ||
      meta("stage") != std::to_string(spec.stage) ||
      meta("tp_index") != std::to_string(spec.tpIndex))
    fail("the file belongs to rank " + meta("rank") + " (stage " +
         meta("stage") + ", tp index " + meta("tp_index") +
         "), not to this one: rank files were swapped or replaced");
  size_t tensors = header->size() - (metadata ? 1 : 0);
  if (tensors != spec.weights.size())
    fail("the header lists " + std::to_string(tensors) +
         " tensors, the manifest " + std::to_string(spec.weights.size()));
  uint64_t dataStart = 8 + headerBytes;
  for (const WeightSpec &weight : spec.weights) {
    const llvm::json::Object *entry = header->getObject(weight.name);
    if (!entry)
      fail("the header has no tensor '" + weight.name + "'");
    std::optional<llvm::StringRef> dtype = entry->getString("dtype");
    std::vector<int64_t> shape, offsets;
    for (const char *key : {"shape", "data_offsets"})
      if (const llvm::json::Array *array = entry->getArray(key))
        for (const llvm::json::Value &v : *array)
          (key[0] == 's' ? shape : offsets)
              .push_back(v.getAsInteger().value_or(-1));
    if (!dtype || *dtype != weight.dtype || shape != weight.shape ||
        offsets.size() != 2 ||
        offsets[0] != static_cast<int64_t>(weight.dataBegin) ||
        offsets[1] != static_cast<int64_t>(weight.dataBegin + weight.bytes) ||
        weight.fileOffset != dataStart + weight.dataBegin)
      fail("the header's entry for '" + weight.name +
           "' disagrees with the manifest (dtype, shape or offsets)");
  }
}

RankWeights tp::rt::loadRankWeights(const Manifest &manifest, int32_t rank) {
  if (rank < 0 || rank >= static_cast<int64_t>(manifest.rankSpecs.size()))
    throw Error("rank " + std::to_string(rank) + " is not in the artifact");
  const RankSpec &spec = manifest.rankSpecs[rank];
  ArtifactFile file(manifest.dir, spec.file, "rank " + std::to_string(rank));
  if (file.size != spec.bytes)
    throw Error("rank " + std::to_string(rank) + ": weight file " + file.path +
                " has " + std::to_string(file.size) + " bytes, manifest says " +
                std::to_string(spec.bytes) + " (truncated or replaced?)");
  RankWeights weights;
  // Every forward pass streams the weights: huge pages where the kernel
  // gives them.
  weights.data.reset(
      static_cast<char *>(allocateLarge(static_cast<int64_t>(file.size))));
  file.readAll(weights.data.get());
  std::string digest = sha256Hex(weights.data.get(), file.size);
  if (digest != spec.sha256)
    throw Error("rank " + std::to_string(rank) + ": checksum mismatch in " +
                file.path + " (sha256 " + digest + ", manifest says " +
                spec.sha256 + "): the weight file is corrupted");
  checkSafeTensorsHeader(spec, weights.data.get(), file.size, file.path);
  // parseManifest checked every entry lies inside the file.
  for (const WeightSpec &weight : spec.weights)
    weights.byName[weight.name] = weights.data.get() + weight.fileOffset;
  return weights;
}
