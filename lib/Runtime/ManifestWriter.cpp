//===- ManifestWriter.cpp - the one writer of manifest.json ---------------===//
//
// printManifest is the schema that parseManifest (Manifest.cpp) reads,
// written the other way: tp-compile fills a Manifest and prints it here, and
// `tp-run --print-manifest` prints what it parsed, so that the two sides of
// the schema are checked against each other (printing a parsed manifest
// gives the file back, byte for byte).
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Artifact.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace tp::rt;

namespace {

void printShape(llvm::json::OStream &json, llvm::StringRef key,
                const std::vector<int64_t> &shape) {
  json.attributeArray(key, [&] {
    for (int64_t dim : shape)
      json.value(dim);
  });
}

/// A model input or output.
void printSignature(llvm::json::OStream &json, llvm::StringRef key,
                    const std::vector<TensorSpec> &list) {
  json.attributeArray(key, [&] {
    for (const TensorSpec &spec : list)
      json.object([&] {
        json.attribute("name", spec.name);
        json.attribute("dtype", spec.dtype);
        printShape(json, "shape", spec.shape);
        json.attribute("stage", spec.stage);
        if (spec.splitDim >= 0)
          json.attribute("split_dim", spec.splitDim);
        if (spec.indexRange)
          json.attributeArray("index_range", [&] {
            json.value(spec.indexRange->first);
            json.value(spec.indexRange->second);
          });
      });
  });
}

/// A stage function's arguments or results, as the runtime binds them.
void printBindings(llvm::json::OStream &json, llvm::StringRef key,
                   const std::vector<TensorSpec> &list) {
  json.attributeArray(key, [&] {
    for (const TensorSpec &spec : list)
      json.object([&] {
        json.attribute("kind", spec.kind);
        if (!spec.name.empty())
          json.attribute("name", spec.name);
        json.attribute("dtype", spec.dtype);
        printShape(json, "shape", spec.shape);
      });
  });
}

void printProgram(llvm::json::OStream &json,
                  const std::vector<StageSpec> &stages,
                  const std::vector<TensorSpec> &inputs,
                  const std::vector<TensorSpec> &outputs) {
  json.attributeArray("stages", [&] {
    for (const StageSpec &stage : stages)
      json.object([&] {
        json.attribute("stage", stage.stage);
        json.attribute("function", stage.function);
        json.attributeArray("ranks", [&] {
          for (int32_t rank : stage.ranks)
            json.value(rank);
        });
        printBindings(json, "args", stage.args);
        printBindings(json, "results", stage.results);
      });
  });
  printSignature(json, "inputs", inputs);
  printSignature(json, "outputs", outputs);
}

void printWeight(llvm::json::OStream &json, const WeightSpec &weight) {
  json.object([&] {
    json.attribute("name", weight.name);
    json.attribute("initializer", weight.initializer);
    json.attribute("dtype", weight.dtype);
    printShape(json, "global_shape", weight.globalShape);
    printShape(json, "shape", weight.shape);
    json.attribute("split_dim", weight.isSplit ? weight.dim : int64_t(-1));
    if (weight.isSlice)
      json.attributeObject("slice", [&] {
        json.attribute("dim", weight.dim);
        json.attribute("offset", weight.sliceOffset);
        json.attribute("size", weight.sliceSize);
      });
    if (weight.paddedSize)
      json.attribute("padded_size", weight.paddedSize);
    if (!weight.repeat.empty())
      json.attributeObject("repeat", [&] {
        json.attribute("dim", weight.dim);
        json.attribute("blocks", weight.repeat[0]);
        json.attribute("times", weight.repeat[1]);
      });
    json.attribute("role", weight.role);
    json.attributeArray("data_offsets", [&] {
      json.value(weight.dataBegin);
      json.value(weight.dataBegin + weight.bytes);
    });
    json.attribute("file_offset", weight.fileOffset);
  });
}

} // namespace

std::string tp::rt::printManifest(const Manifest &manifest) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream json(os, /*IndentSize=*/2);
  json.object([&] {
    json.attribute("format", "tp-artifact");
    json.attribute("format_version", kArtifactFormatVersion);
    json.attribute("model", manifest.model);
    json.attribute("mlir", manifest.mlir);
    json.attribute("target", manifest.target);
    if (!manifest.source.empty())
      json.attribute("source", manifest.source);
    if (!manifest.library.empty())
      json.attribute("library", manifest.library);
    json.attributeObject("grid", [&] {
      json.attribute("tp", manifest.tp);
      json.attribute("pp", manifest.pp);
      json.attribute("microbatches", manifest.microbatches);
      json.attribute("ranks", manifest.ranks);
    });
    printProgram(json, manifest.stages, manifest.inputs, manifest.outputs);
    if (manifest.maxSeq > 0)
      json.attributeObject("generation", [&] {
        json.attribute("max_seq", manifest.maxSeq);
        json.attribute("max_batch", manifest.maxBatch);
        // The prompt's chunk programs: same ranks, weights and caches.
        if (!manifest.prefill.empty())
          json.attributeArray("prefill", [&] {
            for (const PrefillSpec &chunk : manifest.prefill)
              json.object([&] {
                json.attribute("length", chunk.length);
                printProgram(json, chunk.stages, chunk.inputs, chunk.outputs);
              });
          });
      });
    if (const std::optional<TrainingSpec> &training = manifest.training)
      json.attributeObject("training", [&] {
        json.attribute("optimizer", training->optimizer);
        json.attribute("lr", training->lr);
        json.attribute("beta1", training->beta1);
        json.attribute("beta2", training->beta2);
        json.attribute("eps", training->eps);
        json.attribute("weight_decay", training->weightDecay);
        json.attribute("momentum", training->momentum);
        json.attribute("clip_norm", training->clipNorm);
        json.attribute("accumulate", training->accumulate);
        json.attribute("data_parallel", training->dataParallel);
        json.attribute("bucket_bytes", training->bucketBytes);
        json.attribute("zero", training->zero);
        if (training->lossScale > 0) {
          json.attribute("loss_scale", training->lossScale);
          json.attribute("loss_scale_window", training->lossScaleWindow);
        }
        json.attribute("loss", training->loss);
      });
    if (!manifest.tied.empty())
      json.attributeArray("tied", [&] {
        for (const Manifest::TiedWeight &tie : manifest.tied)
          json.object([&] {
            json.attribute("copy", tie.copy);
            json.attribute("source", tie.source);
            json.attribute("transposed", tie.transposed);
          });
      });
    json.attributeArray("ranks", [&] {
      for (const RankSpec &rank : manifest.rankSpecs)
        json.object([&] {
          json.attribute("rank", rank.rank);
          json.attribute("stage", rank.stage);
          json.attribute("tp_index", rank.tpIndex);
          json.attribute("function", rank.function);
          json.attribute("file", rank.file);
          json.attribute("bytes", rank.bytes);
          json.attribute("sha256", rank.sha256);
          json.attributeArray("weights", [&] {
            for (const WeightSpec &weight : rank.weights)
              printWeight(json, weight);
          });
        });
    });
  });
  os << "\n";
  return text;
}
