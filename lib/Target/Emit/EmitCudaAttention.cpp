//===- EmitCudaAttention.cpp - scaled dot-product attention as one kernel -===//
//
// After partition (and elementwise fusion) attention is seven generics:
//
//   S = Q Kᵀ                     a batched contraction
//   X = f(S, mask, ...)          elementwise: scale, mask (optional)
//   M = max_j X                  a row reduction
//   E = exp(X - M)               elementwise
//   L = sum_j E                  a row reduction
//   P = E / L                    elementwise
//   O = P V                      a batched contraction
//
// Run as written, the scores and probabilities go to memory four times.
// When every intermediate has no reader outside the chain, they become one
// kernel with online softmax (as flash attention computes it): a warp per
// query row walks the keys 32 at a time; each lane scores one key (its dot
// product with the query, then X's payload), the warp's running maximum
// and sum are rescaled as a larger maximum appears, and each lane keeps
// its share of the output row in registers, adding each key's value row
// weighted by its probability (broadcast from the lane that scored it).
// The scores are never stored, whatever the sequence length.
//
//===----------------------------------------------------------------------===//

#include "CudaEmitter.h"
#include "LinalgMatchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

namespace mlir::tp::emit {
struct FusedAttention {
  linalg::GenericOp scores, max, exp, sum, probs, out;
  /// tp-convert-dtype's rounding of S, between S and X (or null).
  linalg::GenericOp rounding;
  /// X = f(S, ...): elementwise generics from S's reader to X's producer
  /// (none when X is S), and the operand of each that is the one before
  /// (S, or its rounding, for the first).
  SmallVector<linalg::GenericOp> logits;
  SmallVector<Value> chained;
  Gemm qk, pv;
};
} // namespace mlir::tp::emit

namespace {

constexpr int64_t kWarp = 32;

/// The value a generic yields before tp-convert-dtype's rounding to a
/// narrow type (truncf of a saturating select).
Value beforeRounding(Value v) {
  auto trunc = v.getDefiningOp<arith::TruncFOp>();
  if (!trunc)
    return v;
  if (auto select = trunc.getIn().getDefiningOp<arith::SelectOp>())
    return select.getTrueValue();
  return trunc.getIn();
}

/// `v` as computed in f32: through the extension of a narrowed operand,
/// and through a rounding and extension that elementwise fusion left
/// between two ops of one body.
Value throughExt(Value v) {
  while (auto ext = v.getDefiningOp<arith::ExtFOp>()) {
    v = ext.getIn();
    Value unrounded = beforeRounding(v);
    if (unrounded == v)
      break;
    v = unrounded;
  }
  return v;
}

Value yielded(linalg::GenericOp op) {
  return beforeRounding(
      op.getRegion().front().getTerminator()->getOperand(0));
}

bool isElementwise(linalg::GenericOp op) {
  return op.getNumDpsInits() == 1 && op.getNumLoops() == op.getNumParallelLoops();
}

/// A reduction of `input` over its last dim into a tensor of the other
/// dims, in order.
bool reducesLastDim(linalg::GenericOp op, Value input) {
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getDpsInputs()[0] != input)
    return false;
  unsigned rank = op.getNumLoops();
  auto iterators = op.getIteratorTypesArray();
  for (unsigned d = 0; d < rank; ++d)
    if ((iterators[d] == utils::IteratorType::reduction) != (d == rank - 1))
      return false;
  MLIRContext *ctx = op.getContext();
  return op.getIndexingMapsArray()[0].isIdentity() &&
         op.getIndexingMapsArray()[1] ==
             AffineMap::getMultiDimIdentityMap(rank, ctx).dropResult(rank - 1);
}

/// `op`'s yield is combine(out, in) with `in` the input's element.
template <typename... Combiners> bool foldsInput(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  Operation *combine = yielded(op).getDefiningOp();
  if (!combine || !isa<Combiners...>(combine))
    return false;
  Value in = body.getArgument(0), out = body.getArgument(1);
  Value a = throughExt(combine->getOperand(0)),
        b = throughExt(combine->getOperand(1));
  return (a == out && b == in) || (a == in && b == out);
}

bool usersAre(Value v, ArrayRef<Operation *> users) {
  return llvm::all_of(v.getUsers(), [&](Operation *user) {
    return llvm::is_contained(users, user);
  });
}

/// The init of `op` is a fill of a value at most f32's lowest (or -inf).
bool initIsLowest(linalg::GenericOp op) {
  auto fill = op.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
  FloatAttr value;
  if (!fill || !matchPattern(fill.getInputs()[0], m_Constant(&value)))
    return false;
  return value.getValueAsDouble() <= -3.0e38;
}

/// The block argument of `op` for operand `v`, if `v` is one of its inputs.
BlockArgument argFor(linalg::GenericOp op, Value v) {
  for (OpOperand *input : op.getDpsInputOperands())
    if (input->get() == v)
      return op.getMatchingBlockArgument(input);
  return nullptr;
}

/// The attention chain that ends in `out`, or nothing.
std::optional<FusedAttention> matchAttention(linalg::GenericOp out) {
  FusedAttention a;
  a.out = out;
  FailureOr<Gemm> pv = matchGemm(out);
  if (failed(pv) || !isZeroFill(out.getDpsInits()[0]))
    return std::nullopt;
  a.pv = *pv;
  // P = E / L, read row-major as the product's left operand.
  a.probs = a.pv.lhs.getDefiningOp<linalg::GenericOp>();
  if (!a.probs || a.pv.transLhs || !isElementwise(a.probs) ||
      a.probs.getNumDpsInputs() != 2 || !a.pv.lhs.hasOneUse())
    return std::nullopt;
  auto div = yielded(a.probs).getDefiningOp<arith::DivFOp>();
  if (!div)
    return std::nullopt;
  Value e = a.probs.getDpsInputs()[0], l = a.probs.getDpsInputs()[1];
  if (throughExt(div.getLhs()) != argFor(a.probs, e) ||
      throughExt(div.getRhs()) != argFor(a.probs, l))
    return std::nullopt;
  // L = sum_j E, E = exp(X - M).
  a.sum = l.getDefiningOp<linalg::GenericOp>();
  a.exp = e.getDefiningOp<linalg::GenericOp>();
  if (!a.sum || !a.exp || !reducesLastDim(a.sum, e) ||
      !foldsInput<arith::AddFOp>(a.sum) || !isZeroFill(a.sum.getDpsInits()[0]) ||
      !l.hasOneUse() || !usersAre(e, {a.sum, a.probs}) ||
      !isElementwise(a.exp) || a.exp.getNumDpsInputs() != 2)
    return std::nullopt;
  auto expOp = yielded(a.exp).getDefiningOp<math::ExpOp>();
  auto sub = expOp ? throughExt(expOp.getOperand()).getDefiningOp<arith::SubFOp>()
                   : arith::SubFOp();
  if (!sub)
    return std::nullopt;
  Value x = a.exp.getDpsInputs()[0], m = a.exp.getDpsInputs()[1];
  if (throughExt(sub.getLhs()) != argFor(a.exp, x) ||
      throughExt(sub.getRhs()) != argFor(a.exp, m))
    return std::nullopt;
  a.max = m.getDefiningOp<linalg::GenericOp>();
  if (!a.max || !reducesLastDim(a.max, x) ||
      !foldsInput<arith::MaximumFOp, arith::MaxNumFOp>(a.max) ||
      !initIsLowest(a.max) || !m.hasOneUse() || !usersAre(x, {a.max, a.exp}))
    return std::nullopt;
  // S, or S rounded to a narrow type (tp-convert-dtype): the contraction
  // whose result `v` is.
  auto scoresOf = [&](Value v) -> linalg::GenericOp {
    auto producer = v.getDefiningOp<linalg::GenericOp>();
    if (!producer || !v.hasOneUse())
      return {};
    if (succeeded(matchGemm(producer)))
      return producer;
    if (!isElementwise(producer) || producer.getNumDpsInputs() != 1 ||
        throughExt(yielded(producer)) !=
            producer.getRegion().front().getArgument(0))
      return {};
    auto gemm = producer.getDpsInputs()[0].getDefiningOp<linalg::GenericOp>();
    if (!gemm || !producer.getDpsInputs()[0].hasOneUse() ||
        failed(matchGemm(gemm)))
      return {};
    a.rounding = producer;
    return gemm;
  };
  // X = f(S, ...), or S itself: walk back from X through elementwise
  // generics read only by the next one, to S.
  Value current = x;
  for (unsigned depth = 0; !(a.scores = scoresOf(current)); ++depth) {
    auto generic = current.getDefiningOp<linalg::GenericOp>();
    if (depth == 8 || !generic || !isElementwise(generic) ||
        (depth > 0 && !current.hasOneUse()))
      return std::nullopt;
    Value previous;
    for (OpOperand *input : generic.getDpsInputOperands()) {
      Value v = input->get();
      auto producer = v.getDefiningOp<linalg::GenericOp>();
      if (producer && v.hasOneUse() &&
          generic.getMatchingIndexingMap(input).isIdentity() &&
          cast<ShapedType>(v.getType()).getShape() ==
              cast<ShapedType>(x.getType()).getShape() &&
          (isElementwise(producer) || succeeded(matchGemm(producer)))) {
        previous = v;
        break;
      }
    }
    if (!previous)
      return std::nullopt;
    a.logits.insert(a.logits.begin(), generic);
    a.chained.insert(a.chained.begin(), previous);
    current = previous;
  }
  Value s = a.scores.getResult(0);
  a.qk = *matchGemm(a.scores);
  if (!isZeroFill(a.scores.getDpsInits()[0]))
    return std::nullopt;
  // Shapes: S is [batch..., queries, keys], rows of P are S's rows, and the
  // product runs over the keys.
  auto shape = cast<RankedTensorType>(s.getType()).getShape();
  if (shape.size() < 2 || a.qk.m != shape[shape.size() - 2] ||
      a.qk.n != shape.back() || a.qk.ldc != a.qk.n ||
      a.qk.strideOut != a.qk.m * a.qk.n || a.pv.batch != a.qk.batch ||
      a.pv.m != a.qk.m || a.pv.k != a.qk.n || a.pv.lda != a.qk.n ||
      a.pv.strideLhs != a.qk.m * a.qk.n || a.pv.ldc != a.pv.n ||
      a.pv.strideOut != a.pv.m * a.pv.n)
    return std::nullopt;
  // One element type for Q and K, and for V.
  if (a.qk.lhsElement != a.qk.rhsElement || a.pv.rhsElement.isF64() ||
      a.qk.lhsElement.isF64())
    return std::nullopt;
  return a;
}

/// The index expression of element (row, col) of a GEMM operand.
std::string operandOffset(StringRef batchStride, bool trans, int64_t ld,
                          StringRef row, StringRef col) {
  std::string offset = "b * " + batchStride.str() + "LL + ";
  if (trans)
    return offset + col.str() + " * " + std::to_string(ld) + "LL + " +
           row.str();
  return offset + row.str() + " * " + std::to_string(ld) + "LL + " + col.str();
}

} // namespace

void CudaEmitter::findFusedAttention() {
  module.walk([&](linalg::GenericOp op) {
    std::optional<FusedAttention> match = matchAttention(op);
    if (!match)
      return;
    auto group = std::make_shared<FusedAttention>(*match);
    for (linalg::GenericOp inner :
         {group->scores, group->rounding, group->max, group->exp, group->sum,
          group->probs})
      if (inner)
        fusedIntoAttention.insert(inner);
    for (linalg::GenericOp inner : group->logits)
      fusedIntoAttention.insert(inner);
    attentionAt[op] = group;
    // The kernel runs where O is: what it reads lives until then.
    SmallVector<Value> &reads = extraUses[op];
    reads.append({group->qk.lhs, group->qk.rhs, group->pv.rhs});
    for (linalg::GenericOp logits : group->logits) {
      llvm::append_range(reads, logits.getDpsInputs());
      logits.getRegion().walk([&](Operation *inner) {
        for (Value operand : inner->getOperands())
          if (!logits.getRegion().isAncestor(operand.getParentRegion()))
            reads.push_back(operand);
      });
    }
  });
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
  FailureOr<std::string> vType = scalarTypeFor(pv.rhsElement, op);
  if (failed(qkType) || failed(vType))
    return failure();

  std::string kernel = kernelName();
  std::string text;
  llvm::raw_string_ostream textStream(text);
  raw_indented_ostream k(textStream);
  CppEmitter payload(module, k);

  // Parameters: Q, K, V, the output, then what X's payload reads.
  SmallVector<std::string> params = {
      "const " + *qkType + " *__restrict__ q",
      "const " + *qkType + " *__restrict__ kt",
      "const " + *vType + " *__restrict__ v", "float *__restrict__ o"};
  SmallVector<std::string> args = {name(qk.lhs), name(qk.rhs), name(pv.rhs),
                                   name(out)};
  SmallVector<std::string> indices;
  auto shape = cast<RankedTensorType>(
                   a.scores.getResult(0).getType())
                   .getShape();
  unsigned rank = shape.size();
  for (unsigned d = 0; d < rank; ++d)
    indices.push_back("i" + std::to_string(d));
  llvm::MapVector<Value, std::string> captured;
  for (auto [logits, chained] : llvm::zip(a.logits, a.chained)) {
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
      payload.bindTo(arg, param + "[" +
                              CppEmitter::offsetExpr(
                                  logits.getMatchingIndexingMap(input),
                                  inputShape, indices) +
                              "]");
    }
    WalkResult walk = logits.getRegion().walk([&](Operation *inner) {
      for (Value operand : inner->getOperands()) {
        if (logits.getRegion().isAncestor(operand.getParentRegion()) ||
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
    if (walk.wasInterrupted())
      return failure();
  }

  std::string where = describe(op);
  k << "// Attention" << (where.empty() ? "" : " (" + where + ")") << ": "
    << qk.batch << " x (" << qk.m << " queries x " << keys << " keys), depth "
    << depth << ", value width " << width
    << "; one warp per query row, online softmax, no scores in memory\n";
  k << "__global__ void " << kernel << "(";
  llvm::interleaveComma(params, k);
  k << ") {\n";
  k.indent();
  k << "const int lane = threadIdx.x % tp::cuda::kWarpSize;\n";
  k << "for (std::int64_t t = (std::int64_t(blockIdx.x) * blockDim.x + "
       "threadIdx.x) / tp::cuda::kWarpSize; t < "
    << rows
    << "; t += std::int64_t(gridDim.x) * blockDim.x / tp::cuda::kWarpSize) "
       "{\n";
  k.indent();
  k << "const std::int64_t b = t / " << qk.m << "LL, row = t % " << qk.m
    << "LL;\n";
  // X's indices: the batch dims from b, then the row; the key is the
  // lane's.
  int64_t inner = 1;
  for (int d = int(rank) - 3; d >= 0; --d) {
    k << "const std::int64_t " << indices[d] << " = b / " << inner << "LL % "
      << shape[d] << "LL;\n";
    inner *= shape[d];
  }
  k << "const std::int64_t " << indices[rank - 2] << " = row;\n";
  k << "float runMax = -std::numeric_limits<float>::infinity(), runSum = 0;\n";
  k << "float acc[" << perLane << "] = {};\n";
  k << "for (std::int64_t first = 0; first < " << keys << "; first += "
    << kWarp << ") {\n";
  k.indent();
  k << "const std::int64_t " << indices[rank - 1] << " = first + lane;\n";
  k << "float x = -std::numeric_limits<float>::infinity();\n";
  k << "if (" << indices[rank - 1] << " < " << keys << ") {\n";
  k.indent();
  k << "float s = 0;\n";
  k << "for (std::int64_t d = 0; d < " << depth << "; ++d)\n";
  k << "  s += static_cast<float>(q["
    << operandOffset(std::to_string(qk.strideLhs), qk.transLhs, qk.lda, "row",
                     "d")
    << "]) * static_cast<float>(kt["
    << operandOffset(std::to_string(qk.strideRhs), qk.transRhs, qk.ldb, "d",
                     indices[rank - 1])
    << "]);\n";
  // X's payload: each generic of the chain reads the one before.
  std::string previous = "s";
  for (auto [logits, chained] : llvm::zip(a.logits, a.chained)) {
    Block &body = logits.getRegion().front();
    for (OpOperand *input : logits.getDpsInputOperands())
      if (input->get() == chained)
        payload.bindTo(logits.getMatchingBlockArgument(input), previous);
    for (Operation &bodyOp : body.without_terminator()) {
      if (auto index = dyn_cast<linalg::IndexOp>(bodyOp)) {
        payload.bindTo(index.getResult(), indices[index.getDim()]);
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
  // The block's maximum, the running one rescaled to it.
  k << "float blockMax = x;\n";
  k << "for (int offset = tp::cuda::kWarpSize / 2; offset > 0; offset /= 2)\n";
  k << "  blockMax = fmaxf(blockMax, __shfl_xor_sync(0xffffffffu, blockMax, "
       "offset));\n";
  k << "const float newMax = fmaxf(runMax, blockMax);\n";
  k << "const float scale = expf(runMax - newMax);\n";
  k << "const float p = " << indices[rank - 1] << " < " << keys
    << " ? expf(x - newMax) : 0.0f;\n";
  k << "float blockSum = p;\n";
  k << "for (int offset = tp::cuda::kWarpSize / 2; offset > 0; offset /= 2)\n";
  k << "  blockSum += __shfl_xor_sync(0xffffffffu, blockSum, offset);\n";
  k << "runSum = runSum * scale + blockSum;\n";
  k << "runMax = newMax;\n";
  k << "for (int c = 0; c < " << perLane << "; ++c)\n";
  k << "  acc[c] *= scale;\n";
  // Each key's value row, weighted by the probability its lane computed.
  k << "const int count = " << keys << " - first < " << kWarp << " ? int("
    << keys << " - first) : " << kWarp << ";\n";
  k << "for (int from = 0; from < count; ++from) {\n";
  k.indent();
  k << "const float weight = __shfl_sync(0xffffffffu, p, from);\n";
  k << "const std::int64_t key = first + from;\n";
  k << "for (int c = 0; c < " << perLane << "; ++c) {\n";
  k.indent();
  k << "const std::int64_t col = lane + c * tp::cuda::kWarpSize;\n";
  k << "if (col < " << width << ")\n";
  k << "  acc[c] += weight * static_cast<float>(v["
    << operandOffset(std::to_string(pv.strideRhs), pv.transRhs, pv.ldb, "key",
                     "col")
    << "]);\n";
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n";
  k.unindent();
  k << "}\n";
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
     << "), tp::cuda::kThreads, 0, context->stream>>>(";
  llvm::interleaveComma(args, os);
  os << ");\nTP_CUDA_CHECK_LAUNCH(" << site << ");\n";
  return success();
}
