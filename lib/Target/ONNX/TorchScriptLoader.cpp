//===- TorchScriptLoader.cpp - running tp-import-torchscript --------------===//
//
// The converter is found next to the running tool, else in the build's
// tool folder (the Python module runs inside python3), or where
// TP_IMPORT_TORCHSCRIPT says. Its messages come back as diagnostics at
// the model's location. One process converts each (file, shapes) once.
//
//===----------------------------------------------------------------------===//

#include "TorchScriptLoader.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"

#include <cstdlib>
#include <mutex>
#include <tuple>

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::onnx_import;

bool mlir::tp::isTorchScriptFile(StringRef bytes) {
  return bytes.starts_with(StringRef("PK\x03\x04", 4));
}

static const char *kConverter = "tp-import-torchscript";

static std::string findConverter() {
  if (const char *path = std::getenv("TP_IMPORT_TORCHSCRIPT"))
    return path;
  static int anchor;
  std::string self = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
  SmallString<256> candidate(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(candidate, kConverter);
  if (llvm::sys::fs::can_execute(candidate))
    return std::string(candidate);
  candidate = TP_TOOLS_DIR;
  llvm::sys::path::append(candidate, kConverter);
  if (llvm::sys::fs::can_execute(candidate))
    return std::string(candidate);
  return "";
}

/// `name=2x16:i64`, as the converter reads it.
static std::string formatInput(StringRef name, ArrayRef<int64_t> dims,
                               const ONNXImportOptions &options) {
  std::string text = (name + "=").str();
  for (size_t i = 0; i < dims.size(); ++i)
    text += (i ? "x" : "") + std::to_string(dims[i]);
  auto type = options.inputTypes.find(name);
  if (type != options.inputTypes.end())
    text += ":" + type->second;
  return text;
}

LogicalResult
mlir::tp::onnx_import::loadTorchScript(StringRef path,
                                       const ONNXImportOptions *options,
                                       Location loc, onnx::ModelProto &model) {
  std::string converter = findConverter();
  if (converter.empty())
    return emitError(loc) << "'" << path
                          << "' is a TorchScript file, but this tp-mlir was "
                             "built without the TorchScript frontend "
                             "(install libtorch-dev and rebuild)";

  SmallVector<std::string> args = {converter, path.str()};
  if (options) {
    SmallVector<StringRef> names;
    for (const auto &entry : options->inputShapes)
      names.push_back(entry.getKey());
    llvm::sort(names);
    for (StringRef name : names) {
      args.push_back("--input-shape");
      args.push_back(
          formatInput(name, options->inputShapes.lookup(name), *options));
    }
    for (const auto &entry : options->inputTypes)
      if (!options->inputShapes.count(entry.getKey()))
        return emitError(loc) << "--input-shape gives a type but no shape "
                                 "for input '"
                              << entry.getKey() << "'";
  } else {
    args.push_back("--weights-only");
  }

  static std::mutex mutex;
  // What each conversion made, and the warnings it printed (given again
  // on each use, so that every compile reports them).
  static llvm::StringMap<std::pair<std::string, std::string>> converted;
  std::string key;
  for (const std::string &arg : llvm::ArrayRef(args).drop_front())
    key += arg + '\0';
  std::string bytes, warnings;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = converted.find(key);
    if (it != converted.end())
      std::tie(bytes, warnings) = it->second;
  }
  if (bytes.empty()) {
    SmallString<128> outPath, errPath;
    int outFd, errFd;
    if (llvm::sys::fs::createTemporaryFile("tp-torchscript", "onnx", outFd,
                                           outPath) ||
        llvm::sys::fs::createTemporaryFile("tp-torchscript", "err", errFd,
                                           errPath))
      return emitError(loc)
             << "cannot create a temporary file to convert '" << path << "'";
    llvm::sys::Process::SafelyCloseFileDescriptor(outFd);
    llvm::sys::Process::SafelyCloseFileDescriptor(errFd);
    llvm::FileRemover removeOut(outPath), removeErr(errPath);
    args.push_back("-o");
    args.push_back(std::string(outPath));
    SmallVector<StringRef> argRefs(args.begin(), args.end());
    std::optional<StringRef> redirects[] = {std::nullopt, std::nullopt,
                                            StringRef(errPath)};
    std::string failure;
    int rc = llvm::sys::ExecuteAndWait(converter, argRefs, std::nullopt,
                                       redirects, 0, 0, &failure);
    if (rc != 0) {
      std::string message;
      if (auto err = llvm::MemoryBuffer::getFile(errPath))
        message = (*err)->getBuffer().trim().str();
      // The diagnostic's location names the file already.
      for (std::string prefix : {std::string("error: "), path.str() + ": "})
        if (StringRef(message).starts_with(prefix))
          message = message.substr(prefix.size());
      if (message.empty())
        message = failure.empty() ? kConverter +
                                        std::string(" stopped with "
                                                    "status ") +
                                        std::to_string(rc)
                                  : failure;
      return emitError(loc) << "cannot import TorchScript: " << message;
    }
    auto out = llvm::MemoryBuffer::getFile(outPath, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!out)
      return emitError(loc) << "cannot read what " << kConverter << " made of '"
                            << path << "'";
    bytes = (*out)->getBuffer().str();
    if (auto err = llvm::MemoryBuffer::getFile(errPath))
      warnings = (*err)->getBuffer().str();
    std::lock_guard<std::mutex> lock(mutex);
    converted[key] = {bytes, warnings};
  }
  // "warning: model.pt: input 'x' is assumed ...": the converter's
  // warnings (an input type it assumed) as ours; the location names the
  // file.
  SmallVector<StringRef> lines;
  StringRef(warnings).split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (StringRef line : lines)
    if (line.consume_front("warning: ")) {
      line.consume_front((path + ": ").str());
      emitWarning(loc) << line;
    }
  if (!model.ParseFromString(bytes))
    return emitError(loc) << kConverter << " wrote an invalid model for '"
                          << path << "'";
  return success();
}
