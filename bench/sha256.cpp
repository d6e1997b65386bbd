// SHA-256 as the artifact's checksums take it: LLVM's portable
// implementation (llvm::SHA256, what tp-compile and tp-run used) against
// tp::rt::Sha256 (OpenSSL's libcrypto), over one buffer of the size of a
// rank file. Built and run by bench/sha256.py; prints one line per round:
// "<llvm MB/s> <openssl MB/s> <digests equal: 1/0>".

#include "tp/Runtime/Sha256.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char **argv) {
  size_t megabytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  std::vector<unsigned char> data(megabytes << 20);
  std::mt19937 random(1);
  for (unsigned char &byte : data)
    byte = static_cast<unsigned char>(random());
  auto seconds = [](auto start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  for (int round = 0; round < rounds; ++round) {
    auto start = std::chrono::steady_clock::now();
    llvm::SHA256 llvmHasher;
    llvmHasher.update(llvm::ArrayRef<uint8_t>(data.data(), data.size()));
    std::string llvmDigest = llvm::toHex(llvmHasher.final(), true);
    double llvmSeconds = seconds(start);
    start = std::chrono::steady_clock::now();
    std::string digest = tp::rt::sha256Hex(data.data(), data.size());
    double sslSeconds = seconds(start);
    std::printf("%.1f %.1f %d\n", megabytes / llvmSeconds,
                megabytes / sslSeconds, int(digest == llvmDigest));
  }
  return 0;
}
