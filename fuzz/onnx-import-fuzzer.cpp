//===- onnx-import-fuzzer.cpp - the ONNX importer on binary models --------===//
//
// libFuzzer target: each input is a binary ONNX model (protobuf). Text-like
// inputs still reach the text reader, as they do from a `.onnx` file.
//
//===----------------------------------------------------------------------===//

#include "FuzzImport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tp::fuzz::importONNX(data, size, "fuzz.onnx");
  return 0;
}
