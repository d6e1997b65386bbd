//===- MatchAttention.cpp - attention chains both emitters fuse -----------===//
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
// When no reader outside the chain needs S, X, M, E, L or P, each target
// runs the chain as one fused computation (EmitAttention.cpp on CPUs,
// EmitCudaAttention.cpp on GPUs). Three more things are folded in:
//  - a transpose that only swaps K's last two dims (GPT-2's
//    `k.transpose(-1, -2)`): the product reads K as stored instead;
//  - the repeat of K's and V's heads to the query heads under grouped-
//    query attention: each product reads head b / g of the unrepeated
//    operand (Gemm::rhsGroup) instead;
//  - the key bound of a KV cache. In a decoder compiled with --max-seq, K
//    and V are the runtime's buffers of every position (tp.cache_update),
//    of which a call has filled [0, cache_position + its token count). The
//    export's own K and V end there; the positions past it do not exist
//    in the model and are only masked. The fused computation stops at
//    that bound, so a decode step reads the filled positions only.
//
//===----------------------------------------------------------------------===//

#include "LinalgMatchers.h"

#include "tp/Dialect/TP/TPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tp::emit;

namespace {
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
  return beforeRounding(op.getRegion().front().getTerminator()->getOperand(0));
}

bool isElementwise(linalg::GenericOp op) {
  return op.getNumDpsInits() == 1 &&
         op.getNumLoops() == op.getNumParallelLoops();
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

/// A reshape that only regroups the dims before the last two (which stay
/// as they are): each row of keys keeps its place in memory.
bool keepsRowsAndKeys(Operation *op) {
  SmallVector<ReassociationIndices> groups;
  int64_t rank = 0;
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op)) {
    groups = expand.getReassociationIndices();
    rank = expand.getResultType().getRank();
  } else if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op)) {
    groups = collapse.getReassociationIndices();
    rank = collapse.getSrcType().getRank();
  } else {
    return false;
  }
  return groups.size() >= 2 && rank >= 2 &&
         groups.back() == ReassociationIndices{rank - 1} &&
         groups[groups.size() - 2] == ReassociationIndices{rank - 2};
}

/// The attention chain that ends in `out`, or nothing.
std::optional<FusedAttention> matchChain(linalg::GenericOp out) {
  FusedAttention a;
  a.out = out;
  FailureOr<Gemm> pv = matchGemm(out, GemmOperands::Mixed);
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
      !foldsInput<arith::AddFOp>(a.sum) ||
      !isZeroFill(a.sum.getDpsInits()[0]) || !l.hasOneUse() ||
      !usersAre(e, {a.sum, a.probs}) || !isElementwise(a.exp) ||
      a.exp.getNumDpsInputs() != 2)
    return std::nullopt;
  auto expOp = yielded(a.exp).getDefiningOp<math::ExpOp>();
  auto sub = expOp
                 ? throughExt(expOp.getOperand()).getDefiningOp<arith::SubFOp>()
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
  // generics read only by the next one, and reshapes of their batch dims
  // (OPT adds its mask to S as [batch, heads, queries, keys], and takes the
  // softmax over [batch * heads, queries, keys]), to S.
  Value current = x;
  for (unsigned depth = 0; !(a.scores = scoresOf(current)); ++depth) {
    if (depth == 8 || (depth > 0 && !current.hasOneUse()))
      return std::nullopt;
    if (Operation *reshape = current.getDefiningOp();
        reshape && keepsRowsAndKeys(reshape)) {
      a.reshapes.push_back(reshape);
      current = reshape->getOperand(0);
      continue;
    }
    auto generic = current.getDefiningOp<linalg::GenericOp>();
    if (!generic || !isElementwise(generic) ||
        !generic.getMatchingIndexingMap(generic.getDpsInitOperand(0))
             .isIdentity() ||
        generic.getNumLoops() < 2)
      return std::nullopt;
    Value previous;
    for (OpOperand *input : generic.getDpsInputOperands()) {
      Value v = input->get();
      Operation *producer = v.getDefiningOp();
      auto producerGeneric = dyn_cast_or_null<linalg::GenericOp>(producer);
      if (producer && v.hasOneUse() &&
          generic.getMatchingIndexingMap(input).isIdentity() &&
          ((producerGeneric && (isElementwise(producerGeneric) ||
                                succeeded(matchGemm(producerGeneric)))) ||
           keepsRowsAndKeys(producer))) {
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
  // X's generics run over S's rows and keys, their batch dims S's.
  for (linalg::GenericOp logits : a.logits) {
    SmallVector<int64_t> ranges = logits.getStaticLoopRanges();
    int64_t batch = 1;
    for (int64_t size : ArrayRef(ranges).drop_back(2))
      batch *= size;
    if (ranges[ranges.size() - 2] != a.qk.m || ranges.back() != a.qk.n ||
        batch != a.qk.batch)
      return std::nullopt;
  }
  // One element type for Q and K, and for V.
  if (a.qk.lhsElement != a.qk.rhsElement || a.pv.rhsElement.isF64() ||
      a.qk.lhsElement.isF64())
    return std::nullopt;
  return a;
}

} // namespace

namespace {

/// Whether `op`'s payload computes its yield from its input's element
/// alone: no index, no value from outside its body but constants.
bool readsOnlyItsElement(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  for (Operation &inner : body.without_terminator()) {
    if (inner.getNumRegions() || !isPure(&inner) || isa<linalg::IndexOp>(inner))
      return false;
    for (Value operand : inner.getOperands())
      if (operand.getParentBlock() != &body &&
          !matchPattern(operand, m_Constant()))
        return false;
  }
  return true;
}

/// Whether `op`'s payload rounds its element back to the narrow type it
/// already has (tp-convert-dtype's rounding of the extension of a bf16 KV
/// cache): a copy, up to which quiet NaN a NaN becomes.
bool roundsToItsOwnType(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  Value yielded = body.getTerminator()->getOperand(0);
  auto trunc = yielded.getDefiningOp<arith::TruncFOp>();
  auto ext = beforeRounding(yielded).getDefiningOp<arith::ExtFOp>();
  return trunc && ext && ext.getIn() == body.getArgument(0) &&
         trunc.getType() == body.getArgument(0).getType();
}

/// A copy of one input with its last two dims swapped, its elements as
/// they are or through a payload of each element alone (tp-convert-dtype's
/// rounding of f32 keys to bf16).
bool swapsLastTwoDims(linalg::GenericOp op) {
  if (!isElementwise(op) || op.getNumDpsInputs() != 1 || op.getNumLoops() < 2 ||
      !readsOnlyItsElement(op))
    return false;
  unsigned rank = op.getNumLoops();
  SmallVector<unsigned> swapped = llvm::to_vector(llvm::seq(0u, rank));
  std::swap(swapped[rank - 2], swapped[rank - 1]);
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  return maps[1].isIdentity() &&
         maps[0] == AffineMap::getPermutationMap(swapped, op.getContext());
}

/// Reads K as the transpose's input when K is a transpose of the last two
/// dims that nothing else reads: no copy of K (of a whole KV cache, in a
/// decode step) on every call. A payload the copy applied to each element
/// is applied where K is read.
void foldKeyTranspose(FusedAttention &a) {
  auto transpose = a.qk.rhs.getDefiningOp<linalg::GenericOp>();
  if (!transpose || !a.qk.rhs.hasOneUse() || !swapsLastTwoDims(transpose))
    return;
  Value source = transpose.getDpsInputs()[0];
  if (getElementTypeOrSelf(source.getType()).isF64())
    return;
  // The stored operand is [..., A, B]: [k, n], or [n, k] when transposed.
  ArrayRef<int64_t> stored =
      cast<RankedTensorType>(a.qk.rhs.getType()).getShape();
  int64_t rowsStored = stored[stored.size() - 2], colsStored = stored.back();
  if (a.qk.transRhs ? (rowsStored != a.qk.n || colsStored != a.qk.k)
                    : (rowsStored != a.qk.k || colsStored != a.qk.n))
    return;
  // Its source is [..., B, A]: element (row, col) of the stored operand is
  // at col * A + row there.
  Block &body = transpose.getRegion().front();
  a.keyTranspose = transpose;
  a.keyPayload = body.getTerminator()->getOperand(0) != body.getArgument(0) &&
                 !roundsToItsOwnType(transpose);
  a.qk.rhs = source;
  a.qk.rhsElement = getElementTypeOrSelf(source.getType());
  a.qk.transRhs = !a.qk.transRhs;
  a.qk.ldb = rowsStored;
}

/// Reads the rhs of `product` without a repeat of its heads: grouped-query
/// attention broadcasts each K/V head [.., kv, 1, rows, cols] to the query
/// heads of its group [.., kv, g, rows, cols] and merges that into the
/// heads dim. Batch element b (row-major over the repeated operand's
/// leading dims, the group innermost) reads matrix b / g of the broadcast's
/// input: no copy of every head of a KV cache on every call.
void foldHeadRepeat(Gemm &product, FusedAttention &a) {
  auto collapse = product.rhs.getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse || !product.rhs.hasOneUse() || product.strideRhs == 0 ||
      product.rhsGroup != 1)
    return;
  auto repeat = collapse.getSrc().getDefiningOp<linalg::GenericOp>();
  if (!repeat || !collapse.getSrc().hasOneUse() || !isElementwise(repeat) ||
      repeat.getNumDpsInputs() != 1)
    return;
  Block &body = repeat.getRegion().front();
  if (body.getTerminator()->getOperand(0) != body.getArgument(0))
    return;
  // The matrices are the last two dims, kept as they are.
  unsigned rank = repeat.getNumLoops();
  SmallVector<ReassociationIndices> groups = collapse.getReassociationIndices();
  if (rank < 3 || groups.size() < 2 ||
      groups.back() != ReassociationIndices{int64_t(rank) - 1} ||
      groups[groups.size() - 2] != ReassociationIndices{int64_t(rank) - 2})
    return;
  // The input reads every dim but a run of batch dims just before the
  // matrices, in order.
  AffineMap in = repeat.getMatchingIndexingMap(repeat.getDpsInputOperand(0));
  AffineMap out = repeat.getMatchingIndexingMap(repeat.getDpsInitOperand(0));
  if (!out.isIdentity() || !in.isProjectedPermutation())
    return;
  SmallVector<unsigned> kept;
  for (AffineExpr expr : in.getResults())
    kept.push_back(cast<AffineDimExpr>(expr).getPosition());
  unsigned dropped = rank - kept.size();
  if (dropped == 0 || !llvm::is_sorted(kept) ||
      !llvm::equal(ArrayRef(kept).take_front(rank - 2 - dropped),
                   llvm::seq(0u, rank - 2 - dropped)) ||
      kept[kept.size() - 2] != rank - 2 || kept.back() != rank - 1)
    return;
  ArrayRef<int64_t> shape = collapse.getSrcType().getShape();
  int64_t group = 1, batch = 1;
  for (unsigned d = 0; d + 2 < rank; ++d) {
    batch *= shape[d];
    if (d + 2 + dropped >= rank)
      group *= shape[d];
  }
  if (batch != product.batch || ShapedType::isDynamicShape(shape))
    return;
  a.headRepeats.append({collapse, repeat});
  product.rhs = repeat.getDpsInputs()[0];
  product.rhsGroup = group;
}

/// The dim of `input` (an operand of `op`) that loop `loop` indexes.
std::optional<std::pair<Value, int64_t>>
dimIndexedBy(linalg::GenericOp op, OpOperand *input, unsigned loop) {
  AffineMap map = op.getMatchingIndexingMap(input);
  for (unsigned r = 0, e = map.getNumResults(); r < e; ++r)
    if (map.getResult(r) == getAffineDimExpr(loop, op.getContext()))
      return std::make_pair(input->get(), int64_t(r));
  return std::nullopt;
}

/// Where dim `dim` of `v` is the position axis of a KV cache written by a
/// tp.cache_update (through reshapes and elementwise copies that keep each
/// position apart), the update: its position and token count.
std::optional<std::pair<Value, int64_t>> cacheAxisOf(Value v, int64_t dim) {
  for (unsigned steps = 0; steps < 16; ++steps) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (auto update = dyn_cast<tp::CacheUpdateOp>(def)) {
      if (dim != update.getDim())
        return std::nullopt;
      return std::make_pair(update.getPosition(),
                            update.getUpdate().getType().getDimSize(dim));
    }
    if (auto slice = dyn_cast<shard::AllSliceOp>(def)) {
      // Each rank keeping its heads of a replicated cache (GQA with fewer
      // KV heads than ranks) keeps every position.
      if (slice.getSliceAxis().getSExtValue() == dim)
        return std::nullopt;
      v = slice.getInput();
      continue;
    }
    if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
      // The axis's group grows only unit dims around it.
      SmallVector<ReassociationIndices> groups =
          expand.getReassociationIndices();
      std::optional<int64_t> group;
      for (auto [g, indices] : llvm::enumerate(groups)) {
        if (!llvm::is_contained(indices, dim))
          continue;
        for (int64_t other : indices)
          if (other != dim && expand.getResultType().getDimSize(other) != 1)
            return std::nullopt;
        group = g;
      }
      if (!group)
        return std::nullopt;
      v = expand.getSrc();
      dim = *group;
      continue;
    }
    if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
      // The axis is the one dim of its group that is not a unit dim.
      SmallVector<ReassociationIndices> groups =
          collapse.getReassociationIndices();
      std::optional<int64_t> source;
      for (int64_t index : groups[dim]) {
        if (collapse.getSrcType().getDimSize(index) == 1)
          continue;
        if (source)
          return std::nullopt;
        source = index;
      }
      if (!source)
        return std::nullopt;
      v = collapse.getSrc();
      dim = *source;
      continue;
    }
    if (auto generic = dyn_cast<linalg::GenericOp>(def)) {
      // Elementwise over one input that the axis indexes: position j of
      // the result is computed from position j of the input alone.
      if (!isElementwise(generic) || generic.getNumDpsInputs() != 1)
        return std::nullopt;
      AffineMap out =
          generic.getMatchingIndexingMap(generic.getDpsInitOperand(0));
      AffineMap in =
          generic.getMatchingIndexingMap(generic.getDpsInputOperand(0));
      auto axis = dyn_cast<AffineDimExpr>(out.getResult(dim));
      if (!axis || !in.isProjectedPermutation())
        return std::nullopt;
      std::optional<std::pair<Value, int64_t>> input = dimIndexedBy(
          generic, generic.getDpsInputOperand(0), axis.getPosition());
      if (!input)
        return std::nullopt;
      std::tie(v, dim) = *input;
      continue;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

/// Sets `a`'s cache bound when the keys of both products run over the
/// position axis of KV caches written at one position by one count.
void findCacheBound(FusedAttention &a) {
  // The key loop of S = Q Kᵀ: its output's last dim.
  AffineMap scoresOut =
      a.scores.getMatchingIndexingMap(a.scores.getDpsInitOperand(0));
  auto keyLoop = dyn_cast<AffineDimExpr>(
      scoresOut.getResult(scoresOut.getNumResults() - 1));
  // The key loop of O = P V: P's last dim.
  AffineMap probs = a.out.getMatchingIndexingMap(a.out.getDpsInputOperand(0));
  auto valueLoop =
      dyn_cast<AffineDimExpr>(probs.getResult(probs.getNumResults() - 1));
  if (!keyLoop || !valueLoop)
    return;
  // K is S's second input, V is O's.
  std::optional<std::pair<Value, int64_t>> k = dimIndexedBy(
      a.scores, a.scores.getDpsInputOperand(1), keyLoop.getPosition());
  std::optional<std::pair<Value, int64_t>> v =
      dimIndexedBy(a.out, a.out.getDpsInputOperand(1), valueLoop.getPosition());
  if (!k || !v)
    return;
  auto keys = cacheAxisOf(k->first, k->second);
  auto values = cacheAxisOf(v->first, v->second);
  if (!keys || !values || *keys != *values)
    return;
  std::tie(a.position, a.count) = *keys;
}

} // namespace

std::optional<FusedAttention>
mlir::tp::emit::matchAttention(linalg::GenericOp out) {
  std::optional<FusedAttention> a = matchChain(out);
  if (!a)
    return std::nullopt;
  foldKeyTranspose(*a);
  foldHeadRepeat(a->qk, *a);
  foldHeadRepeat(a->pv, *a);
  findCacheBound(*a);
  return a;
}

SmallVector<std::string>
mlir::tp::emit::declareChainIndices(raw_indented_ostream &os,
                                    linalg::GenericOp logits, StringRef prefix,
                                    StringRef b, StringRef row, StringRef key) {
  SmallVector<int64_t> ranges = logits.getStaticLoopRanges();
  unsigned rank = ranges.size();
  SmallVector<std::string> indices(rank);
  int64_t inner = 1;
  for (int d = int(rank) - 3; d >= 0; --d) {
    indices[d] = (prefix + Twine(d)).str();
    os << "const std::int64_t " << indices[d] << " = " << b << " / " << inner
       << "LL % " << ranges[d] << "LL;\n";
    inner *= ranges[d];
  }
  indices[rank - 2] = row.str();
  indices[rank - 1] = key.str();
  return indices;
}
