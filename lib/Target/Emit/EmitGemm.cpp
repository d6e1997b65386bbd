//===- EmitGemm.cpp - linalg.generic as BLAS or packed GEMM calls ---------===//
//
// A generic that kernel selection made a GEMM (#tp.kernel<gemm>) becomes a
// call: cblas_sgemm/dgemm when it is a contraction whose operands are
// row-major matrices up to a transpose; cblas_?gemv for one row or column;
// tp::rt::weightGemm / residentWeightGemm (tp_packed_gemm.h) for a few rows
// times a weight, which it packs once per rank, in the weight's own f32,
// bf16 or f16. An elementwise generic that reads only the product is its
// epilogue, applied block by block as the product is written.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"
#include "LinalgMatchers.h"
#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"

using namespace mlir;
using namespace mlir::tp::emit;

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
static std::string packedWeightPointer(const std::string &name, Type element) {
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

LogicalResult mlir::tp::emit::emitGemm(CppEmitter &e, linalg::GenericOp op,
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
    return text + (stride && batched ? " + b * " + std::to_string(stride) + "LL"
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
       << trans(gemm.transLhs) << ", " << trans(gemm.transRhs) << ", " << gemm.m
       << ", " << gemm.n << ", " << gemm.k << ", " << one << ", "
       << pointer(gemm.lhs, gemm.strideLhs) << ", " << gemm.lda << ", "
       << pointer(gemm.rhs, gemm.strideRhs) << ", " << gemm.ldb << ", " << beta
       << ", " << pointer(out, gemm.strideOut) << ", " << gemm.ldc << ");\n";
  return close();
}
