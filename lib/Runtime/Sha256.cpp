//===- Sha256.cpp - SHA-256 through OpenSSL -------------------------------===//

#include "tp/Runtime/Sha256.h"

#include "tp/Runtime/RankContext.h"

#include <openssl/evp.h>

using namespace tp::rt;

Sha256::Sha256() : context(EVP_MD_CTX_new()) {
  if (!context || EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1)
    throw Error("OpenSSL could not start a SHA-256 digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(context); }

void Sha256::update(const void *data, size_t size) {
  if (EVP_DigestUpdate(context, data, size) != 1)
    throw Error("OpenSSL could not update a SHA-256 digest");
}

std::string Sha256::finalHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context, digest, &length) != 1 || length != 32)
    throw Error("OpenSSL could not finish a SHA-256 digest");
  static const char kHex[] = "0123456789abcdef";
  std::string hex(2 * length, '0');
  for (unsigned int i = 0; i < length; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 15];
  }
  return hex;
}

std::string tp::rt::sha256Hex(const void *data, size_t size) {
  Sha256 hasher;
  hasher.update(data, size);
  return hasher.finalHex();
}
