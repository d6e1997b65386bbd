//===- EmitCudaAttention.cpp - scaled dot-product attention as one kernel -===//
//
// The attention chain MatchAttention.cpp finds, as one kernel with online
// softmax (as flash attention computes it): a warp per query row walks the
// keys 32 at a time, up to the KV cache's filled bound where there is one;
// each lane scores one key (its dot product with the query, then X's
// payload), the warp's running maximum and sum are rescaled as a larger
// maximum appears, and each lane keeps its share of the output row in
// registers, adding each key's value row weighted by its probability
// (broadcast from the lane that scored it). The scores are never stored,
// whatever the sequence length.
//
//===----------------------------------------------------------------------===//

#include "CudaEmitter.h"
#include "LinalgMatchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

namespace {

constexpr int64_t kWarp = 32;

/// The index expression of element (row, col) of a GEMM operand.
std::string operandOffset(StringRef batchStride, bool trans, int64_t ld,
                          StringRef row, StringRef col, int64_t group = 1) {
  std::string batch =
      group == 1 ? "b" : "(b / " + std::to_string(group) + "LL)";
  std::string offset = batch + " * " + batchStride.str() + "LL + ";
  if (trans)
    return offset + col.str() + " * " + std::to_string(ld) + "LL + " +
           row.str();
  return offset + row.str() + " * " + std::to_string(ld) + "LL + " + col.str();
}

/// The online softmax of one block of kWarp keys (a lane's score in `x`,
/// its key `j`) folded into the running max, sum and the lane's `perLane`
/// columns of P V, each key's value row weighted by its probability.
static void writeOnlineSoftmax(raw_indented_ostream &k, const Gemm &pv,
                               int64_t perLane) {
  // The block's maximum, the running one rescaled to it.
  k << "float blockMax = x;\n";
  k << "for (int offset = tp::cuda::kWarpSize / 2; offset > 0; offset /= 2)\n";
  k << "  blockMax = fmaxf(blockMax, __shfl_xor_sync(0xffffffffu, blockMax, "
       "offset));\n";
  k << "const float newMax = fmaxf(runMax, blockMax);\n";
  k << "const float scale = expf(runMax - newMax);\n";
  k << "const float p = j < limit ? expf(x - newMax) : 0.0f;\n";
  k << "float blockSum = p;\n";
  k << "for (int offset = tp::cuda::kWarpSize / 2; offset > 0; offset /= 2)\n";
  k << "  blockSum += __shfl_xor_sync(0xffffffffu, blockSum, offset);\n";
  k << "runSum = runSum * scale + blockSum;\n";
  k << "runMax = newMax;\n";
  k << "for (int c = 0; c < " << perLane << "; ++c)\n";
  k << "  acc[c] *= scale;\n";
  // Each key's value row, weighted by the probability its lane computed.
  k << "const int count = limit - first < " << kWarp
    << " ? int(limit - first) : " << kWarp << ";\n";
  k << "for (int from = 0; from < count; ++from) {\n";
  k.indent();
  k << "const float weight = __shfl_sync(0xffffffffu, p, from);\n";
  k << "const std::int64_t key = first + from;\n";
  k << "for (int c = 0; c < " << perLane << "; ++c) {\n";
  k.indent();
  k << "const std::int64_t col = lane + c * tp::cuda::kWarpSize;\n";
  k << "if (col < " << pv.n << ")\n";
  k << "  acc[c] += weight * static_cast<float>(v["
    << operandOffset(std::to_string(pv.strideRhs), pv.transRhs, pv.ldb, "key",
                     "col", pv.rhsGroup)
    << "]);\n";
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n";
}

} // namespace

LogicalResult CudaEmitter::bindChainOperands(
    const FusedAttention &a, ArrayRef<SmallVector<std::string>> indices,
    Operation *op, CppEmitter &payload, SmallVectorImpl<std::string> &params,
    SmallVectorImpl<std::string> &args) {
  llvm::MapVector<Value, std::string> captured;
  // Values a body reads from outside it (constants hoisted out, scalars):
  // kernel parameters, once each.
  auto captureOperands = [&](Region &region) -> LogicalResult {
    WalkResult walk = region.walk([&](Operation *inner) {
      for (Value operand : inner->getOperands()) {
        if (region.isAncestor(operand.getParentRegion()) ||
            captured.count(operand))
          continue;
        auto tensor = dyn_cast<RankedTensorType>(operand.getType());
        FailureOr<std::string> type = scalarTypeFor(
            tensor ? tensor.getElementType() : operand.getType(), op);
        if (failed(type))
          return WalkResult::interrupt();
        std::string param = "c" + std::to_string(captured.size());
        params.push_back(tensor ? "const " + *type + " *__restrict__ " + param
                                : "const " + *type + " " + param);
        args.push_back(name(operand));
        captured.insert({operand, param});
        payload.bindTo(operand, param);
      }
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  };
  for (auto [chainOp, chained, names] :
       llvm::zip(a.logits, a.chained, indices)) {
    linalg::GenericOp logits = chainOp; // a.logits is const here
    for (OpOperand *input : logits.getDpsInputOperands()) {
      BlockArgument arg = logits.getMatchingBlockArgument(input);
      if (input->get() == chained || arg.use_empty())
        continue;
      FailureOr<std::string> type = scalarTypeFor(arg.getType(), op);
      if (failed(type))
        return failure();
      std::string param = "x" + std::to_string(params.size());
      params.push_back("const " + *type + " *__restrict__ " + param);
      args.push_back(name(input->get()));
      auto inputShape =
          cast<RankedTensorType>(input->get().getType()).getShape();
      payload.bindTo(
          arg, param + "[" +
                   CppEmitter::offsetExpr(logits.getMatchingIndexingMap(input),
                                          inputShape, names) +
                   "]");
    }
    if (failed(captureOperands(logits.getRegion())))
      return failure();
  }
  // The key copy's payload (a rounding to bf16 folded into the product)
  // may read values from outside its body too.
  if (a.keyPayload)
    return captureOperands(
        linalg::GenericOp(a.keyTranspose).getRegion()); // `a` is const
  return success();
}

LogicalResult CudaEmitter::emitFusedAttention(linalg::GenericOp op) {
  FusedAttention a = *attentionAt.lookup(op);
  Value out = op.getResult(0);
  if (failed(allocate(out, op)))
    return failure();
  const Gemm &qk = a.qk, &pv = a.pv;
  int64_t rows = qk.batch * qk.m, keys = qk.n, depth = qk.k, width = pv.n;
  int64_t perLane = (width + kWarp - 1) / kWarp;
  FailureOr<std::string> qkType = scalarTypeFor(qk.lhsElement, op);
  FailureOr<std::string> kType = scalarTypeFor(qk.rhsElement, op);
  FailureOr<std::string> vType = scalarTypeFor(pv.rhsElement, op);
  if (failed(qkType) || failed(kType) || failed(vType))
    return failure();

  std::string kernel = kernelName();
  std::string text;
  llvm::raw_string_ostream textStream(text);
  raw_indented_ostream k(textStream);
  CppEmitter payload(module, k);

  // Parameters: Q, K, V, the output, then what X's payload reads.
  SmallVector<std::string> params = {"const " + *qkType + " *__restrict__ q",
                                     "const " + *kType + " *__restrict__ kt",
                                     "const " + *vType + " *__restrict__ v",
                                     "float *__restrict__ o"};
  SmallVector<std::string> args = {name(qk.lhs), name(qk.rhs), name(pv.rhs),
                                   name(out)};
  // The KV cache's filled keys end at position[0] + count (device memory,
  // so that a captured graph reads each step's position).
  if (a.position) {
    params.push_back("const std::int64_t *__restrict__ position");
    args.push_back(name(a.position));
  }
  // Each generic of X's chain indexes its own batch dims, from b (declared
  // in the row loop); its row is the warp's, its key the lane's.
  std::string rowIndices;
  SmallVector<SmallVector<std::string>> indices;
  {
    llvm::raw_string_ostream rowStream(rowIndices);
    raw_indented_ostream declarations(rowStream);
    for (auto [n, logits] : llvm::enumerate(a.logits))
      indices.push_back(declareChainIndices(declarations, logits,
                                            "i" + std::to_string(n) + "_", "b",
                                            "row", "j"));
  }
  if (failed(bindChainOperands(a, indices, op, payload, params, args)))
    return failure();

  std::string where = describe(op);
  k << "// Attention" << (where.empty() ? "" : " (" + where + ")") << ": "
    << qk.batch << " x (" << qk.m << " queries x " << keys << " keys), depth "
    << depth << ", value width " << width
    << "; one warp per query row, online softmax, no scores in memory"
    << (a.position ? "; the KV cache's filled keys only" : "") << "\n";
  k << "__global__ void " << kernel << "(";
  llvm::interleaveComma(params, k);
  k << ") {\n";
  k.indent();
  k << "const int lane = threadIdx.x % tp::cuda::kWarpSize;\n";
  if (a.position)
    k << "const std::int64_t end = position[0] + " << a.count
      << ", limit = end < 1 ? 1 : end > " << keys << " ? " << keys
      << " : end;\n";
  else
    k << "const std::int64_t limit = " << keys << ";\n";
  k << "for (std::int64_t t = (std::int64_t(blockIdx.x) * blockDim.x + "
       "threadIdx.x) / tp::cuda::kWarpSize; t < "
    << rows
    << "; t += std::int64_t(gridDim.x) * blockDim.x / tp::cuda::kWarpSize) "
       "{\n";
  k.indent();
  k << "const std::int64_t b = t / " << qk.m << "LL, row = t % " << qk.m
    << "LL;\n";
  k << rowIndices;
  k << "float runMax = -std::numeric_limits<float>::infinity(), runSum = 0;\n";
  k << "float acc[" << perLane << "] = {};\n";
  k << "for (std::int64_t first = 0; first < limit; first += " << kWarp
    << ") {\n";
  k.indent();
  k << "const std::int64_t j = first + lane;\n";
  k << "float x = -std::numeric_limits<float>::infinity();\n";
  k << "if (j < limit) {\n";
  k.indent();
  k << "float s = 0;\n";
  std::string keyElement =
      "kt[" +
      operandOffset(std::to_string(qk.strideRhs), qk.transRhs, qk.ldb, "d", "j",
                    qk.rhsGroup) +
      "]";
  k << "for (std::int64_t d = 0; d < " << depth << "; ++d) {\n";
  k.indent();
  if (a.keyPayload) {
    // The payload of the copy folded into the product (the rounding of
    // f32 keys to bf16), on each element of K as it is read.
    Block &body = a.keyTranspose.getRegion().front();
    payload.bindTo(body.getArgument(0), keyElement);
    for (Operation &inner : body.without_terminator())
      if (failed(payload.emitScalarOp(&inner)))
        return failure();
    keyElement = payload.name(body.getTerminator()->getOperand(0));
  }
  k << "s += static_cast<float>(q["
    << operandOffset(std::to_string(qk.strideLhs), qk.transLhs, qk.lda, "row",
                     "d")
    << "]) * static_cast<float>(" << keyElement << ");\n";
  k.unindent();
  k << "}\n";
  // X's payload: each generic of the chain reads the one before.
  std::string previous = "s";
  for (auto [logits, chained, names] :
       llvm::zip(a.logits, a.chained, indices)) {
    Block &body = logits.getRegion().front();
    for (OpOperand *input : logits.getDpsInputOperands())
      if (input->get() == chained)
        payload.bindTo(logits.getMatchingBlockArgument(input), previous);
    for (Operation &bodyOp : body.without_terminator()) {
      if (auto index = dyn_cast<linalg::IndexOp>(bodyOp)) {
        payload.bindTo(index.getResult(), names[index.getDim()]);
        continue;
      }
      if (failed(payload.emitScalarOp(&bodyOp)))
        return failure();
    }
    previous = payload.name(body.getTerminator()->getOperand(0));
  }
  k << "x = static_cast<float>(" << previous << ");\n";
  k.unindent();
  k << "}\n";
  writeOnlineSoftmax(k, pv, perLane);
  k << "for (int c = 0; c < " << perLane << "; ++c) {\n";
  k.indent();
  k << "const std::int64_t col = lane + c * tp::cuda::kWarpSize;\n";
  k << "if (col < " << width << ")\n";
  k << "  o[b * " << pv.strideOut << "LL + row * " << pv.ldc
    << "LL + col] = acc[c] / runSum;\n";
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n\n";
  kernels += text;

  os << kernel << "<<<tp::cuda::blocksForWarps(" << rows
     << "), tp::cuda::threadsForWarps(" << rows << "), 0, context->stream>>>(";
  llvm::interleaveComma(args, os);
  os << ");\nTP_CUDA_CHECK_LAUNCH(" << site << ");\n";
  return success();
}
