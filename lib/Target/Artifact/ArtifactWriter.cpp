//===- ArtifactWriter.cpp - tp-compile's artifact folder ------------------===//
//
// Streams every initializer once, in bounded chunks, and deals each chunk's
// bytes out to the rank files that hold them: a row-major tensor split on
// dim d is, per rank, runs of local_d x inner elements at a stride of
// global_d x inner, so walking the source in order writes every rank file
// front to back. Memory stays at one chunk whatever the model's size.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/ArtifactWriter.h"

#include "ArtifactPlan.h"
#include "InitializerSource.h"
#include "tp/Target/Artifact/SafeTensors.h"

#include "../ONNX/ModelLoader.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::artifact;

namespace {

/// A rank file being written, hashed as it goes so that the checksum costs
/// no second read.
struct RankOutput {
  std::unique_ptr<llvm::raw_fd_ostream> os;
  llvm::SHA256 sha;
  uint64_t bytes = 0;
  std::string sha256;

  void write(const char *data, uint64_t size) {
    os->write(data, size);
    sha.update(
        llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(data), size));
    bytes += size;
  }
};

/// Prints "done / total" to stderr every 5% (and at the end).
class Progress {
public:
  Progress(uint64_t total, bool enabled) : total(total), enabled(enabled) {}
  void advance(uint64_t bytes) {
    done += bytes;
    unsigned percent = total ? done * 100 / total : 100;
    if (!enabled || (percent < lastPercent + 5 && done != total))
      return;
    lastPercent = percent;
    llvm::errs() << llvm::format("writing weight shards: %.1f / %.1f MiB "
                                 "(%u%%)\n",
                                 done / 1048576.0, total / 1048576.0, percent);
  }

private:
  uint64_t total, done = 0;
  bool enabled;
  unsigned lastPercent = 0;
};

} // namespace

/// dealChunk for a weight whose split dim is padded with zeros (tp.padded):
/// rank t holds rows [t·L, (t+1)·L) of the padded dim, L = padded / ranks.
/// Source rows go to their rank; when a source row ends, each rank whose
/// rows reach past it gets that many rows of zeros.
static void dealPaddedChunk(const WeightPlan &weight, const WeightUse &use,
                            uint64_t inner, const char *chunk, uint64_t offset,
                            uint64_t size, RankOutput *stageOutputs,
                            int64_t tpDevices) {
  uint64_t row = inner * weight.globalShape[use.splitDim];
  uint64_t run = inner * static_cast<uint64_t>(use.padded / tpDevices);
  static const std::vector<char> zeros(1 << 16, 0);
  auto writeZeros = [&](RankOutput &out, uint64_t bytes) {
    for (; bytes; bytes -= std::min<uint64_t>(bytes, zeros.size()))
      out.write(zeros.data(), std::min<uint64_t>(bytes, zeros.size()));
  };
  for (uint64_t pos = offset, end = offset + size; pos < end;) {
    uint64_t inRow = pos % row;
    uint64_t t = inRow / run;
    uint64_t segmentEnd = std::min(row, (t + 1) * run);
    uint64_t runEnd = std::min(end, pos - inRow + segmentEnd);
    stageOutputs[t].write(chunk + (pos - offset), runEnd - pos);
    pos = runEnd;
    if (pos % row != 0)
      continue;
    // A source row ended: the padding of every rank that reaches past it.
    for (int64_t r = t; r < tpDevices; ++r) {
      uint64_t begin = std::max<uint64_t>(row, r * run);
      uint64_t stop = (r + 1) * run;
      if (stop > begin)
        writeZeros(stageOutputs[r], stop - begin);
    }
  }
}

/// Sends bytes [offset, offset + size) of `weight`'s source, held in `chunk`,
/// to the rank files of `use`'s stage. Along the split dim a row holds, for
/// each piece in turn, rank 0's part, rank 1's part, ...: each rank's local
/// row is its part of every piece, in order.
static void dealChunk(const WeightPlan &weight, const WeightUse &use,
                      const char *chunk, uint64_t offset, uint64_t size,
                      RankOutput *stageOutputs, int64_t tpDevices) {
  if (use.splitDim < 0) {
    for (int64_t t = 0; t < tpDevices; ++t)
      stageOutputs[t].write(chunk, size);
    return;
  }
  uint64_t inner = weight.kind.bytes;
  for (size_t d = use.splitDim + 1; d < use.localShape.size(); ++d)
    inner *= use.localShape[d];
  if (use.padded) {
    dealPaddedChunk(weight, use, inner, chunk, offset, size, stageOutputs,
                    tpDevices);
    return;
  }
  std::vector<int64_t> pieces = use.pieces;
  if (pieces.empty())
    pieces.push_back(weight.globalShape[use.splitDim]);
  uint64_t row = inner * weight.globalShape[use.splitDim];
  for (uint64_t pos = offset, end = offset + size; pos < end;) {
    // Find the (piece, rank) segment of the row that `pos` falls in.
    uint64_t inRow = pos % row, segmentStart = 0, segmentEnd = 0, t = 0;
    for (int64_t piece : pieces) {
      uint64_t run = inner * static_cast<uint64_t>(piece / tpDevices);
      if (inRow < segmentStart + run * tpDevices) {
        t = (inRow - segmentStart) / run;
        segmentEnd = segmentStart + (t + 1) * run;
        break;
      }
      segmentStart += run * tpDevices;
    }
    uint64_t runEnd = std::min(end, pos - inRow + segmentEnd);
    stageOutputs[t].write(chunk + (pos - offset), runEnd - pos);
    pos = runEnd;
  }
}

static LogicalResult writeShards(ModuleOp module, const ArtifactPlan &plan,
                                 StringRef modelDir, StringRef outDir,
                                 const ArtifactOptions &options,
                                 std::vector<RankOutput> &outputs) {
  Location loc = module.getLoc();
  uint64_t total = 0;
  outputs.resize(plan.ranks.size());
  for (const RankPlan &rank : plan.ranks) {
    SmallString<256> path(outDir);
    llvm::sys::path::append(path, rank.fileName);
    std::error_code ec;
    RankOutput &out = outputs[rank.rank];
    out.os = std::make_unique<llvm::raw_fd_ostream>(path, ec);
    if (ec)
      return emitError(loc)
             << "cannot write '" << path << "': " << ec.message();
    std::vector<SafeTensorsEntry> entries;
    for (const ShardPlacement &shard : rank.shards) {
      const WeightPlan &weight = plan.weights[shard.weight];
      entries.push_back({weight.name, weight.kind.safetensorsName.str(),
                         weight.uses[shard.use].localShape, shard.begin,
                         shard.end});
    }
    std::string header = buildSafeTensorsHeader(
        entries, {{"format", "tp-artifact"},
                  {"rank", std::to_string(rank.rank)},
                  {"stage", std::to_string(rank.stage)},
                  {"tp_index", std::to_string(rank.tpIndex)}});
    out.write(header.data(), header.size());
    total += rank.dataBytes;
  }

  Progress progress(total, options.progress);
  uint64_t chunkBytes = std::max<uint64_t>(options.chunkBytes & ~7ull, 8);
  std::vector<char> chunk(chunkBytes);
  std::string error;
  for (const WeightPlan &weight : plan.weights) {
    FailureOr<std::unique_ptr<InitializerSource>> source =
        InitializerSource::open(*weight.initializer, modelDir, loc);
    if (failed(source))
      return failure();
    uint64_t size = (*source)->size();
    for (uint64_t offset = 0; offset < size; offset += chunkBytes) {
      uint64_t n = std::min(chunkBytes, size - offset);
      if (!(*source)->read(offset, n, chunk.data(), error))
        return emitError(loc) << error;
      for (const WeightUse &use : weight.uses) {
        dealChunk(weight, use, chunk.data(), offset, n,
                  &outputs[use.stage * plan.tpDevices], plan.tpDevices);
        progress.advance(use.splitDim < 0 ? n * plan.tpDevices : n);
      }
    }
    // Padding rows are written as zeros on top of the source's bytes.
    for (const WeightUse &use : weight.uses)
      if (use.padded) {
        uint64_t bytes = weight.kind.bytes * plan.tpDevices;
        for (int64_t dim : use.localShape)
          bytes *= dim;
        progress.advance(bytes - size);
      }
  }
  for (RankOutput &out : outputs) {
    out.os->close();
    if (out.os->has_error())
      return emitError(loc)
             << "cannot write a rank file: " << out.os->error().message();
    out.sha256 = llvm::toHex(out.sha.final(), /*LowerCase=*/true);
  }
  return success();
}

static void writeShape(llvm::json::OStream &json, StringRef key,
                       const std::vector<int64_t> &shape) {
  json.attributeArray(key, [&] {
    for (int64_t dim : shape)
      json.value(dim);
  });
}

static void writeSignature(llvm::json::OStream &json, StringRef key,
                           const std::vector<TensorSignature> &list) {
  json.attributeArray(key, [&] {
    for (const TensorSignature &sig : list)
      json.object([&] {
        json.attribute("name", sig.name);
        json.attribute("dtype", sig.dtype);
        writeShape(json, "shape", sig.shape);
        json.attribute("stage", sig.stage);
      });
  });
}

/// A stage function's arguments or results as the runtime binds them.
static void writeBindings(llvm::json::OStream &json, StringRef key,
                          func::FuncOp func, bool results) {
  json.attributeArray(key, [&] {
    unsigned count = results ? func.getNumResults() : func.getNumArguments();
    for (unsigned i = 0; i < count; ++i) {
      Type type = results ? func.getResultTypes()[i] : func.getArgumentTypes()[i];
      DictionaryAttr attrs =
          results ? func.getResultAttrDict(i) : func.getArgAttrDict(i);
      json.object([&] {
        std::string kind = results ? "send" : "argument";
        StringRef name;
        for (auto [attrName, attrKind] :
             {std::pair("tp.weight", "weight"), std::pair("tp.input", "input"),
              std::pair("tp.output", "output")})
          if (auto attr = attrs ? attrs.getAs<StringAttr>(attrName) : nullptr) {
            kind = attrKind;
            name = attr.getValue();
          }
        json.attribute("kind", kind);
        if (!name.empty())
          json.attribute("name", name);
        auto shaped = dyn_cast<ShapedType>(type);
        json.attribute("dtype",
                       getDTypeName(shaped ? shaped.getElementType() : type));
        writeShape(json, "shape",
                   shaped ? std::vector<int64_t>(shaped.getShape().begin(),
                                                 shaped.getShape().end())
                          : std::vector<int64_t>());
      });
    }
  });
}

static void writeManifest(llvm::raw_ostream &os, const ArtifactPlan &plan,
                          StringRef modelPath,
                          const std::vector<RankOutput> &outputs,
                          const ArtifactOptions &options, StringRef source,
                          StringRef library) {
  llvm::json::OStream json(os, /*IndentSize=*/2);
  json.object([&] {
    json.attribute("format", "tp-artifact");
    json.attribute("format_version", kArtifactFormatVersion);
    json.attribute("model", modelPath);
    json.attribute("mlir", "model.mlir");
    json.attribute("target", options.target);
    if (!source.empty())
      json.attribute("source", source);
    if (!library.empty())
      json.attribute("library", library);
    json.attributeObject("grid", [&] {
      json.attribute("tp", plan.tpDevices);
      json.attribute("pp", plan.stages);
      json.attribute("microbatches", plan.microbatches);
      json.attribute("ranks", plan.tpDevices * plan.stages);
    });
    json.attributeArray("stages", [&] {
      for (auto [stage, func] : llvm::enumerate(plan.stageFuncs))
        json.object([&] {
          json.attribute("stage", int64_t(stage));
          json.attribute("function", func::FuncOp(func).getSymName());
          json.attributeArray("ranks", [&] {
            for (int64_t t = 0; t < plan.tpDevices; ++t)
              json.value(int64_t(stage) * plan.tpDevices + t);
          });
          writeBindings(json, "args", func, /*results=*/false);
          writeBindings(json, "results", func, /*results=*/true);
        });
    });
    writeSignature(json, "inputs", plan.inputs);
    writeSignature(json, "outputs", plan.outputs);
    json.attributeArray("ranks", [&] {
      for (const RankPlan &rank : plan.ranks)
        json.object([&] {
          const RankOutput &out = outputs[rank.rank];
          uint64_t headerBytes = out.bytes - rank.dataBytes;
          json.attribute("rank", rank.rank);
          json.attribute("stage", rank.stage);
          json.attribute("tp_index", rank.tpIndex);
          func::FuncOp func = plan.stageFuncs[rank.stage];
          json.attribute("function", func.getSymName());
          json.attribute("file", rank.fileName);
          json.attribute("bytes", out.bytes);
          json.attribute("sha256", out.sha256);
          json.attributeArray("weights", [&] {
            for (const ShardPlacement &shard : rank.shards)
              json.object([&] {
                const WeightPlan &weight = plan.weights[shard.weight];
                const WeightUse &use = weight.uses[shard.use];
                json.attribute("name", weight.name);
                json.attribute("dtype", weight.kind.safetensorsName);
                writeShape(json, "global_shape", weight.globalShape);
                writeShape(json, "shape", use.localShape);
                json.attribute("split_dim", use.splitDim);
                if (!use.pieces.empty())
                  json.attributeArray("pieces", [&] {
                    for (int64_t piece : use.pieces)
                      json.value(piece);
                  });
                if (use.padded)
                  json.attribute("padded_size", use.padded);
                json.attribute("parallel", use.parallel);
                json.attributeArray("data_offsets", [&] {
                  json.value(shard.begin);
                  json.value(shard.end);
                });
                json.attribute("file_offset", headerBytes + shard.begin);
              });
          });
        });
    });
  });
  os << "\n";
}

LogicalResult mlir::tp::writeArtifact(ModuleOp module, StringRef outDir,
                                      const ArtifactOptions &options) {
  Location loc = module.getLoc();
  auto modelAttr = module->getAttrOfType<StringAttr>("tp.model");
  if (!modelAttr)
    return module.emitError("module has no tp.model; import it with "
                            "tp-translate --import-onnx");
  SmallString<256> modelPath(modelAttr.getValue());
  llvm::sys::fs::make_absolute(modelPath);
  StringRef modelDir = llvm::sys::path::parent_path(modelPath);

  // The initializers are read from the model itself, not from the module:
  // the module carries shapes only.
  onnx::ModelProto model;
  {
    auto buffer = llvm::MemoryBuffer::getFile(modelPath, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return emitError(loc) << "cannot open the model '" << modelPath
                            << "': " << buffer.getError().message();
    if (failed(onnx_import::parseModel((*buffer)->getBuffer(), modelPath, loc,
                                       model)))
      return failure();
  }
  llvm::StringMap<const onnx::TensorProto *> initializers;
  for (const onnx::TensorProto &init : model.graph().initializer())
    initializers[init.name()] = &init;

  FailureOr<ArtifactPlan> plan = buildArtifactPlan(module, initializers);
  if (failed(plan))
    return failure();

  if (std::error_code ec = llvm::sys::fs::create_directories(outDir))
    return emitError(loc) << "cannot create '" << outDir
                          << "': " << ec.message();
  auto openOutput = [&](StringRef name,
                        std::unique_ptr<llvm::raw_fd_ostream> &os) {
    SmallString<256> path(outDir);
    llvm::sys::path::append(path, name);
    std::error_code ec;
    os = std::make_unique<llvm::raw_fd_ostream>(path, ec,
                                                llvm::sys::fs::OF_Text);
    if (ec)
      return LogicalResult(emitError(loc) << "cannot write '" << path
                                          << "': " << ec.message());
    return success();
  };

  std::unique_ptr<llvm::raw_fd_ostream> mlirFile;
  if (failed(openOutput("model.mlir", mlirFile)))
    return failure();
  module.print(*mlirFile);
  mlirFile->close();

  std::vector<RankOutput> outputs;
  if (failed(writeShards(module, *plan, modelDir, outDir, options, outputs)))
    return failure();

  std::string source, library;
  if (options.generateCode &&
      failed(options.generateCode(outDir, source, library)))
    return failure();

  // The manifest comes last: a folder with one is complete.
  std::unique_ptr<llvm::raw_fd_ostream> manifest;
  if (failed(openOutput("manifest.json", manifest)))
    return failure();
  writeManifest(*manifest, *plan, modelPath, outputs, options, source,
                library);
  manifest->close();
  if (manifest->has_error())
    return emitError(loc) << "cannot write manifest.json: "
                          << manifest->error().message();
  return success();
}
