//===- ModelSignature.cpp - tp_model_signature() of a model library -------===//

#include "tp/Target/Artifact/ModelSignature.h"

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Runtime/ArtifactFormat.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include <map>

using namespace mlir;
using namespace mlir::tp;

FailureOr<SmallVector<func::FuncOp>>
mlir::tp::getStageFunctions(ModuleOp module) {
  SmallVector<func::FuncOp> funcs;
  if (!lookupGrid(module, GridRole::Pipeline)) {
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main)
      return module.emitError("partitioned module has no @main");
    funcs.push_back(main);
    return funcs;
  }
  int64_t stages = getGridSize1D(module, GridRole::Pipeline);
  if (stages < 1)
    return module.emitError("the pipeline shard.grid is not 1-D");
  funcs.resize(stages);
  for (auto func : module.getOps<func::FuncOp>()) {
    auto stage = func->getAttrOfType<IntegerAttr>("tp.stage");
    if (!stage)
      continue;
    int64_t k = stage.getInt();
    if (k < 0 || k >= stages || funcs[k])
      return func.emitError("unexpected or duplicate tp.stage ") << k;
    funcs[k] = func;
  }
  for (int64_t k = 0; k < stages; ++k)
    if (!funcs[k])
      return module.emitError("no function has tp.stage = ") << k;
  return funcs;
}

FailureOr<SmallVector<PrefillChunk>>
mlir::tp::getPrefillChunks(ModuleOp module) {
  std::map<int64_t, SmallVector<func::FuncOp>> byLength;
  for (auto func : module.getOps<func::FuncOp>()) {
    auto stage =
        func->getAttrOfType<IntegerAttr>(TPDialect::kPrefillStageAttrName);
    if (!stage)
      continue;
    auto chunk =
        func->getAttrOfType<IntegerAttr>(TPDialect::kPrefillChunkAttrName);
    if (!chunk || chunk.getInt() < 1)
      return func.emitError("tp.prefill_stage without a tp.prefill_chunk "
                            "length");
    SmallVector<func::FuncOp> &funcs = byLength[chunk.getInt()];
    int64_t k = stage.getInt();
    if (k >= static_cast<int64_t>(funcs.size()))
      funcs.resize(k + 1);
    if (funcs[k])
      return func.emitError("duplicate tp.prefill_stage ")
             << k << " of prefill chunk " << chunk.getInt();
    funcs[k] = func;
  }
  SmallVector<PrefillChunk> chunks;
  for (auto &[length, funcs] : byLength) {
    for (auto [k, func] : llvm::enumerate(funcs))
      if (!func)
        return module.emitError("no function has tp.prefill_stage = ")
               << k << " in prefill chunk " << length;
    chunks.push_back({length, funcs});
  }
  return chunks;
}

static void printType(Type type, llvm::raw_ostream &os) {
  auto shaped = dyn_cast<ShapedType>(type);
  os << artifact::getDTypeName(shaped ? shaped.getElementType() : type) << "[";
  if (shaped)
    llvm::interleave(shaped.getShape(), os, ",");
  os << "]";
}

FailureOr<std::string> mlir::tp::getModelSignature(ModuleOp module) {
  FailureOr<SmallVector<func::FuncOp>> funcs = getStageFunctions(module);
  FailureOr<SmallVector<PrefillChunk>> chunks = getPrefillChunks(module);
  if (failed(funcs) || failed(chunks))
    return failure();
  SmallVector<func::FuncOp> prefill;
  for (const PrefillChunk &chunk : *chunks)
    llvm::append_range(prefill, chunk.stages);
  int64_t tp = getGridSize1D(module, GridRole::Tensor);
  if (tp < 1)
    return module.emitError("module has no 1-D tensor-parallel shard.grid; "
                            "run tp-parallelize first");
  int64_t microbatches = 1;
  if (auto pipeline = module->getAttrOfType<DictionaryAttr>("tp.pipeline"))
    if (auto m = pipeline.getAs<IntegerAttr>("microbatches"))
      microbatches = m.getInt();
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "tp-model-signature " << TP_MODEL_SIGNATURE_VERSION << "\n"
     << "grid tp=" << tp << " pp=" << funcs->size()
     << " microbatches=" << microbatches << "\n";
  for (func::FuncOp func : llvm::concat<func::FuncOp>(*funcs, prefill)) {
    os << func.getSymName() << "(";
    llvm::interleave(
        func.getArgumentTypes(), os, [&](Type t) { printType(t, os); }, ",");
    os << ")->(";
    llvm::interleave(
        func.getResultTypes(), os, [&](Type t) { printType(t, os); }, ",");
    os << ")\n";
  }
  return text;
}

LogicalResult mlir::tp::emitModelSignature(ModuleOp module,
                                           llvm::raw_ostream &os) {
  // A module that is not partitioned is in no artifact: it describes
  // nothing, and a runtime refuses it.
  std::string text;
  if (lookupGrid(module, GridRole::Tensor)) {
    FailureOr<std::string> signature = getModelSignature(module);
    if (failed(signature))
      return failure();
    text = std::move(*signature);
  }
  // The text holds only names, digits and punctuation: no escapes needed
  // beyond the newlines.
  os << "extern \"C\" TP_MODEL_EXPORT const char *" << TP_MODEL_SIGNATURE_SYMBOL
     << "(void) {\n  return \"";
  for (char c : text) {
    if (c == '\n')
      os << "\\n";
    else if (c == '"' || c == '\\')
      os << '\\' << c;
    else
      os << c;
  }
  os << "\";\n}\n";
  return success();
}

std::string mlir::tp::artifact::getDTypeName(Type type) {
  if (type.isF32())
    return "F32";
  if (type.isF16())
    return "F16";
  if (type.isBF16())
    return "BF16";
  if (type.isF64())
    return "F64";
  if (type.isInteger(1))
    return "BOOL";
  if (auto integer = dyn_cast<IntegerType>(type))
    return (integer.isUnsigned() ? "U" : "I") +
           std::to_string(integer.getWidth());
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}
