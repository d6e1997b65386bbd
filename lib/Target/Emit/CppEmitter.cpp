//===- CppEmitter.cpp - module and function structure ---------------------===//
//
// Functions, names, buffer ownership and the dispatch to the op emitters.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"
#include "LinalgMatchers.h"
#include "tp/Target/Artifact/ModelSignature.h"

#include "tp/Dialect/TP/Grids.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Target/Emit/EmitCpp.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/ErrorHandling.h"

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::emit;

//===----------------------------------------------------------------------===//
// Names and types
//===----------------------------------------------------------------------===//

CppEmitter::CppEmitter(ModuleOp module, raw_indented_ostream &os)
    : os(os), module(module) {
  // A pipeline stage's ranks follow the tensor-parallel ranks of the stages
  // before it.
  int64_t tpRanks = 1;
  for (auto grid : module.getOps<shard::GridOp>())
    if (getGridRole(grid) != GridRole::Pipeline)
      for (int64_t size : grid.getShape())
        tpRanks *= size;
  for (auto grid : module.getOps<shard::GridOp>())
    gridBaseStride[grid.getSymName()] =
        getGridRole(grid) == GridRole::Pipeline ? tpRanks : 1;
}

std::string CppEmitter::name(Value value) const {
  auto it = names.find(value);
  if (it != names.end())
    return it->second;
  // An emitter bug, never bad input: an op's code references a value whose
  // code was skipped or not yet written. Say which, rather than read past
  // the map's end (which was an "out of memory" abort).
  std::string text;
  llvm::raw_string_ostream textStream(text);
  value.printAsOperand(textStream, OpPrintingFlags());
  if (Operation *def = value.getDefiningOp())
    textStream << " (" << def->getName() << " at " << def->getLoc() << ")";
  llvm::report_fatal_error(llvm::Twine("code generation: value ") + text +
                           " is used before it was emitted");
}

std::string CppEmitter::bind(Value value, StringRef prefix) {
  std::string text = (prefix + Twine(nextId++)).str();
  names[value] = text;
  return text;
}

std::string CppEmitter::scalarType(Type type) {
  if (type.isF32())
    return "float";
  if (type.isF64())
    return "double";
  // Named alike on both targets: each prelude says what the names are.
  if (type.isF16())
    return "Float16";
  if (type.isBF16())
    return "BFloat16";
  if (type.isIndex())
    return "std::int64_t";
  if (auto integer = dyn_cast<IntegerType>(type)) {
    unsigned width = integer.getWidth();
    if (width == 1)
      return "bool";
    if (width != 8 && width != 16 && width != 32 && width != 64)
      return "";
    return (integer.isUnsigned() ? "std::uint" : "std::int") +
           std::to_string(width) + "_t";
  }
  return "";
}

FailureOr<std::string> CppEmitter::scalarTypeFor(Type type, Operation *op) {
  std::string text = scalarType(type);
  if (text.empty())
    return op->emitError("code generation does not support element type ")
           << type;
  return text;
}

FailureOr<std::string> CppEmitter::elementTypeOf(Value tensor, Operation *op) {
  return scalarTypeFor(cast<ShapedType>(tensor.getType()).getElementType(), op);
}

int64_t CppEmitter::numElements(Value tensor) {
  return cast<ShapedType>(tensor.getType()).getNumElements();
}

std::string CppEmitter::byteCount(Value tensor) {
  std::string type =
      scalarType(cast<ShapedType>(tensor.getType()).getElementType());
  return std::to_string(numElements(tensor)) + " * sizeof(" + type + ")";
}

std::string CppEmitter::describe(Operation *op) {
  Location loc = op->getLoc();
  if (auto callSite = dyn_cast<CallSiteLoc>(loc))
    loc = callSite.getCallee();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      loc = fused.getLocations().front();
  if (auto named = dyn_cast<NameLoc>(loc))
    return named.getName().str();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (llvm::sys::path::filename(file.getFilename()) + ":" +
            Twine(file.getLine()))
        .str();
  return "";
}

std::string CppEmitter::siteLiteral(Operation *op, StringRef what) {
  std::string where = describe(op);
  std::string text = what.str();
  if (!where.empty())
    text += " at " + where;
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\')
      escaped += '\\';
    escaped += c;
  }
  return "\"" + escaped + "\"";
}

SmallVector<int64_t> CppEmitter::stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

LogicalResult CppEmitter::allocate(Value result, Operation *op,
                                   StringRef prefix) {
  FailureOr<std::string> type = elementTypeOf(result, op);
  if (failed(type))
    return failure();
  std::string text = bind(result, prefix);
  if (auto slot = resultSlots.find(result); slot != resultSlots.end()) {
    // Returned: computed straight into the caller's result buffer.
    os << *type << " *" << text << " = static_cast<" << *type << " *>(results["
       << slot->second << "]);\n";
    builtInResult.insert(result);
    return success();
  }
  os << *type << " *" << text << " = static_cast<" << *type
     << " *>(context->allocate(" << byteCount(result) << "));\n";
  owned.insert(result);
  return success();
}

void CppEmitter::alias(Value result, Value source) {
  aliasOf[result] = source;
  names[result] = name(source);
}

void CppEmitter::copy(Value dst, Value src) {
  os << "std::memcpy(" << name(dst) << ", " << name(src) << ", "
     << byteCount(dst) << ");\n";
}

void CppEmitter::release(Value value) {
  os << "context->release(" << name(value) << ", " << byteCount(value)
     << ");\n";
}

void CppEmitter::copyResult(unsigned index, Value value) {
  os << "std::memcpy(results[" << index << "], " << name(value) << ", "
     << byteCount(value) << ");\n";
}

Value CppEmitter::rootOf(Value value) const {
  while (true) {
    auto it = aliasOf.find(value);
    if (it == aliasOf.end())
      return value;
    value = it->second;
  }
}

bool mlir::tp::emit::reducesInPlace(Operation *op) {
  auto allReduce = dyn_cast<shard::AllReduceOp>(op);
  if (!allReduce || !allReduce.getInput().hasOneUse() ||
      allReduce.getInput().getType() != allReduce.getResult().getType())
    return false;
  // Only a buffer this function allocated for the input alone.
  Operation *def = allReduce.getInput().getDefiningOp();
  return def && isa<linalg::GenericOp, shard::AllReduceOp, shard::AllGatherOp,
                    shard::ReduceScatterOp, shard::AllSliceOp, tensor::ConcatOp,
                    tensor::ExtractSliceOp, tensor::PadOp>(def);
}

/// Ops whose tensor results are buffers of their own, which no other value
/// names (a reshape of one is a use).
static bool makesFreshBuffer(Operation *def) {
  return def &&
         isa<linalg::GenericOp, linalg::FillOp, shard::AllReduceOp,
             shard::AllGatherOp, shard::ReduceScatterOp, shard::AllSliceOp,
             tensor::ConcatOp, tensor::ExtractSliceOp, tensor::PadOp>(def);
}

bool CppEmitter::writesInitInPlace(linalg::LinalgOp op, OpOperand &init) const {
  Value value = init.get();
  if (!op.payloadUsesValueFromOperand(&init) || !value.hasOneUse())
    return false;
  Operation *def = value.getDefiningOp();
  if (!makesFreshBuffer(def) || def->getBlock() != op->getBlock())
    return false;
  // BLAS overwrites zeros without reading them: there is nothing to reuse.
  if (auto generic = dyn_cast<linalg::GenericOp>(op.getOperation()))
    if (succeeded(matchGemm(generic)) && isZeroFill(value))
      return false;
  return true;
}

/// Ops whose tensor result is a view of their first operand.
static bool isAliasingOp(Operation *op) {
  return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
             shard::SendOp>(op) ||
         reducesInPlace(op);
}

void CppEmitter::computeLastUses(
    Block &block, llvm::DenseMap<Operation *, SmallVector<Value>> &out) {
  // Roots are known structurally before emission: a reshape's result has
  // its operand's root.
  llvm::DenseMap<Value, Value> root;
  auto rootFn = [&](Value value) {
    while (true) {
      auto it = root.find(value);
      if (it == root.end())
        return value;
      value = it->second;
    }
  };
  // In order of first appearance: the emitted code is the same on every run
  // (a build cache keys on it).
  llvm::MapVector<Value, Operation *> last;
  for (Operation &op : block) {
    if (isAliasingOp(&op))
      root[op.getResult(0)] = op.getOperand(0);
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
      for (OpOperand &init : linalgOp.getDpsInitsMutable())
        if (writesInitInPlace(linalgOp, init))
          root[linalgOp.getTiedOpResult(&init)] = init.get();
    for (Value result : op.getResults())
      if (isa<RankedTensorType>(result.getType()))
        last.try_emplace(rootFn(result), &op);
    op.walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (isa<RankedTensorType>(operand.getType()))
          last[rootFn(operand)] = &op;
    });
    auto extra = extraUses.find(&op);
    if (extra != extraUses.end())
      for (Value operand : extra->second)
        if (isa<RankedTensorType>(operand.getType()))
          last[rootFn(operand)] = &op;
  }
  for (auto &[value, op] : last)
    if (value.getParentBlock() == &block)
      out[op].push_back(value);
}

bool CppEmitter::needsBuffer(Value emptyResult) const {
  for (OpOperand &use : emptyResult.getUses()) {
    auto linalgOp = dyn_cast<linalg::LinalgOp>(use.getOwner());
    if (linalgOp && linalgOp.isDpsInit(&use) &&
        !linalgOp.payloadUsesValueFromOperand(&use))
      continue;
    if (isa<shard::RecvOp>(use.getOwner()))
      continue;
    return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Blocks and dispatch
//===----------------------------------------------------------------------===//

LogicalResult
CppEmitter::emitBlock(Block &block,
                      function_ref<LogicalResult(Operation *)> onTerminator) {
  llvm::DenseMap<Operation *, SmallVector<Value>> releaseAfter;
  computeLastUses(block, releaseAfter);
  for (Operation &op : block) {
    bool isTerminator = op.hasTrait<OpTrait::IsTerminator>();
    // A row group runs at its first op (its buffers are released after
    // it, at the last use of each as before).
    auto group = rowGroupAt.find(&op);
    if (group != rowGroupAt.end()) {
      if (failed(emitRowGroup(*group->second)))
        return failure();
    } else if (!inRowGroup.contains(&op) &&
               failed(isTerminator ? onTerminator(&op) : emitOp(&op))) {
      return failure();
    }
    auto it = releaseAfter.find(&op);
    if (it == releaseAfter.end())
      continue;
    for (Value value : it->second)
      if (owned.contains(value))
        release(value);
  }
  return success();
}

LogicalResult CppEmitter::emitOp(Operation *op) {
  std::string where = describe(op);
  bool isScalar =
      op->getNumResults() == 1 && !isa<ShapedType>(op->getResult(0).getType());
  if (!isScalar || isa<tensor::ExtractOp>(op)) {
    os << "// " << op->getName();
    if (!where.empty())
      os << " (" << where << ")";
    os << "\n";
  }

  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op) &&
      fusedIntoAttention.contains(op)) {
    os << "// a reshape inside the fused attention below\n";
    return success();
  }
  if (auto generic = dyn_cast<linalg::GenericOp>(op))
    return emitGeneric(generic);
  if (auto fill = dyn_cast<linalg::FillOp>(op))
    return emitFill(fill);
  if (isa<arith::ConstantOp>(op) && !isScalar)
    return emitConstant(op);
  if (isa<shard::ShardDialect>(op->getDialect()))
    return emitShardOp(op);
  if (isa<func::CallOp>(op))
    return emitCall(op);
  if (isa<scf::IfOp>(op))
    return emitIf(op);
  if (auto extract = dyn_cast<tensor::ExtractOp>(op))
    return emitExtract(extract);
  if (isa<tensor::TensorDialect>(op->getDialect()))
    return emitTensorOp(op);
  if (isa<arith::ArithDialect, math::MathDialect>(op->getDialect()))
    return emitScalarOp(op);
  if (isa<CacheUpdateOp>(op))
    return emitCacheUpdate(op);
  return op->emitError("code generation does not support ") << op->getName();
}

LogicalResult CppEmitter::emitExtract(tensor::ExtractOp op) {
  return emitScalarOp(op);
}

LogicalResult CppEmitter::emitCall(Operation *op) {
  auto call = cast<func::CallOp>(op);
  for (Value result : call.getResults())
    if (!isa<RankedTensorType>(result.getType()))
      return op->emitError("code generation supports calls with tensor "
                           "results only");
  for (Value result : call.getResults())
    if (failed(allocate(result, op)))
      return failure();
  os << "{\n";
  os.indent();
  os << "void *args[] = {";
  llvm::interleaveComma(call.getOperands(), os,
                        [&](Value v) { os << name(v); });
  if (call.getNumOperands() == 0)
    os << "nullptr";
  os << "};\nvoid *results[] = {";
  llvm::interleaveComma(call.getResults(), os, [&](Value v) { os << name(v); });
  if (call.getNumResults() == 0)
    os << "nullptr";
  os << "};\nfn_" << call.getCallee() << "(context, args, results);\n";
  os.unindent();
  os << "}\n";
  return success();
}

LogicalResult CppEmitter::emitIf(Operation *op) {
  auto ifOp = cast<scf::IfOp>(op);
  for (Value result : ifOp.getResults()) {
    if (isa<RankedTensorType>(result.getType())) {
      if (failed(allocate(result, op)))
        return failure();
      continue;
    }
    FailureOr<std::string> type = scalarTypeFor(result.getType(), op);
    if (failed(type))
      return failure();
    os << *type << " " << bind(result) << "{};\n";
  }
  auto yieldInto = [&](Operation *terminator) -> LogicalResult {
    for (auto [result, yielded] :
         llvm::zip(ifOp.getResults(), terminator->getOperands())) {
      if (isa<RankedTensorType>(result.getType()))
        copy(result, yielded);
      else
        os << name(result) << " = " << name(yielded) << ";\n";
    }
    return success();
  };
  os << "if (" << name(ifOp.getCondition()) << ") {\n";
  os.indent();
  if (failed(emitBlock(ifOp.getThenRegion().front(), yieldInto)))
    return failure();
  os.unindent();
  if (!ifOp.getElseRegion().empty()) {
    os << "} else {\n";
    os.indent();
    if (failed(emitBlock(ifOp.getElseRegion().front(), yieldInto)))
      return failure();
    os.unindent();
  }
  os << "}\n";
  return success();
}

//===----------------------------------------------------------------------===//
// Functions and the module
//===----------------------------------------------------------------------===//

static std::string describeArg(func::FuncOp func, unsigned index) {
  // A piece of a fused weight by its range of the initializer.
  if (auto weight = func.getArgAttrOfType<StringAttr>(
          index, TPDialect::kWeightAttrName)) {
    auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[index]);
    return "weight \"" +
           getPieceName(weight.getValue(), getLayout(func, index),
                        type ? type.getRank() : 0) +
           "\"";
  }
  if (auto input =
          func.getArgAttrOfType<StringAttr>(index, TPDialect::kInputAttrName))
    return ("input \"" + input.getValue() + "\"").str();
  if (auto cache =
          func.getArgAttrOfType<StringAttr>(index, TPDialect::kCacheAttrName))
    return ("KV cache \"" + cache.getValue() + "\"").str();
  return "argument";
}

LogicalResult CppEmitter::emitFunction(Operation *op) {
  auto func = cast<func::FuncOp>(op);
  if (func.isExternal())
    return func.emitError("code generation needs a body for @")
           << func.getSymName();
  os << "static void fn_" << func.getSymName() << "(" << contextType
     << " *context, void *const *args, void *const *results) {\n";
  os.indent();
  os << "(void)context;\n(void)results;\n";
  for (BlockArgument arg : func.getArguments()) {
    auto tensor = dyn_cast<RankedTensorType>(arg.getType());
    if (!tensor)
      return func.emitError("code generation supports tensor arguments only");
    FailureOr<std::string> type = elementTypeOf(arg, op);
    if (failed(type))
      return failure();
    std::string text = bind(arg, "a");
    os << *type << " *" << text << " = static_cast<" << *type << " *>(args["
       << arg.getArgNumber() << "]); // "
       << describeArg(func, arg.getArgNumber()) << "\n";
  }
  // A value returned once, made in this block, is made in its result
  // buffer (the logits of a language model are tens of MB to copy).
  resultSlots.clear();
  Block &entry = func.getBody().front();
  Operation *returnOp = entry.getTerminator();
  for (auto [index, value] : llvm::enumerate(returnOp->getOperands()))
    if (value.getParentBlock() == &entry && !isa<BlockArgument>(value) &&
        llvm::count(returnOp->getOperands(), value) == 1)
      resultSlots[value] = index;
  auto onReturn = [&](Operation *terminator) -> LogicalResult {
    for (auto [index, value] : llvm::enumerate(terminator->getOperands())) {
      if (!isa<RankedTensorType>(value.getType()))
        return terminator->emitError("code generation supports tensor "
                                     "results only");
      if (!builtInResult.contains(value))
        copyResult(index, value);
    }
    return success();
  };
  if (failed(emitBlock(func.getBody().front(), onReturn)))
    return failure();
  os.unindent();
  os << "}\n\n";
  return success();
}

// The text every model.cpp opens with; the element types, math functions
// and scalar semantics it uses are in tp_math.h (include/tp/Runtime), a
// header of its own that travels with the artifact.
static constexpr const char *kPrelude = R"(#define TP_CPU_MODEL_LIBRARY
#include "tp_runtime.h"
#include "tp_packed_gemm.h"
#include "tp_math.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// Each loop nest is a lambda of its own that is never inlined: the host
// compiler then optimises one small function per op, in time linear in the
// model's size, instead of one function of every op (GCC's SSA and
// dominance updates are quadratic in a function's size: a 1,000-op chain
// took 65 s of -O3, a 10,000-op one did not finish).
#define TP_LOOP_NEST [&]() __attribute__((noinline))

using namespace tp::math;

)";

std::string mlir::tp::emit::cppModelPrelude() {
  return std::string(
             "#ifndef TP_CPU_MODEL_PRELUDE\n#define TP_CPU_MODEL_PRELUDE\n") +
         kPrelude + "#endif // TP_CPU_MODEL_PRELUDE\n";
}

LogicalResult CppEmitter::emitModule() {
  std::string body;
  llvm::raw_string_ostream bodyStream(body);
  raw_indented_ostream bodyOs(bodyStream);
  // Function bodies go to a buffer first: constants they meet are
  // file-scope globals printed above them.
  raw_indented_ostream &fileOs = os;

  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  // Forward declarations let functions call each other in any order.
  for (func::FuncOp func : funcs)
    bodyOs << "static void fn_" << func.getSymName()
           << "(tp::rt::RankContext *, void *const *, void *const *);\n";
  bodyOs << "\n";
  {
    CppEmitter inner(module, bodyOs);
    if (failed(inner.findFusedAttention()))
      return failure();
    inner.findWeightsPackedInPlace();
    inner.findRowGroups();
    for (func::FuncOp func : funcs)
      if (failed(inner.emitFunction(func)))
        return failure();
    globals = std::move(inner.globals);
  }
  // The stage functions the runtime reaches through tp_model_query
  // (tp_model_abi.h; RankContext.h defines the rest of the library's side).
  SmallVector<func::FuncOp> stages;
  for (func::FuncOp func : funcs)
    if (!func.isPrivate())
      stages.push_back(func);
  bodyOs << "const tp::rt::ModelEntries &tp::rt::modelEntries() {\n";
  if (stages.empty()) {
    bodyOs << "  static const ModelEntries entries{nullptr, 0};\n";
  } else {
    bodyOs << "  static const StageEntry stages[] = {";
    llvm::interleaveComma(stages, bodyOs, [&](func::FuncOp func) {
      bodyOs << "{\"" << func.getSymName() << "\", fn_" << func.getSymName()
             << "}";
    });
    bodyOs << "};\n  static const ModelEntries entries{stages, "
           << stages.size() << "};\n";
  }
  bodyOs << "  return entries;\n}\n";

  fileOs << "// Generated by tp-compile from ";
  if (auto model = module->getAttrOfType<StringAttr>("tp.model"))
    fileOs << llvm::sys::path::filename(model.getValue());
  else
    fileOs << "an MLIR module";
  fileOs << ": one rank's program (SPMD).\n";
  for (auto grid : module.getOps<shard::GridOp>()) {
    fileOs << "// grid @" << grid.getSymName() << " shape [";
    llvm::interleaveComma(grid.getShape(), fileOs);
    fileOs << "]\n";
  }
  fileOs << cppModelPrelude() << "\n";
  if (!globals.empty())
    fileOs << "namespace {\n\n" << globals << "\n} // namespace\n\n";
  fileOs << body;
  return emitModelSignature(module, fileOs);
}

LogicalResult mlir::tp::emitCpp(ModuleOp module, llvm::raw_ostream &os) {
  raw_indented_ostream indented(os);
  CppEmitter emitter(module, indented);
  return emitter.emitModule();
}
