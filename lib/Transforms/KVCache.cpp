//===- KVCache.cpp - tp-kv-cache ------------------------------------------===//
//
// Rewrites the past/present pairs of a decoder exported with its KV cache
// into persistent caches: each `concat(past, new)` that @main returns
// becomes a tp.cache_update of a runtime-owned buffer at `cache_position`.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cstring>

namespace mlir::tp {
#define GEN_PASS_DEF_KVCACHE
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The input the runtime sets to the first position a call writes.
constexpr llvm::StringLiteral kPositionInput = "cache_position";

/// One past/present pair: the past input, and either the concat of it with
/// the step's entries (which the function returns), or, for a prefill whose
/// empty past the importer folded away, the returned present itself.
struct CachePair {
  BlockArgument past;
  tensor::ConcatOp concat;
  /// Without a concat: the result that returns the step's entries.
  unsigned result = 0;
  int64_t dim = 0;
};

std::optional<CachePair> matchConcat(func::FuncOp func, BlockArgument arg) {
  if (!func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName) ||
      !arg.hasOneUse())
    return std::nullopt;
  auto concat = dyn_cast<tensor::ConcatOp>(*arg.getUsers().begin());
  if (!concat || concat.getInputs().size() != 2 || concat.getInputs()[0] != arg)
    return std::nullopt;
  bool returned = llvm::any_of(concat->getUsers(), [](Operation *user) {
    return isa<func::ReturnOp>(user);
  });
  if (!returned)
    return std::nullopt;
  return CachePair{arg, concat, 0, static_cast<int64_t>(concat.getDim())};
}

/// A prefill's pair, where concat(empty past, new) folded to `new`: an
/// unused input `past_key_values.X` (or `past.X`) with one dim of size 0,
/// and the result `present.X` of its shape but for that dim. Only the
/// names of optimum's layout tie the two together here.
std::optional<CachePair> matchFolded(func::FuncOp func, BlockArgument arg) {
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                TPDialect::kInputAttrName);
  auto type = dyn_cast<RankedTensorType>(arg.getType());
  if (!name || !type || !arg.use_empty())
    return std::nullopt;
  StringRef suffix = name.getValue();
  if (!suffix.consume_front("past_key_values.") &&
      !suffix.consume_front("past."))
    return std::nullopt;
  auto zero = llvm::find(type.getShape(), 0);
  if (zero == type.getShape().end() || llvm::count(type.getShape(), 0) != 1)
    return std::nullopt;
  int64_t dim = zero - type.getShape().begin();
  for (unsigned r = 0, e = func.getNumResults(); r < e; ++r) {
    auto output =
        func.getResultAttrOfType<StringAttr>(r, TPDialect::kOutputAttrName);
    auto present = dyn_cast<RankedTensorType>(func.getResultTypes()[r]);
    if (!output || output.getValue() != ("present." + suffix).str() ||
        !present || present.getRank() != type.getRank() ||
        present.getElementType() != type.getElementType())
      continue;
    bool same = true;
    for (int64_t d = 0; d < type.getRank(); ++d)
      same &= d == dim || present.getDimSize(d) == type.getDimSize(d);
    if (same)
      return CachePair{arg, nullptr, r, dim};
  }
  return std::nullopt;
}

/// Whether `v` is computed from `input` (through any ops).
bool dependsOn(Value v, BlockArgument input) {
  SmallVector<Value> worklist{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!worklist.empty()) {
    Value next = worklist.pop_back_val();
    if (next == input)
      return true;
    Operation *def = next.getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  return false;
}

/// `source[b, position + i]` for i < `count`, as a [B, count] generic: a
/// sum over the sequence of the entries at that index, so that the read
/// needs no dynamic slice.
Value readAtPosition(OpBuilder &b, Location loc, Value source, Value position,
                     int64_t count) {
  auto type = cast<RankedTensorType>(source.getType());
  Type element = type.getElementType();
  auto resultType = RankedTensorType::get({type.getDimSize(0), count}, element);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
  Value init =
      linalg::FillOp::create(
          b, loc, zero,
          tensor::EmptyOp::create(b, loc, resultType.getShape(), element)
              .getResult())
          .getResult(0);
  MLIRContext *ctx = b.getContext();
  AffineExpr row = getAffineDimExpr(0, ctx), col = getAffineDimExpr(1, ctx),
             seq = getAffineDimExpr(2, ctx);
  SmallVector<AffineMap> maps{AffineMap::get(3, 0, {row, seq}, ctx),
                              AffineMap::get(3, 0, {}, ctx),
                              AffineMap::get(3, 0, {row, col}, ctx)};
  SmallVector<utils::IteratorType> iterators{utils::IteratorType::parallel,
                                             utils::IteratorType::parallel,
                                             utils::IteratorType::reduction};
  auto generic = linalg::GenericOp::create(
      b, loc, resultType, ValueRange{source, position}, ValueRange{init}, maps,
      iterators, [&](OpBuilder &nb, Location nl, ValueRange args) {
        Value i = linalg::IndexOp::create(nb, nl, 1);
        Value j = linalg::IndexOp::create(nb, nl, 2);
        Value at = arith::AddIOp::create(
            nb, nl,
            arith::IndexCastOp::create(nb, nl, nb.getIndexType(), args[1]), i);
        Value hit =
            arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::eq, j, at);
        Value zero = arith::ConstantOp::create(nb, nl, nb.getZeroAttr(element));
        Value picked = arith::SelectOp::create(nb, nl, hit, args[0], zero);
        Value sum =
            isa<FloatType>(element)
                ? arith::AddFOp::create(nb, nl, args[2], picked).getResult()
                : arith::AddIOp::create(nb, nl, args[2], picked).getResult();
        linalg::YieldOp::create(nb, nl, sum);
      });
  return generic.getResult(0);
}

/// The export's sequence axis ends at the step's own tokens: anything it
/// computes over the [B, past + L] attention mask and then slices at
/// [past, past + L) is the step's (OPT's positions: a CumSum over the mask,
/// read at the new token). A decode step puts its token at cache_position
/// instead, so those slices read there.
void relocateStepSlices(func::FuncOp func, Value position, int64_t slots,
                        int64_t count) {
  SmallVector<BlockArgument> masks;
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName) &&
        type && type.getRank() == 2 && type.getDimSize(1) == slots)
      masks.push_back(arg);
  }
  SmallVector<tensor::ExtractSliceOp> slices;
  func.walk([&](tensor::ExtractSliceOp slice) {
    RankedTensorType source = slice.getSourceType();
    if (source.getRank() != 2 || source.getDimSize(1) != slots ||
        slice.getType().getRank() != 2 ||
        slice.getStaticOffsets() != ArrayRef<int64_t>{0, slots - count} ||
        slice.getStaticSizes() !=
            ArrayRef<int64_t>{source.getDimSize(0), count} ||
        !slice.hasUnitStride())
      return;
    if (llvm::any_of(masks, [&](BlockArgument mask) {
          return dependsOn(slice.getSource(), mask);
        }))
      slices.push_back(slice);
  });
  for (tensor::ExtractSliceOp slice : slices) {
    OpBuilder b(slice);
    slice.replaceAllUsesWith(
        readAtPosition(b, slice.getLoc(), slice.getSource(), position, count));
    slice.erase();
  }
}

/// Element `flat` of `attr` as raw bits, for comparing elements of any
/// integer or float type.
struct ElementReader {
  DenseElementsAttr attr;
  SmallVector<bool> bools;
  ArrayRef<char> raw;
  int64_t bytes = 0;

  explicit ElementReader(DenseElementsAttr attr) : attr(attr) {
    Type element = attr.getElementType();
    if (element.isInteger(1)) {
      bools.assign(attr.getValues<bool>().begin(),
                   attr.getValues<bool>().end());
      return;
    }
    bytes = element.getIntOrFloatBitWidth() / 8;
    raw = attr.getRawData();
  }
  bool equal(int64_t a, int64_t b) const {
    if (!bools.empty())
      return bools[a] == bools[b];
    return std::memcmp(raw.data() + a * bytes, raw.data() + b * bytes, bytes) ==
           0;
  }
};

/// Whether `attr` is a table of key slot minus query position along dims
/// `q` and `k`: the same along every diagonal, and not the same along `k`
/// (so that where the queries sit matters).
bool isPositionRelative(DenseElementsAttr attr, RankedTensorType type,
                        int64_t q, int64_t k) {
  ArrayRef<int64_t> shape = type.getShape();
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  ElementReader read(attr);
  bool variesAlongKeys = false;
  for (int64_t flat = 0, e = type.getNumElements(); flat < e; ++flat) {
    int64_t i = flat / strides[q] % shape[q], j = flat / strides[k] % shape[k];
    if (j + 1 < shape[k]) {
      variesAlongKeys |= !read.equal(flat, flat + strides[k]);
      if (i + 1 < shape[q] && !read.equal(flat, flat + strides[q] + strides[k]))
        return false;
    }
  }
  return variesAlongKeys;
}

/// The diagonals of position-relative table `attr` (dims `q`, `k`), with
/// every other dim it is the same along cut to 1: entry u of the diagonal
/// dim (at `k`; `q` cut to 1) is key j minus query i plus (queries - 1).
/// A [batch, 1, C, S] mask becomes [1, 1, 1, C + S - 1].
DenseElementsAttr diagonalsOf(DenseElementsAttr attr, RankedTensorType type,
                              int64_t q, int64_t k) {
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = type.getRank();
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  ElementReader read(attr);
  auto uniformAlong = [&](int64_t d) {
    for (int64_t flat = 0, e = type.getNumElements(); flat < e; ++flat)
      if (flat / strides[d] % shape[d] + 1 < shape[d] &&
          !read.equal(flat, flat + strides[d]))
        return false;
    return true;
  };
  SmallVector<int64_t> outShape(shape);
  for (int64_t d = 0; d < rank; ++d)
    if (d != q && d != k && shape[d] > 1 && uniformAlong(d))
      outShape[d] = 1;
  int64_t queries = shape[q];
  outShape[q] = 1;
  outShape[k] = queries + shape[k] - 1;
  auto outType = RankedTensorType::get(outShape, type.getElementType());
  int64_t count = outType.getNumElements();
  SmallVector<int64_t> outStrides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    outStrides[d] = outStrides[d + 1] * outShape[d + 1];
  // The source element of each entry: the diagonal's first (i, j) inside.
  SmallVector<int64_t> sources(count);
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t source = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t index = flat / outStrides[d] % outShape[d];
      if (d == k) {
        int64_t i = std::max<int64_t>(0, queries - 1 - index);
        int64_t j = index - (queries - 1) + i;
        source += i * strides[q] + j * strides[k];
      } else if (d != q) {
        source += index * strides[d];
      }
    }
    sources[flat] = source;
  }
  if (!read.bools.empty()) {
    SmallVector<bool> values(count);
    for (int64_t flat = 0; flat < count; ++flat)
      values[flat] = read.bools[sources[flat]];
    return DenseElementsAttr::get(outType, values);
  }
  std::vector<char> raw(count * read.bytes);
  for (int64_t flat = 0; flat < count; ++flat)
    std::memcpy(raw.data() + flat * read.bytes,
                read.raw.data() + sources[flat] * read.bytes, read.bytes);
  return DenseElementsAttr::getFromRawBuffer(outType, raw);
}

/// Replaces the uses of position-relative `constant` (dims `q`, `k`) by a
/// read of its diagonals shifted to `position`: entry (i, j) is the
/// constant's (i, j + slots - count - position), the last key's where that
/// runs past the end (slots no call has filled, which the attention mask
/// hides).
void relocateTable(arith::ConstantOp constant, int64_t q, int64_t k,
                   Value position, int64_t slots, int64_t count) {
  OpBuilder b(constant);
  Location loc = constant.getLoc();
  auto type = cast<RankedTensorType>(constant.getType());
  DenseElementsAttr diagonals =
      diagonalsOf(cast<DenseElementsAttr>(constant.getValue()), type, q, k);
  Value table = arith::ConstantOp::create(b, loc, diagonals);
  ArrayRef<int64_t> tableShape = diagonals.getType().getShape();
  int64_t rank = type.getRank();
  MLIRContext *ctx = b.getContext();
  Value init =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  SmallVector<AffineMap> maps{AffineMap::get(rank, 0, {}, ctx),
                              b.getMultiDimIdentityMap(rank)};
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, type, ValueRange{position}, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nb, Location nl, ValueRange args) {
        Value zero = arith::ConstantIndexOp::create(nb, nl, 0);
        SmallVector<Value> index;
        for (int64_t d = 0; d < rank; ++d)
          index.push_back(tableShape[d] == 1 && d != k
                              ? zero
                              : linalg::IndexOp::create(nb, nl, d).getResult());
        Value at =
            arith::IndexCastOp::create(nb, nl, nb.getIndexType(), args[0]);
        Value base = arith::ConstantIndexOp::create(nb, nl, slots - count);
        Value last = arith::ConstantIndexOp::create(nb, nl, slots - 1);
        Value key = arith::SubIOp::create(
            nb, nl, arith::AddIOp::create(nb, nl, index[k], base), at);
        key = arith::MaxSIOp::create(
            nb, nl, arith::MinSIOp::create(nb, nl, key, last), zero);
        // Diagonal key - query + (count - 1).
        Value query = linalg::IndexOp::create(nb, nl, q);
        Value offset = arith::ConstantIndexOp::create(nb, nl, count - 1);
        Value relative = arith::SubIOp::create(nb, nl, key, query);
        Value diagonal = arith::AddIOp::create(nb, nl, relative, offset);
        index[k] = diagonal;
        index[q] = zero;
        Value read = tensor::ExtractOp::create(nb, nl, table, index);
        linalg::YieldOp::create(nb, nl, read);
      });
  constant.replaceAllUsesWith(generic.getResult(0));
  constant.erase();
}

/// A chunk of `count` tokens (a prefill chunk reading the cache) was
/// imported with its tokens at the last `count` of `slots` positions: the
/// export's tables of key position relative to query position (the causal
/// mask, a sliding window) folded to constants for queries at
/// [slots - count, slots). The chunk's tokens sit at cache_position
/// instead, so each such table is read shifted by the difference: entry
/// (i, j) becomes the constant's (i, j + slots - count - position), the
/// last key's where that runs past the end (slots no call has filled,
/// which the attention mask hides).
void relocatePositionTables(func::FuncOp func, Value position, int64_t slots,
                            int64_t count) {
  SmallVector<std::tuple<arith::ConstantOp, int64_t, int64_t>> tables;
  func.walk([&](arith::ConstantOp constant) {
    auto type = dyn_cast<RankedTensorType>(constant.getType());
    auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!type || !attr || attr.isSplat() ||
        !type.getElementType().isIntOrFloat() ||
        (!type.getElementType().isInteger(1) &&
         type.getElementType().getIntOrFloatBitWidth() % 8 != 0))
      return;
    for (int64_t q = 0; q < type.getRank(); ++q)
      for (int64_t k = 0; k < type.getRank(); ++k)
        if (q != k && type.getDimSize(q) == count &&
            type.getDimSize(k) == slots &&
            isPositionRelative(attr, type, q, k)) {
          tables.push_back({constant, q, k});
          return;
        }
  });
  for (auto [constant, q, k] : tables)
    relocateTable(constant, q, k, position, slots, count);
}

struct KVCache : tp::impl::KVCacheBase<KVCache> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func || func.isExternal()) {
      module.emitError("tp-kv-cache: the module has no @main with a body");
      return signalPassFailure();
    }
    if (maxSeq < 1) {
      module.emitError("tp-kv-cache: max-seq must be at least 1");
      return signalPassFailure();
    }
    SmallVector<CachePair> pairs;
    for (BlockArgument arg : func.getArguments()) {
      if (auto name = func.getArgAttrOfType<StringAttr>(
              arg.getArgNumber(), TPDialect::kInputAttrName);
          name && name.getValue() == kPositionInput) {
        func.emitError() << "tp-kv-cache: the model already has an input "
                            "named '"
                         << kPositionInput << "'";
        return signalPassFailure();
      }
      if (std::optional<CachePair> pair = matchConcat(func, arg))
        pairs.push_back(*pair);
      else if (std::optional<CachePair> folded = matchFolded(func, arg))
        pairs.push_back(*folded);
    }
    if (pairs.empty()) {
      func.emitError("tp-kv-cache: no KV cache in the model: no input is "
                     "concatenated with the step's keys or values and "
                     "returned (past_key_values.{i}.key -> present.{i}.key); "
                     "export the decoder with use_cache=True");
      return signalPassFailure();
    }
    if (failed(rewrite(func, pairs)))
      return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp func, MutableArrayRef<CachePair> pairs) {
    MLIRContext *ctx = &getContext();
    int64_t slots = maxSeq;
    // The position input goes after the last model input.
    unsigned position = 0;
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), TPDialect::kInputAttrName))
        position = arg.getArgNumber() + 1;
    auto positionType = RankedTensorType::get({}, IntegerType::get(ctx, 64));
    NamedAttribute positionName(StringAttr::get(ctx, TPDialect::kInputAttrName),
                                StringAttr::get(ctx, kPositionInput));
    if (failed(func.insertArgument(position, positionType,
                                   DictionaryAttr::get(ctx, {positionName}),
                                   func.getLoc())))
      return func.emitError("tp-kv-cache: cannot add the position input");
    Value positionArg = func.getArgument(position);

    auto returnOp = cast<func::ReturnOp>(func.getBody().front().back());
    llvm::BitVector dropped(func.getNumResults());
    int64_t stepCount = 0;
    for (CachePair &pair : pairs) {
      auto pastType = cast<RankedTensorType>(pair.past.getType());
      Value step = pair.concat ? pair.concat.getInputs()[1]
                               : returnOp.getOperand(pair.result);
      auto stepType = cast<RankedTensorType>(step.getType());
      int64_t past = pastType.getDimSize(pair.dim),
              count = stepType.getDimSize(pair.dim);
      auto name = func.getArgAttrOfType<StringAttr>(pair.past.getArgNumber(),
                                                    TPDialect::kInputAttrName);
      Operation *at = pair.concat ? pair.concat.getOperation() : returnOp;
      if (past != 0 && past + count != slots)
        return at->emitError()
               << "tp-kv-cache: input '" << name.getValue() << "' has " << past
               << " past positions and the step " << count << "; with max-seq "
               << slots << " a step of " << count << " needs " << slots - count
               << " (or 0, a prefill)";
      if (count > slots)
        return at->emitError() << "tp-kv-cache: a step of " << count
                               << " positions does not fit max-seq " << slots;
      if (past != 0)
        stepCount = count;
      SmallVector<int64_t> shape(pastType.getShape());
      shape[pair.dim] = slots;
      auto cacheType = RankedTensorType::get(shape, pastType.getElementType());
      pair.past.setType(cacheType);
      unsigned index = pair.past.getArgNumber();
      func.removeArgAttr(index, TPDialect::kInputAttrName);
      func.removeArgAttr(index, TPDialect::kIndexBoundAttrName);
      func.setArgAttr(index, TPDialect::kCacheAttrName, name);

      // Right after the entries are made, so that a pipeline cut (by
      // program order) keeps the write in the stage that makes them.
      OpBuilder b(at);
      if (!pair.concat)
        b.setInsertionPointAfterValue(step);
      auto update =
          CacheUpdateOp::create(b, at->getLoc(), cacheType, step, pair.past,
                                positionArg, b.getI64IntegerAttr(pair.dim));
      if (!pair.concat) {
        dropped.set(pair.result);
        continue;
      }
      for (OpOperand &use : pair.concat->getUses())
        if (use.getOwner() == returnOp)
          dropped.set(use.getOperandNumber());
      // A prefill's attention reads its own entries; a step's, the cache.
      pair.concat.replaceAllUsesWith(past == 0 ? step : update.getResult());
      pair.concat.erase();
    }
    if (stepCount > 0)
      relocateStepSlices(func, positionArg, slots, stepCount);
    if (stepCount > 1)
      relocatePositionTables(func, positionArg, slots, stepCount);
    returnOp->eraseOperands(dropped);
    SmallVector<Type> argTypes(func.getBody().getArgumentTypes());
    if (failed(func.eraseResults(dropped)))
      return func.emitError("tp-kv-cache: cannot drop the present results");
    func.setType(FunctionType::get(ctx, argTypes, func.getResultTypes()));
    return success();
  }
};

} // namespace
