//===- WeightExport.cpp - unsharded weights from an artifact --------------===//
//
// Reassembles each initializer from its parts (a weight argument each: all
// of it, or a piece of a fused weight), each from the first stage that holds
// it: for parts on dim d, the output is, row by row of the dims before d,
// each part's range in order, rank 0's run of it, rank 1's run, ... Rank files
// are read through small buffers, so memory stays bounded whatever the model's
// size. Checksums are verified before anything is written, so a corrupted file
// never yields weights.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/WeightExport.h"

#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/Sha256.h"
#include "tp/Target/Artifact/ArtifactWriter.h"
#include "tp/Target/Artifact/SafeTensors.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::tp;
using namespace mlir::tp::artifact;
using llvm::ArrayRef;
using llvm::StringRef;

namespace {

constexpr uint64_t kChunkBytes = 16u << 20;

/// A rank file read at arbitrary offsets through a 1 MiB window, since
/// reassembly reads each rank's shard in order but in short runs.
class RankReader {
public:
  bool open(const std::string &path, std::string &error) {
    this->path = path;
    // Rank files are regular files inside the artifact, as tp-run reads
    // them: a symlink is refused.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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

/// One rank's shard of a weight argument.
struct Shard {
  RankReader *file = nullptr;
  uint64_t offset = 0; // in the file
};

/// What one weight argument (a manifest entry) holds of its initializer:
/// rows [offset, offset + size) of `dim` (all of them unless a piece),
/// split over the ranks on `dim` if `split`, and the rank files that hold
/// it, from the first stage that does. A repeated range holds each of its
/// `repeatBlocks` blocks `repeatTimes` times in place.
struct Part {
  std::string key;
  int64_t dim = -1, offset = 0, size = 0;
  int64_t repeatBlocks = 0, repeatTimes = 1;
  bool split = false, piece = false;
  std::vector<int64_t> localShape;
  int64_t stage = -1;
  std::map<int64_t, Shard> shards; // by tp index
};

/// An initializer and the parts it is stored as, by key.
struct Weight {
  std::string name, dtype;
  std::vector<int64_t> globalShape;
  uint64_t bytes = 0, elementBytes = 0;
  std::map<std::string, Part> parts;
};

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
  ::tp::rt::Sha256 sha;
  std::vector<char> chunk(kChunkBytes);
  for (uint64_t offset = 0; offset < bytes; offset += kChunkBytes) {
    uint64_t n = std::min(kChunkBytes, bytes - offset);
    if (!reader.read(offset, n, chunk.data(), error))
      return false;
    sha.update(chunk.data(), n);
  }
  std::string actual = sha.finalHex();
  if (actual != sha256) {
    error = "rank file '" + path + "' is corrupted: its SHA-256 is " + actual +
            ", the manifest says " + sha256.str();
    return false;
  }
  return true;
}

} // namespace

/// The parts that rebuild `weight`: one that holds all of it, or pieces
/// along one dim that tile it, in order. Empty (with `error` set) if the
/// artifact lacks some of its bytes.
static std::vector<const Part *>
choosePieces(const Weight &weight, int64_t tpDevices, std::string &error) {
  auto complete = [&](const Part &part) {
    return part.split ? part.shards.size() == size_t(tpDevices)
                      : !part.shards.empty();
  };
  std::vector<const Part *> pieces;
  for (const auto &[key, part] : weight.parts) {
    if (!complete(part)) {
      error = "the manifest lacks shards of weight '" + key + "'";
      return {};
    }
    if (!part.piece)
      return {&part};
    pieces.push_back(&part);
  }
  llvm::sort(pieces, [](const Part *a, const Part *b) {
    return a->offset < b->offset;
  });
  int64_t next = 0;
  for (const Part *piece : pieces) {
    if (piece->dim != pieces.front()->dim || piece->offset != next)
      break;
    next += piece->size;
  }
  if (pieces.empty() || next != weight.globalShape[pieces.front()->dim]) {
    error =
        "the manifest's pieces of weight '" + weight.name + "' do not cover it";
    return {};
  }
  return pieces;
}

/// Copies `weight` in global row-major order from the shards of `parts` to
/// `os`: row by row of the dims before the parts' dim, each part's range,
/// each rank's rows of it in turn (the rows of a padded range past its size
/// are padding, not written).
static bool copyWeight(const Weight &weight, ArrayRef<const Part *> parts,
                       llvm::raw_ostream &os, std::vector<char> &chunk,
                       std::string &error) {
  auto copy = [&](const Shard &shard, uint64_t offset, uint64_t length) {
    offset += shard.offset;
    while (length) {
      uint64_t n = std::min<uint64_t>(length, chunk.size());
      if (!shard.file->read(offset, n, chunk.data(), error))
        return false;
      os.write(chunk.data(), n);
      offset += n;
      length -= n;
    }
    return true;
  };
  int64_t dim = parts.front()->dim;
  if (dim < 0)
    return copy(parts.front()->shards.begin()->second, 0, weight.bytes);
  uint64_t outer = 1, inner = weight.elementBytes;
  for (int64_t d = 0; d < dim; ++d)
    outer *= weight.globalShape[d];
  for (size_t d = dim + 1; d < weight.globalShape.size(); ++d)
    inner *= weight.globalShape[d];
  for (uint64_t o = 0; o < outer; ++o)
    for (const Part *part : parts) {
      int64_t local = part->localShape[dim];
      uint64_t localRow = inner * static_cast<uint64_t>(local);
      if (part->repeatTimes > 1) {
        // The first copy of each block: rows [b * block * times, + block)
        // of the repeated range, on the ranks that hold them.
        int64_t block = part->size / part->repeatBlocks;
        for (int64_t b = 0; b < part->repeatBlocks; ++b)
          for (int64_t v = b * block * part->repeatTimes, left = block;
               left > 0;) {
            int64_t t = part->split ? v / local : 0;
            int64_t at = part->split ? v % local : v;
            int64_t n = std::min(left, local - at);
            auto shard = part->shards.find(t);
            if (shard == part->shards.end() ||
                !copy(shard->second, o * localRow + inner * at, inner * n))
              return false;
            v += n;
            left -= n;
          }
        continue;
      }
      if (!part->split) {
        if (!copy(part->shards.begin()->second, o * localRow, localRow))
          return false;
        continue;
      }
      for (const auto &[t, shard] : part->shards) {
        int64_t rows = std::clamp<int64_t>(part->size - t * local, 0, local);
        if (rows &&
            !copy(shard, o * localRow, inner * static_cast<uint64_t>(rows)))
          return false;
      }
    }
  return true;
}

/// True when `path` would land inside the folder `dir` (after resolving
/// both as far as they exist).
static bool isInside(StringRef path, StringRef dir) {
  llvm::SmallString<256> realDir, parent;
  if (llvm::sys::fs::real_path(dir, realDir))
    return false;
  StringRef folder = llvm::sys::path::parent_path(path);
  if (llvm::sys::fs::real_path(folder.empty() ? "." : folder, parent))
    return false;
  return parent == realDir ||
         StringRef(parent).starts_with((realDir + "/").str());
}

bool mlir::tp::exportWeights(StringRef artifactDir, StringRef outPath,
                             bool progress, std::string &error,
                             StringRef checkpointDir) {
  // The runtime's reader: SHA256SUMS, then the manifest's schema, which
  // also checks each part's shape against its cut of the initializer.
  ::tp::rt::Manifest manifest;
  try {
    manifest = ::tp::rt::loadManifest(artifactDir.str());
  } catch (const ::tp::rt::Error &e) {
    error = e.what();
    return false;
  }
  if (isInside(outPath, artifactDir)) {
    error = "'" + outPath.str() + "' is inside the artifact '" +
            artifactDir.str() + "'; write the weights elsewhere";
    return false;
  }
  int64_t tpDevices = manifest.tp;
  // A training checkpoint (tp-run --train --save) holds each rank's weight
  // file as training left it, under the artifact's file names, with its
  // own checksums.
  StringRef weightsDir = artifactDir;
  if (!checkpointDir.empty()) {
    weightsDir = checkpointDir;
    try {
      std::string sumsPath = checkpointDir.str() + "/SHA256SUMS";
      auto text = llvm::MemoryBuffer::getFile(sumsPath);
      if (!text)
        throw ::tp::rt::Error("cannot read " + sumsPath + ": " +
                              text.getError().message() +
                              " (is this a tp-run --save checkpoint?)");
      std::map<std::string, std::string> sums =
          ::tp::rt::parseChecksums((*text)->getBuffer().str(), sumsPath);
      for (::tp::rt::RankSpec &rank : manifest.rankSpecs) {
        auto it = sums.find(rank.file);
        if (it == sums.end())
          throw ::tp::rt::Error(sumsPath + " has no checksum for " + rank.file +
                                ": not a checkpoint of " + artifactDir.str());
        rank.sha256 = it->second;
      }
    } catch (const ::tp::rt::Error &e) {
      error = e.what();
      return false;
    }
  }

  std::vector<std::unique_ptr<RankReader>> files;
  std::vector<Weight> weights;
  llvm::StringMap<size_t> indexOf;
  for (const ::tp::rt::RankSpec &rank : manifest.rankSpecs) {
    llvm::SmallString<256> path(weightsDir);
    llvm::sys::path::append(path, rank.file);
    if (!verifyChecksum(std::string(path), rank.bytes, rank.sha256, error))
      return false;
    files.push_back(std::make_unique<RankReader>());
    if (!files.back()->open(std::string(path), error))
      return false;
    for (const ::tp::rt::WeightSpec &entry : rank.weights) {
      auto [it, inserted] =
          indexOf.try_emplace(entry.initializer, weights.size());
      if (inserted) {
        Weight weight;
        weight.name = entry.initializer;
        weight.dtype = entry.dtype;
        weight.globalShape = entry.globalShape;
        weight.elementBytes = ::tp::rt::dtypeNameBytes(entry.dtype);
        weight.bytes = weight.elementBytes;
        for (int64_t dim : weight.globalShape)
          weight.bytes *= dim;
        weights.push_back(std::move(weight));
      }
      Weight &weight = weights[it->second];
      if (entry.dtype != weight.dtype ||
          entry.globalShape != weight.globalShape) {
        error = "the manifest's parts of initializer '" + weight.name +
                "' disagree on its dtype or shape ('" + entry.name + "')";
        return false;
      }
      auto [partIt, newPart] = weight.parts.try_emplace(entry.name);
      Part &part = partIt->second;
      if (newPart) {
        part.key = entry.name;
        part.localShape = entry.shape;
        part.stage = rank.stage;
        part.split = entry.isSplit;
        part.piece = entry.isSlice;
        part.dim = entry.dim;
        part.offset = entry.sliceOffset;
        part.size = entry.sliceSize;
        if (!entry.repeat.empty()) {
          part.repeatBlocks = entry.repeat[0];
          part.repeatTimes = entry.repeat[1];
        }
      } else if (part.localShape != entry.shape ||
                 part.split != entry.isSplit || part.dim != entry.dim ||
                 part.offset != entry.sliceOffset) {
        error = "the manifest's entries for '" + entry.name +
                "' disagree between ranks";
        return false;
      }
      // The first stage that holds a part is enough to rebuild it.
      if (part.stage == rank.stage)
        part.shards[rank.tpIndex] = {files.back().get(), entry.fileOffset};
    }
  }
  std::vector<std::vector<const Part *>> partsOf;
  for (const Weight &weight : weights) {
    partsOf.push_back(choosePieces(weight, tpDevices, error));
    if (partsOf.back().empty())
      return false;
  }

  std::vector<SafeTensorsEntry> entries;
  uint64_t total = 0;
  for (const Weight &weight : weights) {
    entries.push_back({weight.name, weight.dtype, weight.globalShape, total,
                       total + weight.bytes});
    total += weight.bytes;
  }
  // A tied copy (an initializer imported as another's value) is written
  // from its source, after the weights.
  std::vector<std::pair<const ::tp::rt::Manifest::TiedWeight *, size_t>> copies;
  for (const ::tp::rt::Manifest::TiedWeight &tie : manifest.tied) {
    auto it = indexOf.find(tie.source);
    if (it == indexOf.end()) {
      error = "tied weight '" + tie.copy + "': its source '" + tie.source +
              "' is in no rank file";
      return false;
    }
    const Weight &source = weights[it->second];
    std::vector<int64_t> shape = source.globalShape;
    if (tie.transposed && shape.size() == 2)
      std::swap(shape[0], shape[1]);
    entries.push_back(
        {tie.copy, source.dtype, shape, total, total + source.bytes});
    total += source.bytes;
    copies.push_back({&tie, it->second});
  }
  // Written beside the destination and renamed into place: a failed export
  // leaves an existing file as it was.
  std::string partial = (outPath + ".partial." + llvm::Twine(::getpid())).str();
  struct RemoveOnFailure {
    const std::string &path;
    bool keep = false;
    ~RemoveOnFailure() {
      if (!keep)
        (void)llvm::sys::fs::remove(path);
    }
  } cleanup{partial};
  std::error_code ec;
  llvm::raw_fd_ostream os(partial, ec);
  if (ec) {
    error = "cannot write '" + partial + "': " + ec.message();
    return false;
  }
  os << buildSafeTensorsHeader(entries, {{"format", "pt"}});
  std::vector<char> chunk(kChunkBytes);
  uint64_t done = 0;
  unsigned lastPercent = 0;
  for (auto [weight, parts] : llvm::zip_equal(weights, partsOf)) {
    if (!copyWeight(weight, parts, os, chunk, error))
      return false;
    done += weight.bytes;
    unsigned percent = total ? done * 100 / total : 100;
    if (progress && (percent >= lastPercent + 5 || done == total)) {
      lastPercent = percent;
      llvm::errs() << "exporting weights: " << done << " / " << total
                   << " bytes (" << percent << "%)\n";
    }
  }
  for (auto [tie, index] : copies) {
    const Weight &source = weights[index];
    std::string whole;
    llvm::raw_string_ostream wholeOs(whole);
    if (!copyWeight(source, partsOf[index], wholeOs, chunk, error))
      return false;
    wholeOs.flush();
    if (tie->transposed && source.globalShape.size() == 2) {
      int64_t rows = source.globalShape[0], cols = source.globalShape[1];
      int64_t e = source.elementBytes;
      std::string transposed(whole.size(), '\0');
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          std::memcpy(&transposed[(c * rows + r) * e],
                      &whole[(r * cols + c) * e], e);
      whole = std::move(transposed);
    }
    os << whole;
  }
  os.close();
  if (os.has_error()) {
    error = "cannot write '" + partial + "': " + os.error().message();
    return false;
  }
  if (std::error_code ec = llvm::sys::fs::rename(partial, outPath)) {
    error = "cannot move '" + partial + "' to '" + outPath.str() +
            "': " + ec.message();
    return false;
  }
  cleanup.keep = true;
  return true;
}
