//===- SafeTensors.h - safetensors file headers -----------------*- C++ -*-===//
//
// The safetensors layout: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then
// the tensors' bytes. Shared by the artifact writer and tp-export-weights.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_ARTIFACT_SAFETENSORS_H
#define TP_TARGET_ARTIFACT_SAFETENSORS_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlir::tp::artifact {

struct SafeTensorsEntry {
  std::string name;
  std::string dtype; // "F32", "BF16", ...
  std::vector<int64_t> shape;
  /// Byte range relative to the start of the data section.
  uint64_t begin = 0, end = 0;
};

/// Returns the bytes that precede the data: the length prefix and the JSON
/// header, padded with spaces so that the data starts 8-byte aligned (as the
/// reference implementation does).
std::string buildSafeTensorsHeader(
    const std::vector<SafeTensorsEntry> &entries,
    const std::vector<std::pair<std::string, std::string>> &metadata);

} // namespace mlir::tp::artifact

#endif // TP_TARGET_ARTIFACT_SAFETENSORS_H
