//===- IfOps.cpp - ONNX If, resolved at import ----------------------------===//
//
// Shapes are static after import, so an If whose condition is computed from
// shapes and constants (torch.onnx.export's `squeeze(dim)` on a dynamic
// axis, a scripted helper's `if q.size(-2) != k.size(-2)`) is known at
// import: only the branch it takes is imported, inline, reading outer
// values by name. A condition that depends on a model input or weight is an
// error: the IR has no run-time control flow.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

LogicalResult convertIf(NodeContext &ctx) {
  const ConstTensor *cond = ctx.constInput(0);
  if (!cond)
    return ctx.emitError()
           << "If with a condition not known at import is not supported "
              "(cond, input 0, depends on a model input or weight; only a "
              "condition computed from shapes and constants is)";
  if (cond->numel() != 1)
    return ctx.emitError() << "condition must have one element, got shape "
                           << formatShape(cond->shape);
  bool taken = cond->getAsInt(0) != 0;
  StringRef branchName = taken ? "then_branch" : "else_branch";
  const onnx::AttributeProto *branchAttr = ctx.attr(branchName);
  if (!branchAttr || !branchAttr->has_g())
    return ctx.emitError() << "has no " << branchName << " graph";
  const onnx::GraphProto &branch = branchAttr->g();
  if (branch.input_size() != 0)
    return ctx.emitError() << "its " << branchName << " has "
                           << branch.input_size()
                           << " inputs; an If branch takes none";
  if (branch.output_size() != static_cast<int>(ctx.getNumOutputs()))
    return ctx.emitError() << "its " << branchName << " has "
                           << branch.output_size() << " outputs, the node "
                           << ctx.getNumOutputs();
  FailureOr<SmallVector<ImportedValue>> outputs =
      ctx.importSubgraph(branch, {});
  if (failed(outputs))
    return ctx.emitError() << "in its " << branchName
                           << " (the condition is known at import: "
                           << (taken ? "true" : "false") << ")";
  for (auto [i, value] : llvm::enumerate(*outputs))
    ctx.setValue(i, std::move(value));
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateIfConverters(ConverterMap &map) {
  map["If"] = convertIf;
}
