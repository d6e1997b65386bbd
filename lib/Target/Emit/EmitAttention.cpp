//===- EmitAttention.cpp - fused attention on the C++ target --------------===//
//
// The attention chain MatchAttention.cpp finds, per batch element (a
// head of a sequence): the scores of every query row against the keys go
// to one buffer the size of a head's scores, which stays in cache; BLAS
// computes S = Q Kᵀ into it, X's payload, the row maximum, exp, the row
// sum and the division run over each row in place, one row at a time, and
// BLAS computes O = P V from it. The chain's own payloads are emitted op
// for op, so the arithmetic is the unfused chain's, in its types.
//
// Where K and V are KV caches, only the filled keys take part: the
// products run over [0, cache_position + count) of them, so a decode step
// reads the positions written so far and no more.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"
#include "LinalgMatchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

namespace {

/// Batch element b's matrix of an operand `group` batch elements share.
std::string offset(StringRef base, int64_t stride, int64_t group = 1) {
  if (!stride)
    return base.str();
  std::string batch =
      group == 1 ? "b" : "(b / " + std::to_string(group) + "LL)";
  return (base + " + " + batch + " * " + Twine(stride) + "LL").str();
}

const char *trans(bool t) { return t ? "CblasTrans" : "CblasNoTrans"; }

/// C (m x n, leading dim ldc) = op(A) (m x k) * op(B) (k x n), where n or k
/// is the run-time `limit` (the filled keys): a matrix-vector product for
/// one row, sgemm otherwise.
void emitProduct(raw_indented_ostream &os, int64_t m, StringRef n, StringRef k,
                 const std::string &a, bool transA, StringRef lda,
                 const std::string &b, bool transB, int64_t ldb,
                 const std::string &c, StringRef ldc) {
  if (m == 1) {
    // y (n) = op(B)ᵀ x: B is stored [k, n], or [n, k] when transposed.
    os << "cblas_sgemv(CblasRowMajor, "
       << (transB ? "CblasNoTrans" : "CblasTrans") << ", " << (transB ? n : k)
       << ", " << (transB ? k : n) << ", 1.0f, " << b << ", " << ldb << ", "
       << a << ", 1, 0.0f, " << c << ", 1);\n";
    return;
  }
  os << "cblas_sgemm(CblasRowMajor, " << trans(transA) << ", " << trans(transB)
     << ", " << m << ", " << n << ", " << k << ", 1.0f, " << a << ", " << lda
     << ", " << b << ", " << ldb << ", 0.0f, " << c << ", " << ldc << ");\n";
}

} // namespace

LogicalResult CppEmitter::findFusedAttention() {
  // The chains tp-select-kernels fused: each root's chain, as matched.
  WalkResult walk = module.walk([&](linalg::GenericOp op) {
    if (getKernel(op) != Kernel::Attention)
      return WalkResult::advance();
    std::optional<FusedAttention> match = matchAttention(op);
    if (!match) {
      op.emitError("code generation: #tp.kernel<attention> on a product "
                   "that does not end a fusable attention chain");
      return WalkResult::interrupt();
    }
    auto group = std::make_shared<FusedAttention>(*match);
    for (linalg::GenericOp inner :
         {group->scores, group->rounding, group->max, group->exp, group->sum,
          group->probs, group->keyTranspose})
      if (inner)
        fusedIntoAttention.insert(inner);
    for (linalg::GenericOp inner : group->logits)
      fusedIntoAttention.insert(inner);
    for (Operation *reshape : group->reshapes)
      fusedIntoAttention.insert(reshape);
    for (Operation *repeat : group->headRepeats)
      fusedIntoAttention.insert(repeat);
    attentionAt[op] = group;
    // The fused computation runs where O is: what it reads lives until
    // then.
    SmallVector<Value> &reads = extraUses[op];
    reads.append({group->qk.lhs, group->qk.rhs, group->pv.rhs});
    if (group->position)
      reads.push_back(group->position);
    for (linalg::GenericOp logits : group->logits) {
      llvm::append_range(reads, logits.getDpsInputs());
      logits.getRegion().walk([&](Operation *inner) {
        for (Value operand : inner->getOperands())
          if (!logits.getRegion().isAncestor(operand.getParentRegion()))
            reads.push_back(operand);
      });
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

LogicalResult CppEmitter::emitFilledKeys(const Gemm &product, bool keysAreRows,
                                         int64_t rows,
                                         linalg::GenericOp payload,
                                         StringRef buffer, Operation *at) {
  FailureOr<std::string> type = scalarTypeFor(product.rhsElement, at);
  if (failed(type))
    return failure();
  std::string ld = std::to_string(product.ldb) + "LL";
  std::string count =
      keysAreRows ? "limit * " + ld : std::to_string(rows * product.ldb) + "LL";
  std::string in = "in" + buffer.str();
  os << "const " << *type << " *" << in << " = "
     << offset(name(product.rhs), product.strideRhs, product.rhsGroup) << ";\n";
  os << "for (std::int64_t i = 0; i < " << count << "; ++i) {\n";
  os.indent();
  std::string element = in + "[i]";
  if (payload) {
    Block &body = payload.getRegion().front();
    bindTo(body.getArgument(0), element);
    for (Operation &inner : body.without_terminator())
      if (failed(emitScalarOp(&inner)))
        return failure();
    element = name(body.getTerminator()->getOperand(0));
  }
  os << buffer << "[i] = static_cast<float>(" << element << ");\n";
  os.unindent();
  os << "}\n";
  return success();
}

FailureOr<std::string>
CppEmitter::emitChainPayload(linalg::GenericOp generic,
                             ArrayRef<std::pair<Value, std::string>> bound,
                             ArrayRef<std::string> indices) {
  Block &body = generic.getRegion().front();
  for (auto &[arg, text] : bound)
    bindTo(arg, text);
  for (OpOperand *input : generic.getDpsInputOperands()) {
    BlockArgument arg = generic.getMatchingBlockArgument(input);
    if (names.count(arg) || arg.use_empty())
      continue;
    // Another operand of X (a mask): read at the element's indices.
    auto inputShape = cast<RankedTensorType>(input->get().getType());
    bindTo(arg, name(input->get()) + "[" +
                    offsetExpr(generic.getMatchingIndexingMap(input),
                               inputShape.getShape(), indices) +
                    "]");
  }
  for (Operation &bodyOp : body.without_terminator()) {
    if (auto index = dyn_cast<linalg::IndexOp>(bodyOp)) {
      bindTo(index.getResult(), indices[index.getDim()]);
      continue;
    }
    if (failed(emitScalarOp(&bodyOp)))
      return failure();
  }
  return name(body.getTerminator()->getOperand(0));
}

LogicalResult
CppEmitter::emitAttentionSoftmax(const FusedAttention &a, StringRef key,
                                 ArrayRef<SmallVector<std::string>> indices,
                                 Operation *op) {
  auto emitBody = [&](linalg::GenericOp generic,
                      ArrayRef<std::pair<Value, std::string>> bound,
                      ArrayRef<std::string> chainIndices = {}) {
    return emitChainPayload(generic, bound, chainIndices);
  };
  auto arg = [](linalg::GenericOp generic, unsigned index) -> Value {
    return generic.getRegion().front().getArgument(index);
  };
  auto initOf = [&](linalg::GenericOp reduction) -> FailureOr<std::string> {
    auto fill = reduction.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
    FailureOr<std::string> type =
        scalarTypeFor(getElementTypeOrSelf(fill.getResult(0).getType()), op);
    if (failed(type))
      return failure();
    return *type + "(" + name(fill.getInputs()[0]) + ")";
  };

  // Each elementwise step is a loop of its own and each reduction another,
  // in the same order as one loop would take them: a reduction (a
  // NaN-propagating max, a float sum) keeps its loop scalar, while the
  // divisions, masks and exponentials around it vectorise.
  auto openKeyLoop = [&] {
    os << "for (std::int64_t " << key << " = 0; " << key << " < limit; ++"
       << key << ") {\n";
    os.indent();
  };
  auto closeKeyLoop = [&] {
    os.unindent();
    os << "}\n";
  };

  // X, then its row maximum.
  FailureOr<std::string> maxInit = initOf(a.max);
  if (failed(maxInit))
    return failure();
  openKeyLoop();
  std::string previous = "x[" + key.str() + "]";
  if (a.rounding) {
    FailureOr<std::string> rounded =
        emitBody(a.rounding, {{arg(a.rounding, 0), previous}});
    if (failed(rounded))
      return failure();
    previous = *rounded;
  }
  for (auto [chainOp, chained, names] :
       llvm::zip(a.logits, a.chained, indices)) {
    linalg::GenericOp logits = chainOp; // a.logits is const here
    SmallVector<std::pair<Value, std::string>> bound;
    for (OpOperand *input : logits.getDpsInputOperands())
      if (input->get() == chained)
        bound.push_back({logits.getMatchingBlockArgument(input), previous});
    FailureOr<std::string> next = emitBody(logits, bound, names);
    if (failed(next))
      return failure();
    previous = *next;
  }
  os << "x[" << key << "] = static_cast<float>(" << previous << ");\n";
  closeKeyLoop();
  os << "auto rowMax = " << *maxInit << ";\n";
  openKeyLoop();
  FailureOr<std::string> maxed =
      emitBody(a.max, {{arg(a.max, 0), "x[" + key.str() + "]"},
                       {arg(a.max, 1), "rowMax"}});
  if (failed(maxed))
    return failure();
  os << "rowMax = " << *maxed << ";\n";
  closeKeyLoop();

  // E = exp(X - M) in place, then its row sum.
  FailureOr<std::string> sumInit = initOf(a.sum);
  if (failed(sumInit))
    return failure();
  openKeyLoop();
  FailureOr<std::string> e =
      emitBody(a.exp, {{arg(a.exp, 0), "x[" + key.str() + "]"},
                       {arg(a.exp, 1), "rowMax"}});
  if (failed(e))
    return failure();
  os << "x[" << key << "] = static_cast<float>(" << *e << ");\n";
  closeKeyLoop();
  os << "auto rowSum = " << *sumInit << ";\n";
  openKeyLoop();
  FailureOr<std::string> summed =
      emitBody(a.sum, {{arg(a.sum, 0), "x[" + key.str() + "]"},
                       {arg(a.sum, 1), "rowSum"}});
  if (failed(summed))
    return failure();
  os << "rowSum = " << *summed << ";\n";
  closeKeyLoop();

  // P = E / L in place.
  openKeyLoop();
  FailureOr<std::string> p =
      emitBody(a.probs, {{arg(a.probs, 0), "x[" + key.str() + "]"},
                         {arg(a.probs, 1), "rowSum"}});
  if (failed(p))
    return failure();
  os << "x[" << key << "] = static_cast<float>(" << *p << ");\n";
  closeKeyLoop();
  return success();
}

LogicalResult CppEmitter::emitFusedAttention(linalg::GenericOp op) {
  FusedAttention a = *attentionAt.lookup(op);
  Value out = op.getResult(0);
  if (failed(allocate(out, op)))
    return failure();
  const Gemm &qk = a.qk, &pv = a.pv;
  int64_t queries = qk.m, keys = qk.n, depth = qk.k, width = pv.n;
  std::string id = std::to_string(nextId++);
  std::string key = "j" + id;

  std::string where = describe(op);
  os << "// Attention" << (where.empty() ? "" : " (" + where + ")") << ": "
     << qk.batch << " x (" << queries << " queries x " << keys
     << " keys), depth " << depth << ", value width " << width
     << "; the scores of one batch element at a time, "
     << (a.position ? "over the filled keys of the KV cache" : "over every key")
     << "\n";
  os << "TP_LOOP_NEST {\n";
  os.indent();
  if (a.position)
    os << "const std::int64_t limit = std::min<std::int64_t>(" << keys
       << ", std::max<std::int64_t>(1, " << name(a.position) << "[0] + "
       << a.count << "));\n";
  else
    os << "const std::int64_t limit = " << keys << ";\n";
  // f16/bf16 operands (tp-convert-dtype) in f32 copies for BLAS, as
  // emitGemm does: the C++ target runs --dtype for its numerics.
  auto operand = [&](Value v, Type element, StringRef prefix) {
    std::string text = name(v);
    if (element.getIntOrFloatBitWidth() == 32)
      return text;
    std::string wide = prefix.str() + id;
    os << "std::vector<float> " << wide << "(" << numElements(v) << ");\n";
    os << "for (std::size_t i = 0; i < " << wide << ".size(); ++i)\n  " << wide
       << "[i] = static_cast<float>(" << text << "[i]);\n";
    return wide + ".data()";
  };
  // K and V (KV caches, in a decoder): a narrow one, or a K read through a
  // payload, is read per batch element, its filled keys only, into a
  // buffer of one head's keys. As stored each is [rows, ldb] per batch
  // element; K's keys are its rows when the product reads it transposed,
  // V's when it does not.
  linalg::GenericOp keyPayload = a.keyPayload ? a.keyTranspose : nullptr;
  bool kPerBatch = keyPayload || (qk.rhsElement.getIntOrFloatBitWidth() != 32 &&
                                  qk.strideRhs != 0);
  bool vPerBatch =
      pv.rhsElement.getIntOrFloatBitWidth() != 32 && pv.strideRhs != 0;
  int64_t keyRows = qk.transRhs ? keys : depth;
  int64_t valueRows = pv.transRhs ? width : keys;
  std::string kBuffer = "k" + id, vBuffer = "v" + id;
  std::string q = operand(qk.lhs, qk.lhsElement, "q");
  std::string k = kPerBatch ? kBuffer + ".data()"
                            : offset(operand(qk.rhs, qk.rhsElement, "k"),
                                     qk.strideRhs, qk.rhsGroup);
  std::string v = vPerBatch ? vBuffer + ".data()"
                            : offset(operand(pv.rhs, pv.rhsElement, "v"),
                                     pv.strideRhs, pv.rhsGroup);
  if (kPerBatch)
    os << "std::vector<float> " << kBuffer << "(" << keyRows * qk.ldb << ");\n";
  if (vPerBatch)
    os << "std::vector<float> " << vBuffer << "(" << valueRows * pv.ldb
       << ");\n";
  std::string scores = "scores" + id;
  os << "std::vector<float> " << scores << "(" << queries * keys << ");\n";
  os << "for (std::int64_t b = 0; b < " << qk.batch << "; ++b) {\n";
  os.indent();
  os << "float *s = " << scores << ".data();\n";
  if (kPerBatch &&
      failed(emitFilledKeys(qk, qk.transRhs, keyRows, keyPayload, kBuffer, op)))
    return failure();
  emitProduct(os, queries, "limit", std::to_string(depth),
              offset(q, qk.strideLhs), qk.transLhs, std::to_string(qk.lda), k,
              qk.transRhs, qk.ldb, "s", "limit");
  os << "for (std::int64_t row = 0; row < " << queries << "; ++row) {\n";
  os.indent();
  // Each generic of X's chain indexes its own batch dims, from b.
  SmallVector<SmallVector<std::string>> indices;
  for (auto [n, logits] : llvm::enumerate(a.logits))
    indices.push_back(declareChainIndices(
        os, logits, "a" + id + "_" + std::to_string(n) + "_", "b", "row", key));
  os << "float *x = s + row * limit;\n";

  if (failed(emitAttentionSoftmax(a, key, indices, op)))
    return failure();
  os.unindent();
  os << "}\n";

  // O = P V over the same keys.
  if (vPerBatch &&
      failed(emitFilledKeys(pv, !pv.transRhs, valueRows, nullptr, vBuffer, op)))
    return failure();
  emitProduct(os, queries, std::to_string(width), "limit", "s", false, "limit",
              v, pv.transRhs, pv.ldb, offset(name(out), pv.strideOut),
              std::to_string(pv.ldc));
  os.unindent();
  os << "}\n";
  os.unindent();
  os << "}();\n";
  return success();
}
