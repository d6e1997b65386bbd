//===- manifest-fuzzer.cpp - the manifest and safetensors readers ---------===//
//
// libFuzzer target: each input is an artifact's manifest.json, a NUL byte,
// and the bytes of its rank 0 weight file, as tp-run and tp-export-weights
// read them (parseManifest, then checkSafeTensorsHeader for rank 0).
// tp::rt::Error is the expected answer to a bad artifact. A finding is any
// other exception, a crash, a sanitizer report, a manifest accepted with an
// entry the runtime would read outside its file or its rank grid, or one
// whose printed text (printManifest, the schema's one writer) does not
// parse back to the same text.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/RankContext.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace tp::rt;

[[noreturn]] static void finding(const std::string &what) {
  std::fprintf(stderr, "finding: %s\n", what.c_str());
  std::abort();
}

/// What every accepted manifest must guarantee the runtime, which indexes
/// buffers and files by these numbers without checking them again.
static void checkInvariants(const Manifest &m) {
  if (m.ranks != m.tp * m.pp || m.ranks < 1 || m.ranks > kMaxRanks ||
      static_cast<int64_t>(m.rankSpecs.size()) != m.ranks ||
      static_cast<int64_t>(m.stages.size()) != m.pp || m.microbatches < 1)
    finding("an accepted manifest has an inconsistent grid");
  for (size_t r = 0; r < m.rankSpecs.size(); ++r) {
    const RankSpec &spec = m.rankSpecs[r];
    if (spec.rank != static_cast<int32_t>(r) || spec.file.empty() ||
        spec.file.find('/') != std::string::npos)
      finding("an accepted manifest has a bad rank entry");
    for (const WeightSpec &w : spec.weights) {
      int64_t elementBytes = dtypeNameBytes(w.dtype);
      int64_t count = 1;
      for (int64_t d : w.shape)
        count *= d;
      if (elementBytes == 0 || w.bytes != uint64_t(count * elementBytes) ||
          w.fileOffset > spec.bytes || w.bytes > spec.bytes - w.fileOffset)
        finding("an accepted weight '" + w.name + "' lies outside its file");
    }
  }
  for (const StageSpec &stage : m.stages)
    for (const auto *list : {&stage.args, &stage.results})
      for (const TensorSpec &t : *list)
        if (t.bytes() < 0 || t.bytes() > kMaxTensorBytes)
          finding("an accepted tensor '" + t.name + "' has a bad size");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = reinterpret_cast<const char *>(data);
  const char *nul = static_cast<const char *>(std::memchr(text, 0, size));
  std::string json(text, nul ? nul - text : size);
  const char *file = nul ? nul + 1 : text + size;
  uint64_t fileBytes = nul ? size - (nul + 1 - text) : 0;
  try {
    Manifest manifest = parseManifest(json, "fuzz.tpa");
    checkInvariants(manifest);
    (void)getManifestSignature(manifest);
    // The writer and the reader are one schema: what the reader accepted,
    // printed, reads back the same.
    std::string printed = printManifest(manifest);
    Manifest reread;
    try {
      reread = parseManifest(printed, "fuzz.tpa");
    } catch (const Error &e) {
      finding(std::string("a printed manifest does not parse: ") + e.what());
    }
    if (printManifest(reread) != printed)
      finding("a printed manifest parses to another manifest");
    checkSafeTensorsHeader(manifest.rankSpecs[0], file, fileBytes,
                           "fuzz.tpa/" + manifest.rankSpecs[0].file);
  } catch (const Error &) {
    return 0;
  } catch (const std::exception &e) {
    finding(std::string("an exception other than tp::rt::Error: ") + e.what());
  }
  return 0;
}
