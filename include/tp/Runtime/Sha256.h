//===- Sha256.h - SHA-256 of an artifact's files ----------------*- C++ -*-===//
//
// The checksums of SHA256SUMS: taken while tp-compile writes the rank
// files, and again whenever a rank file is loaded. OpenSSL's implementation
// (libcrypto), which runs on the CPU's SHA extensions where it has them
// (x86 SHA-NI, Armv8's SHA2 instructions): 5.3x LLVM's portable one on this
// project's machines (bench/sha256.py), and every load of a large
// model hashes all of its weights.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_SHA256_H
#define TP_RUNTIME_SHA256_H

#include <cstddef>
#include <string>

struct evp_md_ctx_st;

namespace tp::rt {

/// SHA-256 of bytes given in pieces.
class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;

  void update(const void *data, size_t size);
  /// The digest of everything given, as 64 lower-case hex digits; nothing
  /// may be given after it.
  std::string finalHex();

private:
  evp_md_ctx_st *context;
};

/// SHA-256 of `size` bytes at `data`, as 64 lower-case hex digits.
std::string sha256Hex(const void *data, size_t size);

} // namespace tp::rt

#endif // TP_RUNTIME_SHA256_H
