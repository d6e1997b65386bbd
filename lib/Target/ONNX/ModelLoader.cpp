//===- ModelLoader.cpp - reading ONNX model files -------------------------===//
//
// Turns bytes into a ModelProto (binary protobuf or ONNX text format) and
// vets external-data references, so that the importer never reads weights
// and never follows a path out of the model's folder.
//
//===----------------------------------------------------------------------===//

#include "ModelLoader.h"
#include "TorchScriptLoader.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "onnx/defs/parser.h"

#include <stdexcept>

using namespace mlir;
using namespace mlir::tp::onnx_import;

static bool looksLikeText(StringRef bytes) {
  StringRef head = bytes.ltrim().take_front(256);
  if (head.empty())
    return false;
  return llvm::all_of(
             head,
             [](char c) { return llvm::isPrint(c) || llvm::isSpace(c); }) &&
         (head.front() == '<' || llvm::isAlpha(head.front()));
}

LogicalResult mlir::tp::onnx_import::parseModel(StringRef bytes, StringRef path,
                                                Location loc,
                                                onnx::ModelProto &model) {
  if (bytes.empty())
    return emitError(loc) << "'" << path << "' is empty, not an ONNX model";
  if (isTorchScriptFile(bytes))
    return loadTorchScript(path, /*options=*/nullptr, loc, model);
  bool text = path.ends_with(".onnxtxt") || looksLikeText(bytes);
  if (text) {
    std::string buffer = bytes.str();
    onnx::OnnxParser parser(buffer.c_str());
    // ONNX's parser reports most errors in its Status, but reads numbers
    // with std::stoll and std::stof, which throw std::invalid_argument or
    // std::out_of_range (both std::logic_error) on text such as "2,St5" or
    // "99999999999999999999". Caught here, where ONNX's code returns: the
    // rest of the compiler has no exceptions.
    onnx::Status status;
    try {
      status = parser.Parse(model);
    } catch (const std::logic_error &e) {
      return emitError(loc) << "cannot parse '" << path
                            << "' as ONNX text format: a malformed or "
                               "out-of-range number ("
                            << e.what() << ")";
    }
    if (!status.IsOK())
      return emitError(loc)
             << "cannot parse '" << path
             << "' as ONNX text format: " << status.ErrorMessage();
    return success();
  }
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    return emitError(loc) << "'" << path
                          << "' is larger than 2 GiB; keep the weights as "
                             "ONNX external data";
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return emitError(loc) << "'" << path
                          << "' is not a valid ONNX model (corrupt or "
                             "truncated protobuf)";
  if (!model.has_graph())
    return emitError(loc) << "'" << path << "' has no graph";
  return success();
}

FailureOr<ExternalLocation>
mlir::tp::onnx_import::checkExternalData(const onnx::TensorProto &tensor,
                                         StringRef modelDir,
                                         uint64_t expectedBytes, Location loc) {
  ExternalLocation ext;
  bool hasLength = false;
  for (const auto &entry : tensor.external_data()) {
    if (entry.key() == "location") {
      ext.file = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      uint64_t v;
      if (StringRef(entry.value()).getAsInteger(10, v))
        return emitError(loc) << "external data of tensor '" << tensor.name()
                              << "' has a malformed " << entry.key() << " '"
                              << entry.value() << "'";
      if (entry.key() == "offset") {
        ext.offset = v;
      } else {
        ext.length = v;
        hasLength = true;
      }
    }
  }
  if (ext.file.empty())
    return emitError(loc) << "external data of tensor '" << tensor.name()
                          << "' has no location";
  StringRef file = ext.file;
  bool escapes =
      llvm::sys::path::is_absolute(file) ||
      llvm::sys::path::is_absolute(file, llvm::sys::path::Style::windows);
  for (auto it = llvm::sys::path::begin(file), e = llvm::sys::path::end(file);
       it != e; ++it)
    escapes |= *it == "..";
  if (escapes)
    return emitError(loc) << "external data location '" << file
                          << "' of tensor '" << tensor.name()
                          << "' leaves the model's folder; only relative "
                             "paths inside it are allowed";
  if (!hasLength)
    ext.length = expectedBytes;
  if (ext.length != expectedBytes)
    return emitError(loc) << "external data of tensor '" << tensor.name()
                          << "' has length " << ext.length << " but its type "
                          << "needs " << expectedBytes << " bytes";
  SmallString<256> full(modelDir);
  llvm::sys::path::append(full, file);
  uint64_t size;
  if (llvm::sys::fs::file_size(full, size))
    return emitError(loc) << "external data file '" << full << "' of tensor '"
                          << tensor.name() << "' does not exist";
  // A symlink (or a link in a folder on the way) must not lead out of the
  // model's folder either: the data would be copied into the artifact.
  SmallString<256> realFile, realDir;
  if (llvm::sys::fs::real_path(full, realFile) ||
      llvm::sys::fs::real_path(modelDir.empty() ? "." : modelDir, realDir))
    return emitError(loc) << "cannot resolve external data file '" << full
                          << "' of tensor '" << tensor.name() << "'";
  llvm::sys::path::append(realDir, "");
  if (!StringRef(realFile).starts_with(realDir))
    return emitError(loc) << "external data location '" << file
                          << "' of tensor '" << tensor.name()
                          << "' resolves to '" << realFile
                          << "', outside the model's folder";
  if (!llvm::sys::fs::is_regular_file(realFile))
    return emitError(loc) << "external data file '" << full << "' of tensor '"
                          << tensor.name() << "' is not a regular file";
  if (ext.offset > size || ext.length > size - ext.offset)
    return emitError(loc) << "external data file '" << full << "' holds "
                          << size << " bytes, but tensor '" << tensor.name()
                          << "' needs " << ext.length << " bytes from offset "
                          << ext.offset;
  return ext;
}
