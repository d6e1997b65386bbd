//===- OnnxWeightExport.cpp - the trained model as an ONNX file -----------===//
//
// tp-export-weights -o model.onnx: the ONNX model the artifact was compiled
// from, with each of its weight initializers replaced by the artifact's (or a
// training checkpoint's) unsplit value, as tensor_parallel's
// save_tensor_parallel gives the trained model back. The weights are
// reassembled by exportWeights into a safetensors file beside the output,
// which is then read by name; every other initializer, node and attribute
// of the source is kept as it was. An initializer that was external data in
// the source, or a model whose weights exceed 1 GiB, is written as external
// data (`<output>.data`), since a protobuf message cannot exceed 2 GiB.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/WeightExport.h"

#include "tp/Runtime/Artifact.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "../ONNX/ModelLoader.h"

#include <cstring>
#include <fstream>
#include <unistd.h>

using namespace mlir;
using namespace mlir::tp;
using llvm::StringRef;

namespace {

/// One tensor of the reassembled safetensors file.
struct Stored {
  std::string dtype;
  std::vector<int64_t> shape;
  StringRef bytes;
};

/// Removes a file when it goes out of scope, unless kept.
struct TemporaryFile {
  std::string path;
  bool keep = false;
  ~TemporaryFile() {
    if (!keep && !path.empty())
      (void)llvm::sys::fs::remove(path);
  }
};

/// The tensors of a safetensors file held in `buffer`.
bool readSafeTensors(const llvm::MemoryBuffer &buffer,
                     llvm::StringMap<Stored> &tensors, std::string &error) {
  StringRef all = buffer.getBuffer();
  if (all.size() < 8) {
    error = "the reassembled weights are truncated";
    return false;
  }
  uint64_t headerBytes =
      llvm::support::endian::read64le(all.data()); // as exportWeights wrote
  if (headerBytes > all.size() - 8) {
    error = "the reassembled weights have a bad header";
    return false;
  }
  llvm::Expected<llvm::json::Value> header =
      llvm::json::parse(all.substr(8, headerBytes));
  if (!header) {
    error = "the reassembled weights have a bad header: " +
            llvm::toString(header.takeError());
    return false;
  }
  StringRef data = all.substr(8 + headerBytes);
  for (const auto &[key, value] : *header->getAsObject()) {
    if (key == "__metadata__")
      continue;
    const llvm::json::Object *entry = value.getAsObject();
    const llvm::json::Array *shape = entry->getArray("shape");
    const llvm::json::Array *offsets = entry->getArray("data_offsets");
    Stored stored;
    stored.dtype = entry->getString("dtype").value_or("").str();
    for (const llvm::json::Value &dim : *shape)
      stored.shape.push_back(dim.getAsInteger().value_or(-1));
    uint64_t begin = (*offsets)[0].getAsUINT64().value_or(0);
    uint64_t end = (*offsets)[1].getAsUINT64().value_or(0);
    stored.bytes = data.substr(begin, end - begin);
    tensors[key.str()] = std::move(stored);
  }
  return true;
}

/// IEEE half to float, exactly.
float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (!mantissa) {
    bits = sign;
  } else {
    // A subnormal half is a normal float.
    int shift = 0;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | ((113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// The bytes of `stored` as the initializer's element type `dataType`: the
/// same bytes, or f32 widened from the bf16/f16 an artifact compiled with
/// --dtype holds. Fails on any other pairing.
bool convertTo(int32_t dataType, const Stored &stored, std::string &out) {
  using onnx::TensorProto;
  if ((dataType == TensorProto::FLOAT && stored.dtype == "F32") ||
      (dataType == TensorProto::FLOAT16 && stored.dtype == "F16") ||
      (dataType == TensorProto::BFLOAT16 && stored.dtype == "BF16") ||
      (dataType == TensorProto::DOUBLE && stored.dtype == "F64")) {
    out.assign(stored.bytes.data(), stored.bytes.size());
    return true;
  }
  if (dataType != TensorProto::FLOAT ||
      (stored.dtype != "BF16" && stored.dtype != "F16"))
    return false;
  size_t count = stored.bytes.size() / 2;
  out.resize(count * 4);
  for (size_t i = 0; i < count; ++i) {
    uint16_t h = llvm::support::endian::read16le(stored.bytes.data() + 2 * i);
    float f;
    if (stored.dtype == "BF16") {
      uint32_t bits = uint32_t(h) << 16;
      std::memcpy(&f, &bits, 4);
    } else {
      f = halfToFloat(h);
    }
    llvm::support::endian::write32le(out.data() + 4 * i,
                                     llvm::bit_cast<uint32_t>(f));
  }
  return true;
}

/// Parses the ONNX model at `path`, diagnostics into `error`.
bool loadModel(StringRef path, onnx::ModelProto &model, std::string &error) {
  auto bytes = llvm::MemoryBuffer::getFile(path);
  if (!bytes) {
    error = "cannot read '" + path.str() + "': " + bytes.getError().message();
    return false;
  }
  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    diagnostics += diag.str();
    return success();
  });
  Location loc = FileLineColLoc::get(&context, path, 0, 0);
  if (failed(
          onnx_import::parseModel((*bytes)->getBuffer(), path, loc, model))) {
    error = diagnostics;
    return false;
  }
  return true;
}

/// Writes `bytes` to `path` through a partial file renamed into place.
bool writeAtomically(const std::string &path,
                     llvm::function_ref<bool(std::ostream &)> write,
                     std::string &error) {
  TemporaryFile partial{path + ".partial." + std::to_string(::getpid())};
  {
    std::ofstream os(partial.path, std::ios::binary | std::ios::trunc);
    if (!os || !write(os) || !os.flush()) {
      error = "cannot write '" + partial.path + "'";
      return false;
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(partial.path, path)) {
    error = "cannot rename '" + partial.path + "' to '" + path +
            "': " + ec.message();
    return false;
  }
  partial.keep = true;
  return true;
}

} // namespace

bool mlir::tp::exportOnnxModel(StringRef artifactDir, StringRef sourceModel,
                               StringRef outPath, bool progress,
                               std::string &error, StringRef checkpointDir) {
  std::string source = sourceModel.str();
  if (source.empty()) {
    try {
      source = ::tp::rt::loadManifest(artifactDir.str()).model;
    } catch (const ::tp::rt::Error &e) {
      error = e.what();
      return false;
    }
    StringRef ext = llvm::sys::path::extension(source);
    if (ext != ".onnx" && ext != ".onnxtxt") {
      error = "the artifact was compiled from '" + source +
              "', not an ONNX model: pass --onnx-model with the ONNX export "
              "of the same model, or write safetensors (-o NAME.safetensors)";
      return false;
    }
  }
  onnx::ModelProto model;
  if (!loadModel(source, model, error)) {
    if (sourceModel.empty())
      error += " (the model the artifact was compiled from; pass "
               "--onnx-model with it)";
    return false;
  }

  TemporaryFile weightsFile{
      (outPath + ".weights.partial." + llvm::Twine(::getpid())).str()};
  if (!exportWeights(artifactDir, weightsFile.path, progress, error,
                     checkpointDir))
    return false;
  auto buffer = llvm::MemoryBuffer::getFile(weightsFile.path);
  if (!buffer) {
    error = "cannot read '" + weightsFile.path +
            "': " + buffer.getError().message();
    return false;
  }
  llvm::StringMap<Stored> tensors;
  if (!readSafeTensors(**buffer, tensors, error))
    return false;

  // Each weight replaces its initializer; what it replaced tells whether
  // the output keeps its weights outside the model, as the source did.
  bool external = false;
  uint64_t total = 0;
  llvm::StringMap<onnx::TensorProto *> initializers;
  for (onnx::TensorProto &init : *model.mutable_graph()->mutable_initializer())
    initializers[init.name()] = &init;
  for (const auto &entry : tensors) {
    auto it = initializers.find(entry.getKey());
    if (it == initializers.end()) {
      error = "weight '" + entry.getKey().str() +
              "' is not an initializer of '" + source +
              "': not the model the artifact was compiled from";
      return false;
    }
    const onnx::TensorProto &init = *it->second;
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (dims != entry.getValue().shape) {
      error = "weight '" + entry.getKey().str() + "' has another shape in '" +
              source + "' than in the artifact";
      return false;
    }
    external |= init.data_location() == onnx::TensorProto::EXTERNAL;
    total += entry.getValue().bytes.size();
  }
  external |= total > (uint64_t(1) << 30);

  std::string dataName = llvm::sys::path::filename(outPath).str() + ".data";
  std::string dataPath =
      (llvm::sys::path::parent_path(outPath).empty()
           ? dataName
           : (llvm::sys::path::parent_path(outPath) + "/" + dataName).str());
  // External data is written as it is converted, one tensor at a time.
  TemporaryFile dataPartial;
  std::ofstream data;
  if (external) {
    dataPartial.path = dataPath + ".partial." + std::to_string(::getpid());
    data.open(dataPartial.path, std::ios::binary | std::ios::trunc);
  }
  uint64_t offset = 0;
  for (const auto &entry : tensors) {
    onnx::TensorProto &init = *initializers[entry.getKey()];
    std::string bytes;
    if (!convertTo(init.data_type(), entry.getValue(), bytes)) {
      error = "weight '" + entry.getKey().str() + "' is " +
              entry.getValue().dtype + " in the artifact, and of ONNX type " +
              std::to_string(init.data_type()) + " in '" + source + "'";
      return false;
    }
    init.clear_float_data();
    init.clear_int32_data();
    init.clear_int64_data();
    init.clear_double_data();
    init.clear_uint64_data();
    init.clear_raw_data();
    init.clear_external_data();
    init.set_data_location(onnx::TensorProto::DEFAULT);
    if (!external) {
      init.set_raw_data(std::move(bytes));
      continue;
    }
    init.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const std::string &key, const std::string &value) {
      onnx::StringStringEntryProto *kv = init.add_external_data();
      kv->set_key(key);
      kv->set_value(value);
    };
    add("location", dataName);
    add("offset", std::to_string(offset));
    add("length", std::to_string(bytes.size()));
    offset += bytes.size();
    data.write(bytes.data(), bytes.size());
  }
  if (external) {
    data.close();
    if (!data) {
      error = "cannot write '" + dataPartial.path + "'";
      return false;
    }
    if (std::error_code ec =
            llvm::sys::fs::rename(dataPartial.path, dataPath)) {
      error = "cannot rename '" + dataPartial.path + "' to '" + dataPath +
              "': " + ec.message();
      return false;
    }
    dataPartial.keep = true;
  }
  if (!writeAtomically(
          outPath.str(),
          [&](std::ostream &os) { return model.SerializeToOstream(&os); },
          error))
    return false;
  if (progress)
    llvm::errs() << "wrote " << outPath << ": " << tensors.size()
                 << " initializers replaced, " << total << " bytes"
                 << (external ? " in " + dataPath : std::string()) << "\n";
  return true;
}
