//===- WeightExport.cpp - unsharded weights from an artifact --------------===//
//
// Reassembles each weight from the ranks of the first stage that holds it:
// for a split on dim d, the output is, row by row of the dims before d, rank
// 0's run, rank 1's run, ... Rank files are read through small buffers, so
// memory stays bounded whatever the model's size. Checksums are verified
// before anything is written, so a corrupted file never yields weights.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/WeightExport.h"

#include "tp/Target/Artifact/SafeTensors.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::tp;
using namespace mlir::tp::artifact;
using llvm::StringRef;

namespace {

constexpr uint64_t kChunkBytes = 16u << 20;

/// A rank file read at arbitrary offsets through a 1 MiB window, since
/// reassembly reads each rank's shard in order but in short runs.
class RankReader {
public:
  bool open(const std::string &path, std::string &error) {
    this->path = path;
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      error = "cannot open rank file '" + path + "': " + std::strerror(errno);
    return fd >= 0;
  }
  ~RankReader() {
    if (fd >= 0)
      ::close(fd);
  }

  bool read(uint64_t offset, uint64_t length, char *dst, std::string &error) {
    while (length) {
      if (offset >= start && offset < start + filled) {
        uint64_t n = std::min(length, start + filled - offset);
        std::memcpy(dst, window.data() + (offset - start), n);
        dst += n;
        offset += n;
        length -= n;
        continue;
      }
      if (length >= window.size())
        return readRaw(offset, length, dst, error);
      start = offset;
      filled = 0;
      ssize_t got = ::pread(fd, window.data(), window.size(), offset);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        error = "cannot read rank file '" + path + "'";
        return false;
      }
      filled = got;
    }
    return true;
  }

  const std::string &getPath() const { return path; }
  int getFd() const { return fd; }

private:
  bool readRaw(uint64_t offset, uint64_t length, char *dst,
               std::string &error) {
    while (length) {
      ssize_t got = ::pread(fd, dst, length, offset);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        error = "cannot read rank file '" + path + "'";
        return false;
      }
      dst += got;
      offset += got;
      length -= got;
    }
    return true;
  }

  std::string path;
  int fd = -1;
  std::vector<char> window = std::vector<char>(1 << 20);
  uint64_t start = 0, filled = 0;
};

/// One rank's shard of a weight.
struct Shard {
  RankReader *file = nullptr;
  uint64_t offset = 0; // in the file
};

struct Weight {
  std::string name, dtype;
  std::vector<int64_t> globalShape, localShape;
  int64_t splitDim = -1;
  std::vector<int64_t> pieces; // along splitDim; empty: one piece
  int64_t padded = 0;          // padded_size: zeros past globalShape
  uint64_t bytes = 0, elementBytes = 0;
  int64_t stage = -1;
  std::map<int64_t, Shard> shards; // by tp index
};

std::vector<int64_t> getShape(const llvm::json::Object &obj, StringRef key) {
  std::vector<int64_t> shape;
  if (const llvm::json::Array *array = obj.getArray(key))
    for (const llvm::json::Value &dim : *array)
      shape.push_back(dim.getAsInteger().value_or(0));
  return shape;
}

bool verifyChecksum(const std::string &path, uint64_t bytes, StringRef sha256,
                    std::string &error) {
  RankReader reader;
  if (!reader.open(path, error))
    return false;
  struct stat st;
  if (::fstat(reader.getFd(), &st) != 0 || uint64_t(st.st_size) != bytes) {
    error = "rank file '" + path + "' is corrupted: it has " +
            std::to_string(st.st_size) + " bytes, the manifest says " +
            std::to_string(bytes);
    return false;
  }
  llvm::SHA256 sha;
  std::vector<char> chunk(kChunkBytes);
  for (uint64_t offset = 0; offset < bytes; offset += kChunkBytes) {
    uint64_t n = std::min(kChunkBytes, bytes - offset);
    if (!reader.read(offset, n, chunk.data(), error))
      return false;
    sha.update(llvm::ArrayRef<uint8_t>(
        reinterpret_cast<const uint8_t *>(chunk.data()), n));
  }
  std::string actual = llvm::toHex(sha.final(), /*LowerCase=*/true);
  if (actual != sha256) {
    error = "rank file '" + path + "' is corrupted: its SHA-256 is " + actual +
            ", the manifest says " + sha256.str();
    return false;
  }
  return true;
}

} // namespace

/// Copies `weight` in global row-major order from its shards to `os`.
static bool copyWeight(const Weight &weight, llvm::raw_ostream &os,
                       std::vector<char> &chunk, std::string &error) {
  auto copy = [&](RankReader &file, uint64_t offset, uint64_t length) {
    while (length) {
      uint64_t n = std::min<uint64_t>(length, chunk.size());
      if (!file.read(offset, n, chunk.data(), error))
        return false;
      os.write(chunk.data(), n);
      offset += n;
      length -= n;
    }
    return true;
  };
  if (weight.splitDim < 0) {
    const Shard &shard = weight.shards.begin()->second;
    return copy(*shard.file, shard.offset, weight.bytes);
  }
  uint64_t outer = 1, inner = weight.elementBytes;
  for (int64_t d = 0; d < weight.splitDim; ++d)
    outer *= weight.globalShape[d];
  for (size_t d = weight.splitDim + 1; d < weight.localShape.size(); ++d)
    inner *= weight.localShape[d];
  uint64_t localRow = inner * weight.localShape[weight.splitDim];
  if (weight.padded) {
    // Each rank holds rows [t·L, (t+1)·L) of the padded dim; the rows past
    // the global size are padding and are not written.
    int64_t global = weight.globalShape[weight.splitDim];
    int64_t perRank = weight.localShape[weight.splitDim];
    for (uint64_t o = 0; o < outer; ++o)
      for (const auto &[t, shard] : weight.shards) {
        int64_t rows = std::clamp<int64_t>(global - int64_t(t) * perRank, 0,
                                           perRank);
        if (rows && !copy(*shard.file, shard.offset + o * localRow,
                          inner * static_cast<uint64_t>(rows)))
          return false;
      }
    return true;
  }
  std::vector<int64_t> pieces = weight.pieces;
  if (pieces.empty())
    pieces.push_back(weight.globalShape[weight.splitDim]);
  uint64_t ranks = weight.shards.size();
  // Each global row is, piece by piece, every rank's part of that piece.
  for (uint64_t o = 0; o < outer; ++o) {
    uint64_t local = 0;
    for (int64_t piece : pieces) {
      uint64_t run = inner * static_cast<uint64_t>(piece) / ranks;
      for (const auto &[t, shard] : weight.shards)
        if (!copy(*shard.file, shard.offset + o * localRow + local, run))
          return false;
      local += run;
    }
  }
  return true;
}

bool mlir::tp::exportWeights(StringRef artifactDir, StringRef outPath,
                             bool progress, std::string &error) {
  llvm::SmallString<256> manifestPath(artifactDir);
  llvm::sys::path::append(manifestPath, "manifest.json");
  auto buffer = llvm::MemoryBuffer::getFile(manifestPath);
  if (!buffer) {
    error = "cannot open '" + std::string(manifestPath) +
            "': " + buffer.getError().message();
    return false;
  }
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*buffer)->getBuffer());
  if (!parsed) {
    error = "'" + std::string(manifestPath) +
            "' is not valid JSON: " + llvm::toString(parsed.takeError());
    return false;
  }
  const llvm::json::Object *manifest = parsed->getAsObject();
  const llvm::json::Array *ranks =
      manifest ? manifest->getArray("ranks") : nullptr;
  int64_t tpDevices = 0;
  if (manifest)
    if (const llvm::json::Object *grid = manifest->getObject("grid"))
      tpDevices = grid->getInteger("tp").value_or(0);
  if (!ranks || tpDevices < 1) {
    error = "'" + std::string(manifestPath) +
            "' is not a tp-compile manifest (no grid or ranks)";
    return false;
  }

  std::vector<std::unique_ptr<RankReader>> files;
  std::vector<Weight> weights;
  llvm::StringMap<size_t> indexOf;
  for (const llvm::json::Value &value : *ranks) {
    const llvm::json::Object *rank = value.getAsObject();
    if (!rank) {
      error = "malformed rank entry in the manifest";
      return false;
    }
    llvm::SmallString<256> path(artifactDir);
    llvm::sys::path::append(path, rank->getString("file").value_or(""));
    if (!verifyChecksum(std::string(path),
                        rank->getInteger("bytes").value_or(0),
                        rank->getString("sha256").value_or(""), error))
      return false;
    files.push_back(std::make_unique<RankReader>());
    if (!files.back()->open(std::string(path), error))
      return false;
    int64_t stage = rank->getInteger("stage").value_or(0);
    int64_t tpIndex = rank->getInteger("tp_index").value_or(0);
    const llvm::json::Array *shards = rank->getArray("weights");
    for (const llvm::json::Value &entryValue :
         shards ? *shards : llvm::json::Array()) {
      const llvm::json::Object &entry = *entryValue.getAsObject();
      std::string name = entry.getString("name").value_or("").str();
      auto [it, inserted] = indexOf.try_emplace(name, weights.size());
      if (inserted) {
        Weight weight;
        weight.name = name;
        weight.dtype = entry.getString("dtype").value_or("").str();
        weight.globalShape = getShape(entry, "global_shape");
        weight.localShape = getShape(entry, "shape");
        weight.splitDim = entry.getInteger("split_dim").value_or(-1);
        weight.pieces = getShape(entry, "pieces");
        weight.padded = entry.getInteger("padded_size").value_or(0);
        weight.stage = stage;
        const llvm::json::Array *offsets = entry.getArray("data_offsets");
        uint64_t localBytes = (*offsets)[1].getAsInteger().value_or(0) -
                              (*offsets)[0].getAsInteger().value_or(0);
        uint64_t localElements = 1, globalElements = 1;
        for (int64_t dim : weight.localShape)
          localElements *= dim;
        for (int64_t dim : weight.globalShape)
          globalElements *= dim;
        weight.elementBytes = localElements ? localBytes / localElements : 0;
        weight.bytes = globalElements * weight.elementBytes;
        weights.push_back(std::move(weight));
      }
      // The first stage that holds a weight is enough to rebuild it.
      Weight &weight = weights[it->second];
      if (weight.stage == stage)
        weight.shards[tpIndex] = {
            files.back().get(),
            uint64_t(entry.getInteger("file_offset").value_or(0))};
    }
  }
  for (const Weight &weight : weights)
    if (weight.shards.size() !=
        (weight.splitDim < 0 ? weight.shards.size() : size_t(tpDevices))) {
      error = "the manifest lacks shards of weight '" + weight.name + "'";
      return false;
    }

  std::vector<SafeTensorsEntry> entries;
  uint64_t total = 0;
  for (const Weight &weight : weights) {
    entries.push_back({weight.name, weight.dtype, weight.globalShape, total,
                       total + weight.bytes});
    total += weight.bytes;
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(outPath, ec);
  if (ec) {
    error = "cannot write '" + outPath.str() + "': " + ec.message();
    return false;
  }
  os << buildSafeTensorsHeader(entries, {{"format", "pt"}});
  std::vector<char> chunk(kChunkBytes);
  uint64_t done = 0;
  unsigned lastPercent = 0;
  for (const Weight &weight : weights) {
    if (!copyWeight(weight, os, chunk, error))
      return false;
    done += weight.bytes;
    unsigned percent = total ? done * 100 / total : 100;
    if (progress && (percent >= lastPercent + 5 || done == total)) {
      lastPercent = percent;
      llvm::errs() << "exporting weights: " << done << " / " << total
                   << " bytes (" << percent << "%)\n";
    }
  }
  os.close();
  if (os.has_error()) {
    error = "cannot write '" + outPath.str() + "': " + os.error().message();
    return false;
  }
  return true;
}
