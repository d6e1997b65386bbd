//===- SafeTensors.cpp - safetensors file headers -------------------------===//
//
// Entries are written in data order, so a reader that walks the header sees
// the tensors in the order their bytes follow.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/SafeTensors.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir::tp::artifact;

std::string mlir::tp::artifact::buildSafeTensorsHeader(
    const std::vector<SafeTensorsEntry> &entries,
    const std::vector<std::pair<std::string, std::string>> &metadata) {
  std::string json;
  llvm::raw_string_ostream os(json);
  llvm::json::OStream out(os);
  out.object([&] {
    if (!metadata.empty())
      out.attributeObject("__metadata__", [&] {
        for (const auto &[key, value] : metadata)
          out.attribute(key, value);
      });
    for (const SafeTensorsEntry &entry : entries)
      out.attributeObject(entry.name, [&] {
        out.attribute("dtype", entry.dtype);
        out.attributeArray("shape", [&] {
          for (int64_t dim : entry.shape)
            out.value(dim);
        });
        out.attributeArray("data_offsets", [&] {
          out.value(entry.begin);
          out.value(entry.end);
        });
      });
  });
  os.flush();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes + json;
}
