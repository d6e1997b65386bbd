//===- onnx-text-import-fuzzer.cpp - the ONNX importer on text models -----===//
//
// libFuzzer target: each input is a model in the ONNX text format
// (`.onnxtxt`), which the importer hands to onnx::OnnxParser.
//
//===----------------------------------------------------------------------===//

#include "FuzzImport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tp::fuzz::importONNX(data, size, "fuzz.onnxtxt");
  return 0;
}
