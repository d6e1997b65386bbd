//===- EmitLinalg.cpp - linalg.generic as loops or BLAS calls -------------===//
//
// A generic becomes one of:
//  - a (batched) GEMM: cblas_sgemm/dgemm, when it is a contraction whose
//    operands are row-major matrices up to a transpose; cblas_?gemv for one
//    row or column; tp::rt::weightGemm / residentWeightGemm
//    (tp_packed_gemm.h) for a few rows times a weight, which it packs once
//    per rank, in the weight's own f32, bf16 or f16;
//  - a lookup: a sum over a dim in which only the element where an index
//    equals a loop-invariant key contributes (the one-hot form the importer
//    gives embedding Gathers), emitted as one guarded iteration;
//  - otherwise a loop nest over its iteration domain in the op's order; a
//    sum, max or min over the innermost dim into one f32 accumulator runs
//    in kReductionLanes partial results (a lane reduction), which the host
//    compiler vectorises.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"
#include "LinalgMatchers.h"
#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"

using namespace mlir;
using namespace mlir::tp::emit;

//===----------------------------------------------------------------------===//
// Index expressions
//===----------------------------------------------------------------------===//

std::string mlir::tp::emit::affineExprToCpp(AffineExpr expr,
                                            ArrayRef<std::string> dims,
                                            ArrayRef<std::string> symbols) {
  if (auto dim = dyn_cast<AffineDimExpr>(expr))
    return dims[dim.getPosition()];
  if (auto symbol = dyn_cast<AffineSymbolExpr>(expr))
    return symbols[symbol.getPosition()];
  if (auto constant = dyn_cast<AffineConstantExpr>(expr))
    return std::to_string(constant.getValue()) + "LL";
  auto binary = cast<AffineBinaryOpExpr>(expr);
  std::string lhs = affineExprToCpp(binary.getLHS(), dims, symbols);
  std::string rhs = affineExprToCpp(binary.getRHS(), dims, symbols);
  switch (expr.getKind()) {
  case AffineExprKind::Add:
    return "(" + lhs + " + " + rhs + ")";
  case AffineExprKind::Mul:
    return "(" + lhs + " * " + rhs + ")";
  case AffineExprKind::FloorDiv:
    return "floorDiv<std::int64_t>(" + lhs + ", " + rhs + ")";
  case AffineExprKind::CeilDiv:
    return "(-floorDiv<std::int64_t>(-" + lhs + ", " + rhs + "))";
  case AffineExprKind::Mod:
    return "(" + lhs + " - floorDiv<std::int64_t>(" + lhs + ", " + rhs +
           ") * " + rhs + ")";
  default:
    return "0";
  }
}

std::string CppEmitter::offsetExpr(AffineMap map, ArrayRef<int64_t> shape,
                                   ArrayRef<std::string> indices) {
  SmallVector<int64_t> strides = stridesOf(shape);
  std::string text;
  for (auto [i, expr] : llvm::enumerate(map.getResults())) {
    if (shape[i] == 1)
      continue;
    std::string term = affineExprToCpp(expr, indices);
    if (strides[i] != 1)
      term += " * " + std::to_string(strides[i]) + "LL";
    text += (text.empty() ? "" : " + ") + term;
  }
  return text.empty() ? "0" : text;
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

/// The dims of a projected-permutation map's results, or failure.
static FailureOr<SmallVector<unsigned>> dimsOf(AffineMap map) {
  SmallVector<unsigned> dims;
  for (AffineExpr expr : map.getResults()) {
    auto dim = dyn_cast<AffineDimExpr>(expr);
    if (!dim)
      return failure();
    dims.push_back(dim.getPosition());
  }
  return dims;
}

/// Splits `dims` into [first..., second...] where `first` and `second` are
/// given role sets, checking each block's order against `order` (when set).
static bool splitBlocks(ArrayRef<unsigned> dims, ArrayRef<unsigned> first,
                        ArrayRef<unsigned> second) {
  if (dims.size() != first.size() + second.size())
    return false;
  return llvm::equal(dims.take_front(first.size()), first) &&
         llvm::equal(dims.drop_front(first.size()), second);
}

/// out + a * b, where a and b are the input block arguments, each possibly
/// extended to the output's type first (an f16/bf16 operand).
static bool isGemmBody(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  BlockArgument a = body.getArgument(0), b = body.getArgument(1),
                out = body.getArgument(2);
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || (add.getLhs() != out && add.getRhs() != out))
    return false;
  auto mul = (add.getLhs() == out ? add.getRhs() : add.getLhs())
                 .getDefiningOp<arith::MulFOp>();
  if (!mul || mul->getBlock() != &body)
    return false;
  unsigned extensions = 0;
  auto source = [&](Value v) -> Value {
    auto ext = v.getDefiningOp<arith::ExtFOp>();
    if (!ext)
      return v;
    ++extensions;
    return ext->getBlock() == &body && ext->hasOneUse() ? ext.getIn() : v;
  };
  Value x = source(mul.getLhs()), y = source(mul.getRhs());
  bool mulOk = (x == a && y == b) || (x == b && y == a);
  // Nothing else in the body: the extensions, mul, add and yield.
  return mulOk && body.getOperations().size() == 3 + extensions;
}

FailureOr<Gemm> mlir::tp::emit::matchGemm(linalg::GenericOp op,
                                          GemmOperands operands) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      !isGemmBody(op))
    return failure();
  Type element = getElementTypeOrSelf(op.getResult(0).getType());
  if (!element.isF32() && !element.isF64())
    return failure();
  // Each operand the output's type or, for an f32 output, f16 or bf16.
  auto readable = [&](Type stored) {
    return stored == element ||
           (element.isF32() && (stored.isF16() || stored.isBF16()));
  };
  Type lhsStored = getElementTypeOrSelf(op.getDpsInputs()[0].getType());
  Type rhsStored = getElementTypeOrSelf(op.getDpsInputs()[1].getType());
  if (!readable(lhsStored) || !readable(rhsStored) ||
      (operands == GemmOperands::Same && lhsStored != rhsStored))
    return failure();
  FailureOr<linalg::ContractionDimensions> roles =
      linalg::inferContractionDims(op);
  if (failed(roles) || roles->m.empty() || roles->n.empty() ||
      roles->k.empty())
    return failure();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  auto lhsDims = dimsOf(maps[0]), rhsDims = dimsOf(maps[1]),
       outDims = dimsOf(maps[2]);
  if (failed(lhsDims) || failed(rhsDims) || failed(outDims))
    return failure();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  auto product = [&](ArrayRef<unsigned> dims) {
    int64_t size = 1;
    for (unsigned d : dims)
      size *= ranges[d];
    return size;
  };

  // The output: [batch..., M..., N...] or [batch..., N..., M...].
  SmallVector<unsigned> batch(outDims->begin(),
                              outDims->begin() + roles->batch.size());
  if (!llvm::all_of(batch, [&](unsigned d) {
        return llvm::is_contained(roles->batch, d);
      }))
    return failure();
  ArrayRef<unsigned> outRest = ArrayRef(*outDims).drop_front(batch.size());
  SmallVector<unsigned> mDims, nDims;
  for (unsigned d : outRest)
    (llvm::is_contained(roles->m, d) ? mDims : nDims).push_back(d);
  bool swapped = !splitBlocks(outRest, mDims, nDims);
  if (swapped && !splitBlocks(outRest, nDims, mDims))
    return failure();

  // An input holds the batch dims as a prefix in the output's order, or none.
  auto stripBatch = [&](ArrayRef<unsigned> dims, bool &hasBatch)
      -> std::optional<ArrayRef<unsigned>> {
    hasBatch = !batch.empty() && dims.size() >= batch.size() &&
               llvm::equal(dims.take_front(batch.size()), batch);
    if (!hasBatch &&
        llvm::any_of(dims, [&](unsigned d) { return llvm::is_contained(batch, d); }))
      return std::nullopt;
    return hasBatch ? dims.drop_front(batch.size()) : dims;
  };
  bool lhsBatch, rhsBatch;
  auto lhsRest = stripBatch(*lhsDims, lhsBatch);
  auto rhsRest = stripBatch(*rhsDims, rhsBatch);
  if (!lhsRest || !rhsRest)
    return failure();
  SmallVector<unsigned> kDims;
  for (unsigned d : *lhsRest)
    if (llvm::is_contained(roles->k, d))
      kDims.push_back(d);

  Gemm gemm;
  gemm.batch = product(batch);
  gemm.m = product(mDims);
  gemm.n = product(nDims);
  gemm.k = product(kDims);
  if (splitBlocks(*lhsRest, mDims, kDims))
    gemm.lda = gemm.k;
  else if (splitBlocks(*lhsRest, kDims, mDims))
    gemm.transLhs = true, gemm.lda = gemm.m;
  else
    return failure();
  if (splitBlocks(*rhsRest, kDims, nDims))
    gemm.ldb = gemm.n;
  else if (splitBlocks(*rhsRest, nDims, kDims))
    gemm.transRhs = true, gemm.ldb = gemm.k;
  else
    return failure();
  gemm.lhs = op.getDpsInputs()[0];
  gemm.rhs = op.getDpsInputs()[1];
  gemm.lhsElement = getElementTypeOrSelf(gemm.lhs.getType());
  gemm.rhsElement = getElementTypeOrSelf(gemm.rhs.getType());
  gemm.strideLhs = lhsBatch ? gemm.m * gemm.k : 0;
  gemm.strideRhs = rhsBatch ? gemm.k * gemm.n : 0;
  gemm.strideOut = gemm.m * gemm.n;
  gemm.ldc = gemm.n;
  if (swapped) {
    // out^T = rhs^T * lhs^T: the output's memory is [N, M].
    std::swap(gemm.lhs, gemm.rhs);
    std::swap(gemm.lhsElement, gemm.rhsElement);
    std::swap(gemm.m, gemm.n);
    std::swap(gemm.lda, gemm.ldb);
    std::swap(gemm.strideLhs, gemm.strideRhs);
    bool transLhs = !gemm.transRhs, transRhs = !gemm.transLhs;
    gemm.transLhs = transLhs;
    gemm.transRhs = transRhs;
    gemm.ldc = gemm.n;
  }
  return gemm;
}

bool mlir::tp::emit::isZeroFill(Value init) {
  // tp-offset-vocab-lookups leaves an scf.if choosing between two uses of
  // the same fill.
  if (auto ifOp = init.getDefiningOp<scf::IfOp>()) {
    unsigned index = cast<OpResult>(init).getResultNumber();
    Value a = ifOp.thenYield().getOperand(index);
    if (ifOp.getElseRegion().empty() ||
        a != ifOp.elseYield().getOperand(index))
      return false;
    init = a;
  }
  auto fill = init.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return false;
  return matchPattern(fill.getInputs()[0], m_AnyZeroFloat()) &&
         !matchPattern(fill.getInputs()[0], m_NegZeroFloat());
}

/// Up to this many rows, a product with a weight packs the weight once per
/// rank (tp::rt::weightGemm) instead of letting BLAS pack it on every call.
/// bench/cpu_throughput.py and bench/generation.py show the effect; past
/// it, OpenBLAS's own packing is amortised over enough rows, and a packed
/// copy's memory is not worth it. The header has the same bound
/// (packed::Vector::kMaxRows).
static constexpr int64_t kPackedWeightMaxRows = 128;

/// A weight packed into its own memory needs its columns to fill whole
/// panels: 16 (AVX2) and 32 (AVX-512) divide this.
static constexpr int64_t kPackedInPlaceColumns = 32;

/// The name of the weight argument `value` is, or is a reshape of (the same
/// memory on every call); null for anything else, and for every weight of
/// a module whose weights an optimizer updates between runs
/// (tp.mutable_weights), which no packed copy may outlive.
static StringAttr residentWeight(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    if (!isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(
            def))
      return {};
    value = def->getOperand(0);
  }
  auto arg = cast<BlockArgument>(value);
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  if (!func || !arg.getOwner()->isEntryBlock())
    return {};
  auto module = func->getParentOfType<ModuleOp>();
  if (module && module->hasAttr(tp::TPDialect::kMutableWeightsAttrName))
    return {};
  return func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                           tp::TPDialect::kWeightAttrName);
}

static bool isNarrowFloat(Type element) {
  return element.isBF16() || element.isF16();
}

/// A product the packed kernel can take with `weight` as its right-hand
/// side: an f32 result, one matrix, A as stored (f32, or bf16/f16 widened
/// first), the weight dense, stored in f32, bf16 or f16 (which the kernel
/// widens as it loads them).
static bool isPackableProduct(const Gemm &gemm, Value weight) {
  auto readable = [](Type element) {
    return element.isF32() || isNarrowFloat(element);
  };
  return gemm.rhs == weight && gemm.lhs != weight && gemm.batch == 1 &&
         !gemm.transLhs && readable(gemm.lhsElement) &&
         readable(gemm.rhsElement) &&
         gemm.ldb == (gemm.transRhs ? gemm.k : gemm.n) &&
         CppEmitter::numElements(weight) == gemm.k * gemm.n;
}

/// `name`, a pointer to the weight, as the packed kernel's weight type: its
/// own for f32 and f16 (_Float16), tp::rt::BF16Bits for model.cpp's
/// BFloat16.
static std::string packedWeightPointer(const std::string &name,
                                       Type element) {
  if (element.isBF16())
    return "reinterpret_cast<const tp::rt::BF16Bits *>(" + name + ")";
  return name;
}

void CppEmitter::findWeightsPackedInPlace() {
  // Per weight name (the prefill and decode functions of a generation
  // artifact take the same weights): the layout every use reads it in, or
  // none once a use is not a packable product or reads another layout.
  struct Layout {
    bool packable = true;
    std::optional<std::tuple<int64_t, int64_t, bool>> key; // k, n, trans
  };
  llvm::StringMap<Layout> layouts;
  for (auto func : module.getOps<func::FuncOp>()) {
    for (BlockArgument arg : func.getArguments()) {
      StringAttr name = residentWeight(arg);
      if (!name)
        continue;
      Layout &layout = layouts[name.getValue()];
      SmallVector<Value> views{arg};
      while (!views.empty()) {
        Value view = views.pop_back_val();
        for (OpOperand &use : view.getUses()) {
          Operation *user = use.getOwner();
          if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
                  tensor::CastOp>(user)) {
            views.push_back(user->getResult(0));
            continue;
          }
          auto generic = dyn_cast<linalg::GenericOp>(user);
          FailureOr<Gemm> gemm = failure();
          if (generic && !fusedIntoAttention.contains(generic) &&
              !attentionAt.count(generic) &&
              getElementTypeOrSelf(generic.getResult(0).getType()).isF32())
            gemm = matchGemm(generic);
          if (failed(gemm) || !isPackableProduct(*gemm, view) ||
              gemm->n % kPackedInPlaceColumns != 0) {
            layout.packable = false;
            continue;
          }
          std::tuple<int64_t, int64_t, bool> key{gemm->k, gemm->n,
                                                 gemm->transRhs};
          if (layout.key && *layout.key != key)
            layout.packable = false;
          layout.key = key;
        }
      }
    }
  }
  for (auto &[name, layout] : layouts)
    if (layout.packable && layout.key)
      weightsPackedInPlace.insert(name);
}

/// Whether `value` exists before `op` runs: defined by an op before it (or
/// before the op of its block that holds it), or a block argument there.
static bool availableBefore(Value value, Operation *op) {
  Block *block = value.getParentBlock();
  Operation *ancestor = block->findAncestorOpInBlock(*op);
  if (!ancestor)
    return false;
  Operation *def = value.getDefiningOp();
  return !def || def->isBeforeInBlock(ancestor);
}

/// The elementwise generic that is the only reader of `op`'s product
/// (directly or through reshapes), when it can run as the packed kernel's
/// epilogue on each block of the product's columns as it is final: its
/// last loop runs over the product's columns and the others over its rows,
/// it reads the product element for element, everything else it reads
/// exists before the product, and its outputs are fresh. It then moves up
/// to the product, which changes no value: it reads nothing written after.
/// A row group after the product that holds it leaves it out
/// (computedByProduct).
static linalg::GenericOp findEpilogue(CppEmitter &e, linalg::GenericOp op,
                                      const Gemm &gemm) {
  if (gemm.batch != 1 || gemm.ldc != gemm.n)
    return {};
  Value product = op.getResult(0);
  while (product.hasOneUse() &&
         isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
             *product.getUsers().begin()))
    product = product.getUsers().begin()->getResult(0);
  if (!product.hasOneUse())
    return {};
  auto user = dyn_cast<linalg::GenericOp>(*product.getUsers().begin());
  if (!user || user->getBlock() != op->getBlock() ||
      !user.hasPureTensorSemantics() || user.getNumLoops() == 0 ||
      user.getNumParallelLoops() != user.getNumLoops() ||
      e.fusedIntoAttention.contains(user) || e.attentionAt.count(user))
    return {};
  SmallVector<int64_t> ranges = user.getStaticLoopRanges();
  if (ranges.back() != gemm.n ||
      cast<RankedTensorType>(product.getType()).getShape() !=
          ArrayRef<int64_t>(ranges) ||
      CppEmitter::numElements(product) != gemm.m * gemm.n)
    return {};
  for (OpOperand &operand : user->getOpOperands()) {
    if (operand.get() == product) {
      if (!user.getMatchingIndexingMap(&operand).isIdentity())
        return {};
    } else if (user.isDpsInit(&operand)) {
      if (user.payloadUsesValueFromOperand(&operand))
        return {};
    } else if (!availableBefore(operand.get(), op)) {
      return {};
    }
  }
  llvm::SetVector<Value> captured;
  getUsedValuesDefinedAbove(user.getRegion(), captured);
  if (!llvm::all_of(captured, [&](Value v) { return availableBefore(v, op); }))
    return {};
  return user;
}

static LogicalResult emitGemm(CppEmitter &e, linalg::GenericOp op,
                              const Gemm &gemm) {
  Value out = op.getResult(0);
  Value init = op.getDpsInits()[0];
  bool overwrite = isZeroFill(init);
  if (!overwrite && e.writesInitInPlace(op, op.getDpsInitsMutable()[0])) {
    e.alias(out, init);
  } else {
    if (failed(e.allocate(out, op)))
      return failure();
    if (!overwrite)
      e.copy(out, init);
  }
  bool isDouble = getElementTypeOrSelf(out.getType()).isF64();
  // A product with a weight that stays put takes the packed kernel, which
  // reads a bf16/f16 weight as stored (tp-convert-dtype) and widens it in
  // registers; only A, a few rows, is widened into an f32 copy first.
  StringAttr weight = residentWeight(gemm.rhs);
  bool inPlace = weight && e.weightsPackedInPlace.contains(weight.getValue()) &&
                 isPackableProduct(gemm, gemm.rhs);
  bool narrowRhs = isNarrowFloat(gemm.rhsElement);
  bool packedCopy = !inPlace && weight && !isDouble && gemm.batch == 1 &&
                    !gemm.transLhs && gemm.lhs != gemm.rhs &&
                    (gemm.m <= kPackedWeightMaxRows || narrowRhs) &&
                    (gemm.m > 1 || narrowRhs);
  // The elementwise op that reads the product (a bias add, an activation)
  // runs on each block of its columns while it is in cache; its results
  // are allocated here, outside the scope of the widened copies below.
  linalg::GenericOp epilogue;
  if (inPlace || packedCopy)
    epilogue = findEpilogue(e, op, gemm);
  if (epilogue && failed(e.prepareGenericResults(epilogue)))
    return failure();
  // Other f16/bf16 operands are widened into f32 copies for sgemm.
  std::string lhsName = e.name(gemm.lhs), rhsName = e.name(gemm.rhs);
  bool narrow = gemm.lhsElement.getIntOrFloatBitWidth() < 32 ||
                gemm.rhsElement.getIntOrFloatBitWidth() < 32;
  if (narrow) {
    e.os << "{\n";
    auto widen = [&](Value operand, Type element, std::string &text) {
      if (element.getIntOrFloatBitWidth() == 32)
        return;
      std::string wide = text + "Wide";
      e.os << "std::vector<float> " << wide << "("
           << CppEmitter::numElements(operand) << ");\n";
      e.os << "for (std::size_t i = 0; i < " << wide << ".size(); ++i)\n  "
           << wide << "[i] = static_cast<float>(" << text << "[i]);\n";
      text = wide + ".data()";
    };
    widen(gemm.lhs, gemm.lhsElement, lhsName);
    if (gemm.rhs == gemm.lhs)
      rhsName = lhsName;
    else if (!inPlace && !packedCopy)
      widen(gemm.rhs, gemm.rhsElement, rhsName);
  }
  auto close = [&] {
    if (narrow)
      e.os << "}\n";
    return success();
  };
  auto trans = [](bool t) { return t ? "CblasTrans" : "CblasNoTrans"; };
  std::string one = isDouble ? "1.0" : "1.0f";
  std::string beta = overwrite ? (isDouble ? "0.0" : "0.0f") : one;
  bool batched = gemm.batch > 1;
  auto pointer = [&](Value v, int64_t stride) {
    std::string text = v == gemm.lhs   ? lhsName
                       : v == gemm.rhs ? rhsName
                                       : e.name(v);
    return text + (stride && batched
                            ? " + b * " + std::to_string(stride) + "LL"
                            : std::string());
  };
  e.os << "// ";
  if (batched)
    e.os << gemm.batch << " x ";
  e.os << "(" << gemm.m << " x " << gemm.k << ") * (" << gemm.k << " x "
       << gemm.n << ")\n";
  if (batched)
    e.os << "for (std::int64_t b = 0; b < " << gemm.batch << "; ++b)\n  ";
  // A weight that only such products read is packed into its own memory,
  // and every product with it, of any number of rows, reads the panels.
  // Otherwise a product of a few rows packs a copy of the weight once per
  // rank (one row of an f32 weight is a matrix-vector product below).
  if (inPlace || packedCopy) {
    std::string epilogueName;
    if (epilogue) {
      // The reshapes between the product and its reader view its buffer;
      // they are emitted after this, the epilogue reads through them now.
      for (Value view = out; view.hasOneUse() && *view.getUsers().begin() !=
                                                     epilogue.getOperation();) {
        Value reshaped = view.getUsers().begin()->getResult(0);
        e.alias(reshaped, view);
        view = reshaped;
      }
      epilogueName = "epilogue_" + e.name(epilogue.getResult(0));
      e.os << "// " << CppEmitter::describe(epilogue)
           << ", on each block of the product's columns as it is final\n";
      e.os << "auto " << epilogueName
           << " = [&](std::int64_t first, std::int64_t count) "
              "__attribute__((noinline)) {\n";
      e.os.indent();
      if (failed(e.emitGenericLoops(epilogue, {},
                                    std::make_pair("first", "count"))))
        return failure();
      e.os.unindent();
      e.os << "};\n";
      e.inGemmEpilogue.insert(epilogue);
    }
    e.os << "tp::rt::" << (inPlace ? "residentWeightGemm" : "weightGemm")
         << "(context, " << gemm.m << ", " << gemm.n << ", " << gemm.k << ", "
         << lhsName << ", " << gemm.lda << ", "
         << packedWeightPointer(rhsName, gemm.rhsElement) << ", " << gemm.ldb
         << ", " << (gemm.transRhs ? "true" : "false") << ", " << e.name(out)
         << ", " << gemm.ldc << ", " << (overwrite ? "false" : "true");
    if (!epilogueName.empty())
      e.os << ", tp::rt::Epilogue::of(" << epilogueName << ")";
    e.os << ");\n";
    return close();
  }
  // One row or one column (a decode step's projections: one token): a
  // matrix-vector product. sgemm would pack the whole weight on every call,
  // which costs more than the product itself.
  if (gemm.m == 1 || gemm.n == 1) {
    bool row = gemm.m == 1;
    // The matrix and how it is stored; the vector is contiguous either way.
    Value matrix = row ? gemm.rhs : gemm.lhs;
    Value vector = row ? gemm.lhs : gemm.rhs;
    int64_t matrixStride = row ? gemm.strideRhs : gemm.strideLhs;
    int64_t vectorStride = row ? gemm.strideLhs : gemm.strideRhs;
    // Row: y[N] = op(B)^T x, B stored [K, N] (or [N, K] if transposed);
    // column: y[M] = op(A) x, A stored [M, K] (or [K, M]).
    bool stored = row ? !gemm.transRhs : gemm.transLhs;
    int64_t rows = row ? (gemm.transRhs ? gemm.n : gemm.k)
                       : (gemm.transLhs ? gemm.k : gemm.m);
    int64_t cols = row ? (gemm.transRhs ? gemm.k : gemm.n)
                       : (gemm.transLhs ? gemm.m : gemm.k);
    int64_t ld = row ? gemm.ldb : gemm.lda;
    e.os << "cblas_" << (isDouble ? "d" : "s") << "gemv(CblasRowMajor, "
         << (stored ? "CblasTrans" : "CblasNoTrans") << ", " << rows << ", "
         << cols << ", " << one << ", " << pointer(matrix, matrixStride) << ", "
         << ld << ", " << pointer(vector, vectorStride) << ", 1, " << beta
         << ", " << pointer(out, gemm.strideOut) << ", 1);\n";
    return close();
  }
  e.os << "cblas_" << (isDouble ? "d" : "s") << "gemm(CblasRowMajor, "
       << trans(gemm.transLhs) << ", " << trans(gemm.transRhs) << ", "
       << gemm.m << ", " << gemm.n << ", " << gemm.k << ", " << one << ", "
       << pointer(gemm.lhs, gemm.strideLhs) << ", " << gemm.lda << ", "
       << pointer(gemm.rhs, gemm.strideRhs) << ", " << gemm.ldb << ", "
       << beta << ", " << pointer(out, gemm.strideOut) << ", " << gemm.ldc
       << ");\n";
  return close();
}

//===----------------------------------------------------------------------===//
// Lookups: sum over r of select(key == index(r) + offset, x, 0)
//===----------------------------------------------------------------------===//

/// Ops of `body` that `value` depends on; fails if any depends on `dim`
/// through linalg.index or an operand indexed by `dim`.
static bool collectInvariantSlice(linalg::GenericOp op, Value value,
                                  unsigned dim,
                                  llvm::SetVector<Operation *> &slice) {
  Block &body = op.getRegion().front();
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (arg.getOwner() != &body)
      return true;
    OpOperand *operand = op.getMatchingOpOperand(arg);
    if (op.isDpsInit(operand))
      return false;
    return !op.getMatchingIndexingMap(operand).isFunctionOfDim(dim);
  }
  Operation *def = value.getDefiningOp();
  if (def->getBlock() != &body)
    return true;
  if (auto index = dyn_cast<linalg::IndexOp>(def))
    if (index.getDim() == dim)
      return false;
  for (Value operand : def->getOperands())
    if (!collectInvariantSlice(op, operand, dim, slice))
      return false;
  slice.insert(def);
  return true;
}

/// The select(cond, x, 0) that `contribution` is, or that it multiplies by
/// (x * select(cond, c, 0)): zero unless cond holds.
static arith::SelectOp getZeroUnlessSelect(Value contribution) {
  auto zeroUnless = [](Value v) -> arith::SelectOp {
    auto select = v.getDefiningOp<arith::SelectOp>();
    if (!select || !matchPattern(select.getFalseValue(), m_AnyZeroFloat()))
      return {};
    return select;
  };
  if (arith::SelectOp select = zeroUnless(contribution))
    return select;
  auto mul = contribution.getDefiningOp<arith::MulFOp>();
  if (!mul)
    return {};
  if (arith::SelectOp select = zeroUnless(mul.getRhs()))
    return select;
  return zeroUnless(mul.getLhs());
}

std::optional<Lookup> mlir::tp::emit::matchLookup(linalg::GenericOp op,
                                                  bool allowScatter) {
  if (op.getNumDpsInits() != 1)
    return std::nullopt;
  Block &body = op.getRegion().front();
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add)
    return std::nullopt;
  BlockArgument out = body.getArguments().back();
  Value other = add.getLhs() == out ? add.getRhs() : add.getLhs();
  if ((add.getLhs() != out && add.getRhs() != out) || other == out)
    return std::nullopt;
  arith::SelectOp select = getZeroUnlessSelect(other);
  if (!select)
    return std::nullopt;
  auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq)
    return std::nullopt;
  // The dim the compare reads: the only reduction (a gather), or a
  // parallel dim no input reads (a scatter into the output).
  SmallVector<unsigned> reductions;
  op.getReductionDims(reductions);
  // (The reduction's, if both sides are indices.)
  std::optional<unsigned> compared;
  auto consider = [&](Value v) {
    auto index = v.getDefiningOp<linalg::IndexOp>();
    if (index && (!compared || (reductions.size() == 1 &&
                                index.getDim() == reductions.front())))
      compared = index.getDim();
  };
  for (Value side : {cmp.getLhs(), cmp.getRhs()}) {
    consider(side);
    if (auto addi = side.getDefiningOp<arith::AddIOp>()) {
      consider(addi.getLhs());
      consider(addi.getRhs());
    }
  }
  if (!compared)
    return std::nullopt;
  unsigned dim = *compared;
  bool scatter = false;
  if (reductions.size() != 1 || reductions.front() != dim) {
    if (!allowScatter || llvm::is_contained(reductions, dim) ||
        llvm::any_of(op.getDpsInputOperands(), [&](OpOperand *input) {
          return isa<RankedTensorType>(input->get().getType()) &&
                 op.getMatchingIndexingMap(input).isFunctionOfDim(dim);
        }))
      return std::nullopt;
    scatter = true;
  }
  // One side is index(dim) [+ offset], the other is invariant.
  auto asIndexPlusOffset = [&](Value v, Value &offset) {
    offset = nullptr;
    if (auto index = v.getDefiningOp<linalg::IndexOp>())
      return index.getDim() == dim;
    auto addi = v.getDefiningOp<arith::AddIOp>();
    if (!addi)
      return false;
    for (auto [a, b] : {std::pair(addi.getLhs(), addi.getRhs()),
                        std::pair(addi.getRhs(), addi.getLhs())}) {
      auto index = a.getDefiningOp<linalg::IndexOp>();
      if (index && index.getDim() == dim &&
          (!b.getDefiningOp() || b.getDefiningOp()->getBlock() != &body)) {
        offset = b;
        return true;
      }
    }
    return false;
  };
  Lookup lookup;
  lookup.dim = dim;
  lookup.scatter = scatter;
  for (auto [indexSide, keySide] :
       {std::pair(cmp.getLhs(), cmp.getRhs()),
        std::pair(cmp.getRhs(), cmp.getLhs())}) {
    Value offset;
    if (!asIndexPlusOffset(indexSide, offset))
      continue;
    llvm::SetVector<Operation *> slice;
    if (!collectInvariantSlice(op, keySide, dim, slice))
      continue;
    if (!keySide.getType().isIndex())
      continue;
    lookup.key = keySide;
    lookup.offset = offset;
    lookup.keyOps = std::move(slice);
    return lookup;
  }
  return std::nullopt;
}

/// Lanes of a lane reduction: one AVX-512 vector of f32, two AVX2 ones.
static constexpr int64_t kReductionLanes = 16;

namespace {
/// A reduction over the innermost loop into one f32 accumulator per output
/// element, by a combiner combineExpr knows (a norm's sums, a softmax's max
/// and sum outside fused attention). A C++ compiler must keep such a loop
/// scalar: it may not reorder float additions, and it does not see a
/// NaN-propagating max as a reduction. So it is emitted as
/// kReductionLanes partial results, each over every kReductionLanes-th
/// element from the combiner's identity, combined pairwise at the end and
/// then into the accumulator; the loop over the lanes vectorises. The
/// order of the additions is fixed by the code, the same on every run and
/// every rank; a max or min is exactly the sequential one.
struct LaneReduction {
  unsigned dim;
  Operation *combine;
  BlockArgument accumulator;
};
} // namespace

static std::optional<LaneReduction> matchLaneReduction(linalg::GenericOp op) {
  SmallVector<unsigned> reductions;
  op.getReductionDims(reductions);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (reductions.size() != 1 || op.getNumDpsInits() != 1 ||
      reductions.front() != ranges.size() - 1)
    return std::nullopt;
  unsigned dim = reductions.front();
  int64_t range = ranges[dim];
  if (ShapedType::isDynamic(range) || range < 2 * kReductionLanes ||
      range % kReductionLanes != 0)
    return std::nullopt;
  Block &body = op.getRegion().front();
  BlockArgument accumulator = body.getArguments().back();
  if (!accumulator.getType().isF32() || !accumulator.hasOneUse())
    return std::nullopt;
  Operation *combine = body.getTerminator()->getOperand(0).getDefiningOp();
  if (!combine || combine->getBlock() != &body ||
      combineExpr(combine, "", "").empty() ||
      (combine->getOperand(0) == accumulator) ==
          (combine->getOperand(1) == accumulator))
    return std::nullopt;
  return LaneReduction{dim, combine, accumulator};
}

//===----------------------------------------------------------------------===//
// Loop nests
//===----------------------------------------------------------------------===//

LogicalResult CppEmitter::emitGeneric(linalg::GenericOp op) {
  if (!op.hasPureTensorSemantics())
    return op.emitError("code generation expects linalg on tensors");
  if (fusedIntoAttention.contains(op)) {
    os << "// computed by the fused attention below, never stored\n";
    return success();
  }
  if (attentionAt.count(op))
    return emitFusedAttention(op);
  if (inGemmEpilogue.contains(op)) {
    os << "// computed in the epilogue of the product above\n";
    return success();
  }
  if (FailureOr<Gemm> gemm = matchGemm(op); succeeded(gemm))
    return emitGemm(*this, op, *gemm);
  if (failed(prepareGenericResults(op)))
    return failure();
  os << "TP_LOOP_NEST {\n";
  os.indent();
  if (failed(emitGenericLoops(op, {})))
    return failure();
  os.unindent();
  os << "}();\n";
  return success();
}

LogicalResult CppEmitter::prepareGenericResults(linalg::GenericOp op) {
  // Results: the init's own buffer where it is free to take them, else
  // fresh buffers, holding the init where the payload reads it.
  for (OpOperand &init : op.getDpsInitsMutable()) {
    Value result = op.getTiedOpResult(&init);
    if (writesInitInPlace(op, init)) {
      os << "// accumulates in place into " << name(init.get()) << "\n";
      alias(result, init.get());
    } else {
      if (failed(allocate(result, op)))
        return failure();
      if (op.payloadUsesValueFromOperand(&init))
        copy(result, init.get());
    }
  }
  return success();
}

LogicalResult CppEmitter::emitGenericLoops(
    linalg::GenericOp op, ArrayRef<std::string> rows,
    std::optional<std::pair<std::string, std::string>> columns) {
  std::optional<Lookup> lookup = matchLookup(op, /*allowScatter=*/true);
  assert((!lookup || rows.empty()) && "a lookup is never row-fused");
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  // The row loops of a row group are the group's (EmitRowGroups.cpp).
  SmallVector<std::string> indices(rows);
  for (unsigned i = rows.size(); i < ranges.size(); ++i)
    indices.push_back("i" + std::to_string(nextId) + "_" + std::to_string(i));
  ++nextId;

  Block &body = op.getRegion().front();
  // Restrict-qualified views tell the compiler outputs alias nothing.
  SmallVector<std::string> operandPtr;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<RankedTensorType>(operand.get().getType())) {
      operandPtr.push_back("");
      continue;
    }
    FailureOr<std::string> type = elementTypeOf(operand.get(), op);
    if (failed(type))
      return failure();
    std::string ptr = "p" + std::to_string(operand.getOperandNumber());
    if (op.isDpsInit(&operand)) {
      Value result = op.getTiedOpResult(&operand);
      os << *type << " *__restrict " << ptr << " = " << name(result) << ";\n";
    } else {
      os << "const " << *type << " *" << ptr << " = " << name(operand.get())
         << ";\n";
    }
    operandPtr.push_back(ptr);
  }

  // Loads of block arguments, bound as scalars.
  auto emitLoad = [&](BlockArgument arg) -> LogicalResult {
    OpOperand *operand = op.getMatchingOpOperand(arg);
    Value value = operand->get();
    FailureOr<std::string> type = scalarTypeFor(arg.getType(), op);
    if (failed(type))
      return failure();
    std::string text = bind(arg, "s");
    if (!isa<RankedTensorType>(value.getType())) {
      os << "const " << *type << " " << text << " = " << name(value) << ";\n";
      return success();
    }
    auto shape = cast<RankedTensorType>(value.getType()).getShape();
    os << "const " << *type << " " << text << " = "
       << operandPtr[operand->getOperandNumber()] << "["
       << offsetExpr(op.getMatchingIndexingMap(operand), shape, indices)
       << "];\n";
    return success();
  };
  auto emitBodyOp = [&](Operation &inner) -> LogicalResult {
    if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
      bindTo(index.getResult(), indices[index.getDim()]);
      return success();
    }
    return emitScalarOp(&inner);
  };
  auto argUsesDim = [&](BlockArgument arg, unsigned dim) {
    OpOperand *operand = op.getMatchingOpOperand(arg);
    return isa<RankedTensorType>(operand->get().getType()) &&
           op.getMatchingIndexingMap(operand).isFunctionOfDim(dim);
  };
  auto emitStores = [&]() {
    auto yield = cast<linalg::YieldOp>(body.getTerminator());
    for (auto [i, value] : llvm::enumerate(yield.getValues())) {
      OpOperand *init = op.getDpsInitOperand(i);
      auto shape = cast<RankedTensorType>(init->get().getType()).getShape();
      os << operandPtr[init->getOperandNumber()] << "["
         << offsetExpr(op.getMatchingIndexingMap(init), shape, indices)
         << "] = " << name(value) << ";\n";
    }
  };

  std::optional<LaneReduction> lanes;
  if (!lookup)
    lanes = matchLaneReduction(op);
  for (auto [i, range] : llvm::enumerate(ranges)) {
    if (i < rows.size() || (lookup && i == lookup->dim) ||
        (lanes && i == lanes->dim))
      continue;
    if (columns && i + 1 == ranges.size()) {
      os << "for (std::int64_t " << indices[i] << " = " << columns->first
         << "; " << indices[i] << " < " << columns->first << " + "
         << columns->second << "; ++" << indices[i] << ")\n";
      continue;
    }
    os << "for (std::int64_t " << indices[i] << " = 0; " << indices[i]
       << " < " << range << "; ++" << indices[i] << ")\n";
  }
  os << "{\n";
  os.indent();
  if (lanes) {
    // The partial results, the element loop in blocks of kReductionLanes
    // with the body once per lane, then the lanes pairwise.
    std::string index = indices[lanes->dim];
    std::string partial = index + "_lanes", block = index + "_block",
                lane = index + "_lane";
    os << "float " << partial << "[" << kReductionLanes << "];\n";
    os << "std::fill_n(" << partial << ", " << kReductionLanes << ", "
       << identityExpr(lanes->combine, "float") << ");\n";
    os << "for (std::int64_t " << block << " = 0; " << block << " < "
       << ranges[lanes->dim] << "; " << block << " += " << kReductionLanes
       << ")\n";
    os << "for (std::int64_t " << lane << " = 0; " << lane << " < "
       << kReductionLanes << "; ++" << lane << ") {\n";
    os.indent();
    os << "const std::int64_t " << index << " = " << block << " + " << lane
       << ";\n";
    std::string slot = partial + "[" + lane + "]";
    bindTo(lanes->accumulator, slot);
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty() && arg != lanes->accumulator)
        if (failed(emitLoad(arg)))
          return failure();
    for (Operation &inner : body.without_terminator())
      if (failed(emitBodyOp(inner)))
        return failure();
    os << slot << " = " << name(lanes->combine->getResult(0)) << ";\n";
    os.unindent();
    os << "}\n";
    os << "for (std::int64_t " << lane << " = " << kReductionLanes / 2 << "; "
       << lane << " > 0; " << lane << " /= 2)\n";
    os << "  for (std::int64_t l = 0; l < " << lane << "; ++l)\n";
    os << "    " << partial << "[l] = "
       << combineExpr(lanes->combine, partial + "[l]",
                      partial + "[l + " + lane + "]")
       << ";\n";
    // Into the accumulator, which holds the init.
    OpOperand *init = op.getDpsInitOperand(0);
    auto shape = cast<RankedTensorType>(init->get().getType()).getShape();
    std::string element =
        operandPtr[init->getOperandNumber()] + "[" +
        offsetExpr(op.getMatchingIndexingMap(init), shape, indices) + "]";
    os << element << " = "
       << combineExpr(lanes->combine, element, partial + "[0]") << ";\n";
  } else if (lookup) {
    // Everything the key needs, then the one iteration that contributes.
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty() && !argUsesDim(arg, lookup->dim) &&
          !op.isDpsInit(op.getMatchingOpOperand(arg)))
        if (failed(emitLoad(arg)))
          return failure();
    for (Operation *inner : lookup->keyOps)
      if (failed(emitBodyOp(*inner)))
        return failure();
    std::string index = indices[lookup->dim];
    os << "const std::int64_t " << index << " = " << name(lookup->key);
    if (lookup->offset)
      os << " - " << name(lookup->offset);
    os << ";\nif (" << index << " >= 0 && " << index << " < "
       << ranges[lookup->dim] << ") {\n";
    os.indent();
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty() && !names.count(arg))
        if (failed(emitLoad(arg)))
          return failure();
    for (Operation &inner : body.without_terminator())
      if (!lookup->keyOps.contains(&inner))
        if (failed(emitBodyOp(inner)))
          return failure();
    emitStores();
    os.unindent();
    os << "}\n";
  } else {
    for (BlockArgument arg : body.getArguments())
      if (!arg.use_empty())
        if (failed(emitLoad(arg)))
          return failure();
    for (Operation &inner : body.without_terminator())
      if (failed(emitBodyOp(inner)))
        return failure();
    emitStores();
  }
  os.unindent();
  os << "}\n";
  return success();
}

linalg::GenericOp mlir::tp::emit::roundingToBF16Of(linalg::GenericOp gemm) {
  Value sum = gemm.getResult(0);
  if (!sum.hasOneUse() || !getElementTypeOrSelf(sum.getType()).isF32())
    return {};
  auto round = dyn_cast<linalg::GenericOp>(*sum.getUsers().begin());
  if (!round || round.getNumDpsInputs() != 1 || round.getNumDpsInits() != 1 ||
      round.getDpsInputs()[0] != sum ||
      round.getNumParallelLoops() != round.getNumLoops() ||
      !llvm::all_of(round.getIndexingMapsArray(),
                    [](AffineMap map) { return map.isIdentity(); }) ||
      !getElementTypeOrSelf(round.getResult(0).getType()).isBF16())
    return {};
  // yield truncf(select(|x| == inf, x, min(max(x, lo), hi))), x the input.
  Block &body = round.getRegion().front();
  Value x = body.getArgument(0);
  auto trunc =
      body.getTerminator()->getOperand(0).getDefiningOp<arith::TruncFOp>();
  auto select =
      trunc ? trunc.getIn().getDefiningOp<arith::SelectOp>() : nullptr;
  auto min = select ? select.getFalseValue().getDefiningOp<arith::MinimumFOp>()
                    : nullptr;
  auto max = min ? min.getLhs().getDefiningOp<arith::MaximumFOp>() : nullptr;
  auto isInf =
      select ? select.getCondition().getDefiningOp<arith::CmpFOp>() : nullptr;
  auto abs = isInf ? isInf.getLhs().getDefiningOp<math::AbsFOp>() : nullptr;
  if (!max || !abs || select.getTrueValue() != x || max.getLhs() != x ||
      abs.getOperand() != x ||
      isInf.getPredicate() != arith::CmpFPredicate::OEQ ||
      !matchPattern(isInf.getRhs(), m_PosInfFloat()))
    return {};
  return round;
}

bool mlir::tp::emit::onlyFeedsGemms(linalg::FillOp fill) {
  Value result = fill.getResult(0);
  if (result.use_empty() || !isZeroFill(result))
    return false;
  return llvm::all_of(result.getUses(), [](OpOperand &use) {
    auto generic = dyn_cast<linalg::GenericOp>(use.getOwner());
    return generic && generic.isDpsInit(&use) && succeeded(matchGemm(generic));
  });
}

LogicalResult CppEmitter::emitFill(linalg::FillOp op) {
  if (!op.hasPureTensorSemantics())
    return op.emitError("code generation expects linalg on tensors");
  Value result = op.getResult(0);
  bool unread = llvm::all_of(op->getUsers(), [&](Operation *user) {
    return fusedIntoAttention.contains(user) || attentionAt.count(user);
  });
  if (unread && !op->use_empty()) {
    os << "// only the init of ops that fused attention replaces: no buffer\n";
    bindTo(result, "nullptr");
    return success();
  }
  if (onlyFeedsGemms(op)) {
    os << "// zeros for BLAS's beta = 0: nothing to store\n";
    bindTo(result, "nullptr");
    return success();
  }
  if (failed(allocate(result, op)))
    return failure();
  os << "std::fill_n(" << name(result) << ", " << numElements(result) << ", "
     << name(op.getInputs()[0]) << ");\n";
  return success();
}
