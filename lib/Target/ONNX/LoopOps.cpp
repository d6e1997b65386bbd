//===- LoopOps.cpp - ONNX Loop, unrolled at import ------------------------===//
//
// A Loop whose trip count (or body-computed condition) is known at import
// is unrolled: its body is imported once per iteration, so what reaches the
// IR is a straight line of the body's ops.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;
using onnx::TensorProto;

namespace {

/// Loops with more iterations than this are not unrolled.
constexpr int64_t kMaxLoopIterations = 4096;

ImportedValue makeScalar(DType dtype, int64_t x) {
  ImportedValue v;
  v.dtype = dtype;
  v.constant.emplace();
  v.constant->dtype = dtype;
  v.constant->ints = {x};
  return v;
}

/// Unrolls the loop: body inputs are (iteration, cond, carried...), body
/// outputs (cond, carried..., scan...); scans stack along a new axis 0.
LogicalResult convertLoop(NodeContext &ctx) {
  const onnx::AttributeProto *bodyAttr = ctx.attr("body");
  if (!bodyAttr || !bodyAttr->has_g())
    return ctx.emitError() << "has no body graph";
  const onnx::GraphProto &body = bodyAttr->g();
  int64_t numCarried = ctx.getNumInputs() - 2;
  int64_t numScans = ctx.getNumOutputs() - numCarried;
  if (numScans < 0 || body.input_size() != numCarried + 2 ||
      body.output_size() != numCarried + numScans + 1)
    return ctx.emitError() << "its body has " << body.input_size()
                           << " inputs and " << body.output_size()
                           << " outputs; " << numCarried
                           << " loop-carried values need " << numCarried + 2
                           << " inputs";
  std::optional<int64_t> tripCount;
  if (ctx.hasInput(0)) {
    const ConstTensor *m = ctx.constInput(0);
    if (!m)
      return ctx.emitError()
             << "Loop with a trip count not known at import is not "
                "supported (the trip count, input 0, must be known at import "
                "time; it depends on a model input or weight)";
    if (m->numel() != 1)
      return ctx.emitError()
             << "trip count must be a scalar, got " << formatShape(m->shape);
    tripCount = m->getAsInt(0);
    if (*tripCount > kMaxLoopIterations)
      return ctx.emitError()
             << "trip count " << *tripCount << " is over the unroll limit of "
             << kMaxLoopIterations << " iterations";
  }
  bool cond = true;
  if (ctx.hasInput(1)) {
    const ConstTensor *c = ctx.constInput(1);
    if (!c || c->numel() != 1)
      return ctx.emitError()
             << "Loop with a condition not known at import is not supported "
                "(cond, input 1, must be known at import time; it depends on "
                "a model input or weight)";
    cond = c->getAsInt(0) != 0;
  } else if (!tripCount) {
    return ctx.emitError() << "has neither a trip count nor a condition, so "
                              "it never ends";
  }

  SmallVector<ImportedValue> carried;
  for (unsigned i = 2; i < ctx.getNumInputs(); ++i)
    carried.push_back(ctx.input(i));
  std::vector<SmallVector<ImportedValue>> scans(numScans);
  for (int64_t iter = 0; cond && iter < tripCount.value_or(INT64_MAX); ++iter) {
    if (iter == kMaxLoopIterations)
      return ctx.emitError() << "runs past the unroll limit of "
                             << kMaxLoopIterations << " iterations";
    SmallVector<ImportedValue> inputs = {makeScalar(TensorProto::INT64, iter),
                                         makeScalar(TensorProto::BOOL, 1)};
    llvm::append_range(inputs, carried);
    FailureOr<SmallVector<ImportedValue>> outputs =
        ctx.importSubgraph(body, inputs);
    if (failed(outputs))
      return ctx.emitError() << "in iteration " << iter << " of the body";
    const ImportedValue &next = (*outputs)[0];
    if (!next.constant || next.constant->numel() != 1)
      return ctx.emitError() << "Loop with a condition not known at import "
                                "is not supported (the body computes it)";
    cond = next.constant->getAsInt(0) != 0;
    for (int64_t i = 0; i < numCarried; ++i)
      carried[i] = (*outputs)[1 + i];
    for (int64_t k = 0; k < numScans; ++k) {
      if ((*outputs)[1 + numCarried + k].isSequence())
        return ctx.emitError() << "scan output " << k << " is a sequence; "
                               << "only tensors can be scanned";
      scans[k].push_back((*outputs)[1 + numCarried + k]);
    }
  }
  for (int64_t i = 0; i < numCarried; ++i)
    ctx.setValue(i, carried[i]);
  for (int64_t k = 0; k < numScans; ++k) {
    if (scans[k].empty())
      return ctx.emitError() << "runs no iteration, so scan output " << k
                             << " has no known shape";
    FailureOr<ImportedValue> stacked =
        concatValues(ctx, scans[k], 0, /*newAxis=*/true);
    if (failed(stacked))
      return failure();
    ctx.setValue(numCarried + k, std::move(*stacked));
  }
  return success();
}

} // namespace

void mlir::tp::onnx_import::populateLoopConverters(ConverterMap &map) {
  map["Loop"] = convertLoop;
}
