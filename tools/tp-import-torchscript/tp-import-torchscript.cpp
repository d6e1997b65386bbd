//===- tp-import-torchscript.cpp - TorchScript to an ONNX graph -----------===//
//
// The half of the TorchScript frontend that needs libtorch, as its own
// program: tp-translate --import-torchscript and tp-compile run it when
// they are given a TorchScript file, and import what it writes with the
// ONNX importer (lib/Target/ONNX/TorchScriptLoader.cpp). Users need not
// run it themselves; it is documented in docs/importing.md.
//
//   tp-import-torchscript MODEL.pt --input-shape NAME=DIMS[:TYPE]... -o OUT
//   tp-import-torchscript MODEL.pt --weights-only -o OUT
//   tp-import-torchscript --list-ops
//
//===----------------------------------------------------------------------===//

#include "tp/Target/TorchScript/TorchScriptToONNX.h"

#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

using namespace tp::torchscript;

static int usage(const std::string &why) {
  std::cerr << "error: " << why << "\n"
            << "usage: tp-import-torchscript MODEL.pt [--input-shape "
               "NAME=DIMS[:TYPE]]... [--weights-only] -o OUT.onnx\n"
               "       tp-import-torchscript --list-ops\n";
  return 2;
}

/// NAME=2x16 or NAME=2x16:i64 (the types of tp-compile --dtype, and ints).
static bool parseInput(const std::string &text, ConvertOptions &options,
                       std::string &error) {
  size_t equals = text.rfind('=');
  if (equals == std::string::npos || equals == 0) {
    error = "expected NAME=DIMS[:TYPE] (e.g. input_ids=1x128:i64), got '" +
            text + "'";
    return false;
  }
  InputSpec spec;
  std::string dims = text.substr(equals + 1);
  if (size_t colon = dims.find(':'); colon != std::string::npos) {
    std::string type = dims.substr(colon + 1);
    dims = dims.substr(0, colon);
    static const std::pair<const char *, int32_t> types[] = {
        {"f32", onnx::TensorProto::FLOAT},
        {"f16", onnx::TensorProto::FLOAT16},
        {"bf16", onnx::TensorProto::BFLOAT16},
        {"f64", onnx::TensorProto::DOUBLE},
        {"i64", onnx::TensorProto::INT64},
        {"i32", onnx::TensorProto::INT32},
        {"bool", onnx::TensorProto::BOOL}};
    for (const auto &[name, id] : types)
      if (type == name)
        spec.elementType = id;
    if (!spec.elementType) {
      error = "unknown element type '" + type + "' in '" + text +
              "'; use f32, f16, bf16, f64, i64, i32 or bool";
      return false;
    }
  }
  size_t start = 0;
  while (!dims.empty() && start <= dims.size()) {
    size_t x = dims.find('x', start);
    std::string part = dims.substr(
        start, x == std::string::npos ? std::string::npos : x - start);
    char *end = nullptr;
    long long d = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || d < 0) {
      error = "bad dim '" + part + "' in '" + text +
              "'; dims are non-negative integers joined by 'x'";
      return false;
    }
    spec.shape.push_back(d);
    if (x == std::string::npos)
      break;
    start = x + 1;
  }
  options.inputs[text.substr(0, equals)] = spec;
  return true;
}

int main(int argc, char **argv) {
  ConvertOptions options;
  std::string model, output;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *flag) -> const char * {
      if (i + 1 >= argc) {
        usage(std::string(flag) + " needs a value");
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--list-ops") {
      for (const std::string &op : supportedAtenOps())
        std::cout << op << "\n";
      return 0;
    }
    if (arg == "--weights-only") {
      options.weightsOnly = true;
    } else if (arg == "-o") {
      output = value("-o");
    } else if (arg == "--input-shape") {
      std::string error;
      if (!parseInput(value("--input-shape"), options, error))
        return usage(error);
    } else if (arg.rfind("--input-shape=", 0) == 0) {
      std::string error;
      if (!parseInput(arg.substr(14), options, error))
        return usage(error);
    } else if (!arg.empty() && arg[0] == '-') {
      return usage("unknown option '" + arg + "'");
    } else if (model.empty()) {
      model = arg;
    } else {
      return usage("more than one model given");
    }
  }
  if (model.empty() || output.empty())
    return usage("give a model and -o OUT");

  onnx::ModelProto proto;
  std::string error;
  std::vector<std::string> warnings;
  if (!convertTorchScript(model, options, proto, error, &warnings)) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  // tp-compile and tp-translate pass these on as their own warnings.
  for (const std::string &warning : warnings)
    std::cerr << "warning: " << warning << "\n";
  std::ofstream os(output, std::ios::binary);
  if (!os || !proto.SerializeToOstream(&os)) {
    std::cerr << "error: cannot write '" << output << "'\n";
    return 1;
  }
  return 0;
}
