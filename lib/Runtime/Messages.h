//===- Messages.h - error text shared by the communicators ------*- C++ -*-===//
//
// Private to lib/Runtime: the pieces of the messages that both communicators
// put in their Errors, so that a timeout reads the same under threads and MPI:
//
//   rank 0: all_reduce at model.mlir:57 timed out after 2 s waiting for rank 1
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_RUNTIME_MESSAGES_H
#define TP_LIB_RUNTIME_MESSAGES_H

#include "tp/Runtime/RankContext.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tp::rt::detail {

/// The site a collective was called with, or a stand-in when it has none.
inline std::string siteName(const char *site) {
  return site && *site ? std::string(site) : std::string("collective");
}

/// "rank R: <site>", the start of every communicator error.
inline std::string where(int32_t rank, const char *site) {
  return "rank " + std::to_string(rank) + ": " + siteName(site);
}

/// `duration` in seconds without trailing zeros: "2 s", "0.2 s", "1.25 s".
inline std::string formatSeconds(std::chrono::milliseconds duration) {
  int64_t millis = duration.count();
  std::string text = std::to_string(millis / 1000);
  int64_t fraction = millis % 1000;
  if (fraction == 0)
    return text + " s";
  std::string digits = std::to_string(fraction);
  digits.insert(0, 3 - digits.size(), '0');
  while (digits.back() == '0')
    digits.pop_back();
  return text + "." + digits + " s";
}

/// "rank 1" or "ranks 1, 3".
inline std::string listRanks(const std::vector<int32_t> &ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

/// Lower-case name of `type` as in the .npy and MLIR spellings.
inline const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::I16:
    return "i16";
  case DType::I8:
    return "i8";
  case DType::U8:
    return "u8";
  case DType::Bool:
    return "bool";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  }
  return "unknown";
}

inline const char *reductionName(Reduction op) {
  switch (op) {
  case Reduction::Sum:
    return "sum";
  case Reduction::Product:
    return "product";
  case Reduction::Max:
    return "max";
  case Reduction::Min:
    return "min";
  }
  return "unknown";
}

} // namespace tp::rt::detail

#endif // TP_LIB_RUNTIME_MESSAGES_H
