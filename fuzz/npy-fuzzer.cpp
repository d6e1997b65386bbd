//===- npy-fuzzer.cpp - the .npy reader -----------------------------------===//
//
// libFuzzer target: each input is the bytes of a .npy file, as tp-run reads
// its inputs. tp::rt::Error is the expected answer to a bad file; what is
// parsed must be as large as its shape says.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Npy.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tp::rt::NpyArray array;
  try {
    array = tp::rt::parseNpy(
        std::string_view(reinterpret_cast<const char *>(data), size),
        "fuzz.npy");
  } catch (const tp::rt::Error &) {
    return 0;
  }
  bool ok = false;
  tp::rt::DType type = tp::rt::dtypeFromDescr(array.descr, ok);
  if (!ok || static_cast<int64_t>(array.data.size()) !=
                 array.elementCount() * tp::rt::dtypeBytes(type)) {
    std::fprintf(stderr, "finding: parseNpy returned an inconsistent array\n");
    std::abort();
  }
  return 0;
}
