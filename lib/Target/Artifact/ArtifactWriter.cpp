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
#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/Sha256.h"
#include "tp/Target/Artifact/SafeTensors.h"

#include "../ONNX/ModelLoader.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::artifact;

namespace {

/// A rank file being written, hashed as it goes so that the checksum costs
/// no second read.
struct RankOutput {
  std::unique_ptr<llvm::raw_fd_ostream> os;
  std::unique_ptr<::tp::rt::Sha256> sha = std::make_unique<::tp::rt::Sha256>();
  uint64_t bytes = 0;
  std::string sha256;

  void write(const char *data, uint64_t size) {
    os->write(data, size);
    sha->update(data, size);
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

/// Sends bytes [offset, offset + size) of `weight`'s source, held in `chunk`,
/// to the rank files of `use`'s stage. Along `use.dim` every source row (the
/// dims before it fixed) holds the use's range [lo, hi); rank t holds the
/// t-th run of `rows / ranks` indices of the range, zero-padded to `rows`
/// when the layout pads it. Bytes of the range go to their rank; where a
/// row's range ends, each rank whose run reaches past it gets that many
/// indices of zeros. A use that is not split gets its whole range on every
/// rank.
static void dealChunk(const WeightPlan &weight, const WeightUse &use,
                      const char *chunk, uint64_t offset, uint64_t size,
                      RankOutput *stageOutputs, int64_t tpDevices) {
  if (use.dim < 0) {
    for (int64_t t = 0; t < tpDevices; ++t)
      stageOutputs[t].write(chunk, size);
    return;
  }
  uint64_t inner = weight.kind.bytes;
  for (size_t d = use.dim + 1; d < weight.globalShape.size(); ++d)
    inner *= weight.globalShape[d];
  uint64_t row = inner * weight.globalShape[use.dim];
  uint64_t lo = inner * use.offset, range = inner * use.size;
  uint64_t run = use.split ? inner * (use.getRows() / tpDevices) : range;
  static const std::vector<char> zeros(1 << 16, 0);
  auto writeZeros = [&](RankOutput &out, uint64_t bytes) {
    for (; bytes; bytes -= std::min<uint64_t>(bytes, zeros.size()))
      out.write(zeros.data(), std::min<uint64_t>(bytes, zeros.size()));
  };
  for (uint64_t pos = offset, end = offset + size; pos < end;) {
    uint64_t rowStart = pos - pos % row, inRange = pos - rowStart;
    if (inRange < lo) {
      pos = std::min(end, rowStart + lo);
      continue;
    }
    inRange -= lo;
    if (inRange >= range) {
      pos = std::min(end, rowStart + row);
      continue;
    }
    uint64_t t = inRange / run;
    uint64_t stop =
        std::min(end, rowStart + lo + std::min((t + 1) * run, range));
    const char *data = chunk + (pos - offset);
    if (!use.split) {
      for (int64_t r = 0; r < tpDevices; ++r)
        stageOutputs[r].write(data, stop - pos);
    } else {
      stageOutputs[t].write(data, stop - pos);
    }
    pos = stop;
    if (!use.padded || pos != rowStart + lo + range)
      continue;
    // The row's range ended: the padding of every rank that reaches past it.
    for (int64_t r = t; r < tpDevices; ++r) {
      uint64_t begin = std::max<uint64_t>(range, r * run);
      uint64_t zerosEnd = (r + 1) * run;
      if (zerosEnd > begin)
        writeZeros(stageOutputs[r], zerosEnd - begin);
    }
  }
}

/// Reads the range of `weight` that `uses` (all repeated alike, at most one
/// per stage) hold, one source row at a time, and deals out each row with
/// its blocks repeated in place: rank t of a split use gets the t-th run
/// of the repeated row (the heads of rank t), an unsplit use all of it.
static LogicalResult
readAndDealRepeated(const WeightPlan &weight, ArrayRef<const WeightUse *> uses,
                    InitializerSource &source, std::vector<RankOutput> &outputs,
                    int64_t tpDevices, Location loc,
                    const std::function<void()> &progress) {
  const WeightUse &first = *uses.front();
  uint64_t outer = 1, inner = weight.kind.bytes;
  for (int64_t d = 0; d < first.dim; ++d)
    outer *= weight.globalShape[d];
  for (size_t d = first.dim + 1; d < weight.globalShape.size(); ++d)
    inner *= weight.globalShape[d];
  uint64_t row = inner * weight.globalShape[first.dim];
  uint64_t range = inner * first.size;
  uint64_t block = range / first.repeatBlocks;
  std::vector<char> in(range), repeated(range * first.repeat);
  std::string error;
  for (uint64_t o = 0; o < outer; ++o) {
    if (!source.read(o * row + inner * first.offset, range, in.data(), error))
      return emitError(loc) << error;
    char *out = repeated.data();
    for (int64_t b = 0; b < first.repeatBlocks; ++b)
      for (int64_t r = 0; r < first.repeat; ++r, out += block)
        std::memcpy(out, in.data() + b * block, block);
    for (const WeightUse *use : uses) {
      RankOutput *stage = &outputs[use->stage * tpDevices];
      uint64_t run = use->split ? repeated.size() / tpDevices : 0;
      for (int64_t t = 0; t < tpDevices; ++t)
        if (use->split)
          stage[t].write(repeated.data() + t * run, run);
        else
          stage[t].write(repeated.data(), repeated.size());
    }
    progress();
  }
  return success();
}

/// Reads the bytes of `weight` that `uses` (one read range, at most one use
/// per stage) hold and deals them out: the whole source in order, or, for a
/// piece, its range of every row.
static LogicalResult
readAndDeal(const WeightPlan &weight, ArrayRef<const WeightUse *> uses,
            InitializerSource &source, std::vector<char> &chunk,
            std::vector<RankOutput> &outputs, int64_t tpDevices, Location loc,
            const std::function<void()> &progress) {
  if (uses.front()->repeat > 1)
    return readAndDealRepeated(weight, uses, source, outputs, tpDevices, loc,
                               progress);
  std::string error;
  auto deal = [&](uint64_t begin, uint64_t length) -> LogicalResult {
    for (uint64_t offset = begin, end = begin + length; offset < end;
         offset += chunk.size()) {
      uint64_t n = std::min<uint64_t>(chunk.size(), end - offset);
      if (!source.read(offset, n, chunk.data(), error))
        return emitError(loc) << error;
      for (const WeightUse *use : uses)
        dealChunk(weight, *use, chunk.data(), offset, n,
                  &outputs[use->stage * tpDevices], tpDevices);
      progress();
    }
    return success();
  };
  const WeightUse &first = *uses.front();
  if (first.readsWhole())
    return deal(0, source.size());
  uint64_t outer = 1, inner = weight.kind.bytes;
  for (int64_t d = 0; d < first.dim; ++d)
    outer *= weight.globalShape[d];
  for (size_t d = first.dim + 1; d < weight.globalShape.size(); ++d)
    inner *= weight.globalShape[d];
  uint64_t row = inner * weight.globalShape[first.dim];
  for (uint64_t o = 0; o < outer; ++o)
    if (failed(deal(o * row + inner * first.offset, inner * first.size)))
      return failure();
  return success();
}

static LogicalResult writeShards(ModuleOp module, const ArtifactPlan &plan,
                                 StringRef modelDir, StringRef outDir,
                                 const ArtifactOptions &options,
                                 std::vector<RankOutput> &outputs) {
  Location loc = module.getLoc();
  uint64_t total = 0, headerBytes = 0;
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
      const WeightUse &use = weight.uses[shard.use];
      entries.push_back({use.key, weight.kind.safetensorsName.str(),
                         use.localShape, shard.begin, shard.end});
    }
    std::string header = buildSafeTensorsHeader(
        entries, {{"format", "tp-artifact"},
                  {"rank", std::to_string(rank.rank)},
                  {"stage", std::to_string(rank.stage)},
                  {"tp_index", std::to_string(rank.tpIndex)}});
    out.write(header.data(), header.size());
    headerBytes += header.size();
    total += rank.dataBytes;
  }

  Progress progress(total, options.progress);
  uint64_t reported = 0;
  bool stopped = false;
  auto advance = [&] {
    uint64_t written = 0;
    for (const RankOutput &out : outputs)
      written += out.bytes;
    written -= headerBytes;
    progress.advance(written - reported);
    reported = written;
    if (options.onProgress && !options.onProgress(written, total))
      stopped = true;
  };
  uint64_t chunkBytes = std::max<uint64_t>(options.chunkBytes & ~7ull, 8);
  std::vector<char> chunk(chunkBytes);
  for (const WeightPlan &weight : plan.weights) {
    FailureOr<std::unique_ptr<InitializerSource>> source =
        InitializerSource::open(*weight.initializer, modelDir, loc,
                                weight.kind);
    if (failed(source))
      return failure();
    // One read per range: the uses that hold all of the initializer, then
    // each piece, as the plan orders them (and the rank files hold them).
    // A stage's second use of a range waits for the next read, so that each
    // rank file is still written in order.
    for (size_t u = 0, e = weight.uses.size(); u < e;) {
      SmallVector<const WeightUse *> uses;
      llvm::SmallDenseSet<unsigned> stages;
      const WeightUse &first = weight.uses[u];
      for (; u < e; ++u) {
        const WeightUse &use = weight.uses[u];
        bool sameRange =
            use.repeat == first.repeat &&
            (first.readsWhole()
                 ? use.readsWhole()
                 : !use.readsWhole() && use.dim == first.dim &&
                       use.offset == first.offset && use.size == first.size);
        if (!sameRange || !stages.insert(use.stage).second)
          break;
        uses.push_back(&use);
      }
      if (failed(readAndDeal(weight, uses, **source, chunk, outputs,
                             plan.tpDevices, loc, advance)))
        return failure();
      if (stopped)
        return emitError(loc) << "interrupted while writing the weight "
                                 "shards ("
                              << reported << " of " << total << " bytes)";
    }
  }
  for (RankOutput &out : outputs) {
    out.os->close();
    if (out.os->has_error())
      return emitError(loc)
             << "cannot write a rank file: " << out.os->error().message();
    out.sha256 = out.sha->finalHex();
  }
  return success();
}

static std::vector<int64_t> shapeOf(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped)
    return {};
  return std::vector<int64_t>(shaped.getShape().begin(),
                              shaped.getShape().end());
}

/// A model input or output as the manifest lists it.
static std::vector<::tp::rt::TensorSpec>
getSignatureSpecs(const std::vector<TensorSignature> &list, StringRef kind) {
  std::vector<::tp::rt::TensorSpec> specs;
  for (const TensorSignature &sig : list) {
    ::tp::rt::TensorSpec spec;
    spec.kind = kind.str();
    spec.name = sig.name;
    spec.dtype = sig.dtype;
    spec.shape = sig.shape;
    spec.stage = sig.stage;
    spec.splitDim = sig.splitDim;
    if (sig.indexBound > 0)
      spec.indexRange = {-sig.indexBound, sig.indexBound - 1};
    specs.push_back(std::move(spec));
  }
  return specs;
}

/// A stage function's arguments or results as the runtime binds them.
static std::vector<::tp::rt::TensorSpec> getBindings(func::FuncOp func,
                                                     bool results) {
  std::vector<::tp::rt::TensorSpec> specs;
  unsigned count = results ? func.getNumResults() : func.getNumArguments();
  for (unsigned i = 0; i < count; ++i) {
    Type type = results ? func.getResultTypes()[i] : func.getArgumentTypes()[i];
    DictionaryAttr attrs =
        results ? func.getResultAttrDict(i) : func.getArgAttrDict(i);
    ::tp::rt::TensorSpec spec;
    spec.kind = results ? "send" : "argument";
    for (auto [attrName, attrKind] :
         {std::pair("tp.weight", "weight"), std::pair("tp.input", "input"),
          std::pair("tp.cache", "cache"), std::pair("tp.output", "output")})
      if (auto attr = attrs ? attrs.getAs<StringAttr>(attrName) : nullptr) {
        spec.kind = attrKind;
        spec.name = attr.getValue().str();
      }
    auto shaped = dyn_cast<ShapedType>(type);
    // A weight is bound by its key in the rank file: a piece of a fused
    // weight by its range of the initializer.
    if (spec.kind == "weight" && !results)
      spec.name = getPieceName(spec.name, getLayout(func, i),
                               shaped ? shaped.getRank() : 0);
    spec.dtype = getDTypeName(shaped ? shaped.getElementType() : type);
    spec.shape = shapeOf(type);
    specs.push_back(std::move(spec));
  }
  return specs;
}

static std::vector<::tp::rt::StageSpec>
getStageSpecs(const ArtifactPlan &plan, ArrayRef<func::FuncOp> funcs) {
  std::vector<::tp::rt::StageSpec> stages;
  for (auto [stage, func] : llvm::enumerate(funcs)) {
    ::tp::rt::StageSpec spec;
    spec.stage = static_cast<int64_t>(stage);
    spec.function = func::FuncOp(func).getSymName().str();
    for (int64_t t = 0; t < plan.tpDevices; ++t)
      spec.ranks.push_back(
          static_cast<int32_t>(int64_t(stage) * plan.tpDevices + t));
    spec.args = getBindings(func, /*results=*/false);
    spec.results = getBindings(func, /*results=*/true);
    stages.push_back(std::move(spec));
  }
  return stages;
}

/// The manifest of the artifact being written; lib/Runtime prints it
/// (printManifest), so that one schema has one writer and one reader.
static ::tp::rt::Manifest getManifest(const ArtifactPlan &plan,
                                      StringRef modelPath,
                                      const std::vector<RankOutput> &outputs,
                                      const ArtifactOptions &options,
                                      StringRef source, StringRef library) {
  ::tp::rt::Manifest manifest;
  manifest.model = modelPath.str();
  manifest.mlir = "model.mlir";
  manifest.target = options.target;
  manifest.source = source.str();
  manifest.library = library.str();
  manifest.tp = plan.tpDevices;
  manifest.pp = plan.stages;
  manifest.microbatches = plan.microbatches;
  manifest.ranks = plan.tpDevices * plan.stages;
  manifest.stages = getStageSpecs(plan, plan.stageFuncs);
  manifest.inputs = getSignatureSpecs(plan.inputs, "input");
  manifest.outputs = getSignatureSpecs(plan.outputs, "output");
  manifest.training = options.training;
  if (options.maxSeq > 0) {
    manifest.maxSeq = options.maxSeq;
    manifest.maxBatch = options.maxBatch;
    for (const ArtifactPlan::Prefill &chunk : plan.prefills) {
      ::tp::rt::PrefillSpec &prefill = manifest.prefill.emplace_back();
      prefill.length = chunk.length;
      prefill.stages = getStageSpecs(plan, chunk.funcs);
      prefill.inputs = getSignatureSpecs(chunk.inputs, "input");
      prefill.outputs = getSignatureSpecs(chunk.outputs, "output");
    }
  }
  for (const RankPlan &rank : plan.ranks) {
    const RankOutput &out = outputs[rank.rank];
    uint64_t headerBytes = out.bytes - rank.dataBytes;
    ::tp::rt::RankSpec spec;
    spec.rank = static_cast<int32_t>(rank.rank);
    spec.stage = rank.stage;
    spec.tpIndex = rank.tpIndex;
    spec.function =
        func::FuncOp(plan.stageFuncs[rank.stage]).getSymName().str();
    spec.file = rank.fileName;
    spec.bytes = out.bytes;
    spec.sha256 = out.sha256;
    for (const ShardPlacement &shard : rank.shards) {
      const WeightPlan &weight = plan.weights[shard.weight];
      const WeightUse &use = weight.uses[shard.use];
      ::tp::rt::WeightSpec w;
      w.name = use.key;
      w.initializer = weight.name;
      w.dtype = weight.kind.safetensorsName;
      w.globalShape = weight.globalShape;
      w.shape = use.localShape;
      w.isSplit = use.getSplitDim() >= 0;
      w.isSlice = static_cast<bool>(use.piece);
      w.dim = w.isSlice || use.repeat > 1 ? use.dim : use.getSplitDim();
      w.sliceOffset = use.offset;
      w.sliceSize = use.size;
      w.paddedSize = use.padded;
      if (use.repeat > 1)
        w.repeat = {use.repeatBlocks, use.repeat};
      w.role = stringifySplitRole(use.role).str();
      w.dataBegin = shard.begin;
      w.bytes = shard.end - shard.begin;
      w.fileOffset = headerBytes + shard.begin;
      spec.weights.push_back(std::move(w));
    }
    manifest.rankSpecs.push_back(std::move(spec));
  }
  return manifest;
}

/// SHA256SUMS over every file of the artifact (the rank files by the
/// digests taken while they were written), in `sha256sum` format.
static LogicalResult writeChecksums(StringRef outDir, const ArtifactPlan &plan,
                                    const std::vector<RankOutput> &outputs,
                                    Location loc) {
  std::map<std::string, std::string> digests;
  for (const RankPlan &rank : plan.ranks)
    digests[rank.fileName] = outputs[rank.rank].sha256;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(outDir, ec), end; it != end && !ec;
       it.increment(ec)) {
    std::string name = llvm::sys::path::filename(it->path()).str();
    if (digests.count(name) || name == TP_ARTIFACT_CHECKSUMS ||
        it->type() == llvm::sys::fs::file_type::directory_file)
      continue;
    auto buffer = llvm::MemoryBuffer::getFile(it->path(), /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return emitError(loc) << "cannot read '" << it->path()
                            << "': " << buffer.getError().message();
    digests[name] = ::tp::rt::sha256Hex((*buffer)->getBufferStart(),
                                        (*buffer)->getBufferSize());
  }
  if (ec)
    return emitError(loc) << "cannot list '" << outDir << "': " << ec.message();
  SmallString<256> path(outDir);
  llvm::sys::path::append(path, TP_ARTIFACT_CHECKSUMS);
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return emitError(loc) << "cannot write '" << path << "': " << ec.message();
  for (const auto &[name, digest] : digests)
    os << digest << "  " << name << "\n";
  os.close();
  if (os.has_error())
    return emitError(loc) << "cannot write '" << path
                          << "': " << os.error().message();
  return success();
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
  ::tp::rt::Manifest written =
      getManifest(*plan, modelPath, outputs, options, source, library);
  if (auto tied =
          module->getAttrOfType<ArrayAttr>(TPDialect::kTiedWeightsAttrName))
    for (auto tie : tied.getAsRange<TiedWeightAttr>())
      written.tied.push_back(
          {tie.getCopy().str(), tie.getSource().str(), tie.getTransposed()});
  *manifest << ::tp::rt::printManifest(written);
  manifest->close();
  if (manifest->has_error())
    return emitError(loc) << "cannot write manifest.json: "
                          << manifest->error().message();
  return writeChecksums(outDir, *plan, outputs, loc);
}
