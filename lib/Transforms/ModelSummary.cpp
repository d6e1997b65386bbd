//===- ModelSummary.cpp - print what an imported model holds --------------===//
//
// `tp-model-summary`: inputs, outputs, weights (count, parameters, bytes)
// and op counts of each function, as text or JSON. Read-only.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_MODELSUMMARY
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

struct FunctionSummary {
  std::string name;
  SmallVector<std::pair<std::string, std::string>> inputs, outputs;
  int64_t numWeights = 0, parameters = 0, weightBytes = 0;
  /// Sorted by op name, so that the output is stable.
  std::map<std::string, int64_t> opCounts;
};

FunctionSummary summarize(func::FuncOp func) {
  FunctionSummary s;
  s.name = func.getName().str();
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (func.getArgAttrOfType<StringAttr>(i, TPDialect::kWeightAttrName)) {
      ++s.numWeights;
      if (type && type.hasStaticShape()) {
        s.parameters += type.getNumElements();
        s.weightBytes += type.getNumElements() *
                         llvm::divideCeil(type.getElementTypeBitWidth(), 8);
      }
      continue;
    }
    auto name = func.getArgAttrOfType<StringAttr>(i, TPDialect::kInputAttrName);
    s.inputs.push_back({name ? name.str() : "arg" + std::to_string(i),
                        typeString(arg.getType())});
  }
  for (auto [i, type] : llvm::enumerate(func.getResultTypes())) {
    auto name =
        func.getResultAttrOfType<StringAttr>(i, TPDialect::kOutputAttrName);
    s.outputs.push_back(
        {name ? name.str() : "result" + std::to_string(i), typeString(type)});
  }
  func.walk([&](Operation *op) {
    if (op != func)
      ++s.opCounts[op->getName().getStringRef().str()];
  });
  return s;
}

llvm::json::Value toJSON(const FunctionSummary &f) {
  llvm::json::Array inputs, outputs;
  for (const auto &[n, t] : f.inputs)
    inputs.push_back(llvm::json::Object{{"name", n}, {"type", t}});
  for (const auto &[n, t] : f.outputs)
    outputs.push_back(llvm::json::Object{{"name", n}, {"type", t}});
  llvm::json::Object ops;
  for (const auto &[n, c] : f.opCounts)
    ops[n] = c;
  return llvm::json::Object{{"name", f.name},
                            {"inputs", std::move(inputs)},
                            {"outputs", std::move(outputs)},
                            {"weights", f.numWeights},
                            {"parameters", f.parameters},
                            {"weight_bytes", f.weightBytes},
                            {"ops", std::move(ops)}};
}

void printText(llvm::raw_ostream &os, const FunctionSummary &f) {
  os << "function @" << f.name << "\n";
  for (const auto &[n, t] : f.inputs)
    os << "  input  " << n << ": " << t << "\n";
  for (const auto &[n, t] : f.outputs)
    os << "  output " << n << ": " << t << "\n";
  os << "  weights: " << f.numWeights << " tensors, " << f.parameters
     << " parameters, " << f.weightBytes << " bytes\n";
  int64_t total = 0;
  for (const auto &entry : f.opCounts)
    total += entry.second;
  os << "  ops: " << total << "\n";
  for (const auto &[n, c] : f.opCounts)
    os << llvm::formatv("    {0,6}  {1}\n", c, n);
}

struct ModelSummary : tp::impl::ModelSummaryBase<ModelSummary> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::vector<FunctionSummary> functions;
    module.walk([&](func::FuncOp func) {
      if (!func.isExternal())
        functions.push_back(summarize(func));
    });
    auto model = module->getAttrOfType<StringAttr>(TPDialect::kModelAttrName);
    llvm::raw_ostream &os = llvm::outs();
    if (json) {
      llvm::json::Array funcs;
      for (const auto &f : functions)
        funcs.push_back(toJSON(f));
      llvm::json::Object root{{"functions", std::move(funcs)}};
      if (model)
        root["model"] = model.str();
      os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
    } else {
      if (model)
        os << "model: " << model.getValue() << "\n";
      for (const auto &f : functions)
        printText(os, f);
    }
    markAllAnalysesPreserved();
  }
};

} // namespace
