//===- CppEmitter.h - state shared by the C++ emitter's parts ---*- C++ -*-===//
//
// The emitter walks each function once, in order. Every tensor value is a
// pointer to a dense row-major buffer of its static shape; reshapes alias
// their source, every other tensor op writes a fresh buffer, so a buffer is
// never written after it is defined. Buffers the emitter allocated are
// released after the last op of their block that uses them (or an alias).
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_EMIT_CPPEMITTER_H
#define TP_LIB_TARGET_EMIT_CPPEMITTER_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/IndentedOstream.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include <array>
#include <memory>
#include <string>

namespace mlir::tp::emit {

struct FusedAttention;
struct Gemm;
struct LaneReduction;
struct Lookup;
struct LoopNest;

/// Loop nests over the same rows that run as one pass per row
/// (EmitRowGroups.cpp).
struct RowGroup {
  /// From the first nest to the last, in block order: the nests and the
  /// binding ops between them.
  SmallVector<Operation *> ops;
  llvm::DenseSet<Operation *> nests;
  /// The ranges of the row dims (each nest's leading dims).
  SmallVector<int64_t> rows;
};

/// A collective's group in the runtime's terms (see RankContext.h).
struct GroupSpec {
  int64_t size = 1;
  int64_t stride = 1;
};

/// A shard collective as both targets print it (CppEmitter::
/// describeCollective, Collectives.cpp): which one, the ranks it spans, the
/// values it moves and how its tensor splits around its axis.
struct Collective {
  enum class Kind { AllReduce, AllGather, ReduceScatter, AllSlice, Send, Recv };
  Kind kind = Kind::AllReduce;
  GroupSpec group;
  /// What it reads (none for Recv) and what it defines.
  Value input, result;
  /// The element type of the data it moves.
  Type elementType;
  /// AllReduce and ReduceScatter: Sum, Product, Max or Min.
  shard::ReductionKind reduction = shard::ReductionKind::Sum;
  /// AllGather: the input as [outer, chunk] around the gather axis;
  /// ReduceScatter and AllSlice: the result around theirs.
  int64_t outer = 1, chunk = 1;
  /// Send and Recv: the peer's index in the group.
  int64_t peer = 0;
};

/// The text every model.cpp opens with, the same for every model: the
/// runtime headers' includes (tp_math.h: the scalar semantics), under an
/// include guard, so that a copy precompiled for the host compiler
/// (PrecompiledPrelude.h) stands in for it.
std::string cppModelPrelude();

/// A static shape as [outer, chunk] around `axis`: `outer` the elements
/// before it, `chunk` the elements from it on (the unit collectives move).
std::pair<int64_t, int64_t> splitAtAxis(ArrayRef<int64_t> shape, int64_t axis);

/// True for an all_reduce whose input buffer is its own to overwrite (the
/// input has no other use): it reduces in place, its result an alias.
bool reducesInPlace(Operation *op);

/// A reduction that describeCollective accepted, in the target's words for
/// Sum, Product, Max and Min (in that order).
StringRef spellReduction(shard::ReductionKind kind,
                         std::array<StringRef, 4> names);

/// A C++ literal for an integer or float attribute ("" when neither).
std::string scalarLiteral(Attribute attr);

/// `a` combined with `b` as `combiner` (a reduction's addf, mulf,
/// maximumf, minimumf, maxnumf or minnumf) does it, in C++ and CUDA as
/// emitScalarOp spells the op; "" for any other op.
std::string combineExpr(Operation *combiner, StringRef a, StringRef b);

/// The identity of `combiner` as a `type` value: where a partial result
/// of a reduction split into lanes starts.
std::string identityExpr(Operation *combiner, StringRef type);

/// `expr` as a C++ int64 expression: dim i is `dims[i]`, symbol j is
/// `symbols[j]`.
std::string affineExprToCpp(AffineExpr expr, ArrayRef<std::string> dims,
                            ArrayRef<std::string> symbols = {});

class CppEmitter {
public:
  CppEmitter(ModuleOp module, raw_indented_ostream &os);
  virtual ~CppEmitter() = default;

  LogicalResult emitModule();

  //===--- Names and types ------------------------------------------------===//

  /// The C++ name bound to `value`; the value must have been emitted.
  std::string name(Value value) const;
  /// Binds a fresh name with `prefix` to `value` and returns it.
  std::string bind(Value value, StringRef prefix = "v");
  void bindTo(Value value, std::string name) { names[value] = std::move(name); }
  /// C++ scalar type of an element or scalar type, or "" if unsupported.
  static std::string scalarType(Type type);
  /// Like scalarType, but reports an error at `op` when unsupported.
  FailureOr<std::string> scalarTypeFor(Type type, Operation *op);
  /// "std::int64_t" etc. for a tensor's element type.
  FailureOr<std::string> elementTypeOf(Value tensor, Operation *op);
  static int64_t numElements(Value tensor);
  /// Bytes of a tensor value, as a C++ expression.
  std::string byteCount(Value tensor);
  /// Short description of where `op` came from, for comments and messages.
  static std::string describe(Operation *op);

  //===--- Buffers --------------------------------------------------------===//

  /// Emits `T *name = allocate(...)` for `result` and records that this
  /// function owns the buffer.
  virtual LogicalResult allocate(Value result, Operation *op,
                                 StringRef prefix = "v");
  /// Makes `result` name the same buffer as `source` (reshapes).
  void alias(Value result, Value source);
  /// Emits `std::memcpy(dst, src, bytes)` between two tensors' buffers.
  virtual void copy(Value dst, Value src);
  /// Frees a buffer this function owns after its last use.
  virtual void release(Value value);
  /// Copies a returned tensor into the caller's `results[index]`.
  virtual void copyResult(unsigned index, Value value);

  //===--- Ops ------------------------------------------------------------===//

  virtual LogicalResult emitOp(Operation *op);
  /// Emits a block's ops; `onTerminator` handles its terminator.
  LogicalResult
  emitBlock(Block &block,
            function_ref<LogicalResult(Operation *)> onTerminator);
  /// arith/math/index ops on scalars, and tensor.extract: `const T v = ...;`.
  LogicalResult emitScalarOp(Operation *op);
  /// `fn` called on `op`'s operands, f16 and bf16 ones as float.
  std::string scalarCall(Operation *op, StringRef fn);
  /// The C++ expression of a math op, a tensor.extract or an
  /// affine.apply (of type `cType`); "" for any other op.
  std::string mathExpr(Operation *op, StringRef cType);
  /// The per-op hooks emitOp dispatches to, each target's own where they
  /// differ (CudaEmitter: kernels, cuBLAS, NCCL).
  virtual LogicalResult emitGeneric(linalg::GenericOp op);
  /// A generic's result buffers (allocated, aliased to an init it
  /// accumulates into, or holding a copy of the init it reads).
  LogicalResult prepareGenericResults(linalg::GenericOp op);
  /// A generic's loads, loops and payload; the loops over its first
  /// `rows.size()` dims are the caller's, with those index names. With
  /// `columns` (first, count), the last loop runs over [first, first +
  /// count) only (a GEMM epilogue's block of columns).
  LogicalResult
  emitGenericLoops(linalg::GenericOp op, ArrayRef<std::string> rows,
                   std::optional<std::pair<std::string, std::string>> columns =
                       std::nullopt);
  /// emitGenericLoops' parts: a block argument's load, a payload op, the
  /// yielded values' stores, and the bodies of a lane reduction and of a
  /// lookup.
  LogicalResult emitLoopLoad(const LoopNest &nest, BlockArgument arg);
  LogicalResult emitLoopBodyOp(const LoopNest &nest, Operation &inner);
  void emitLoopStores(const LoopNest &nest);
  LogicalResult emitLaneReductionBody(const LoopNest &nest,
                                      const LaneReduction &lanes);
  LogicalResult emitLookupBody(const LoopNest &nest, const Lookup &lookup);
  virtual LogicalResult emitFill(linalg::FillOp op);
  LogicalResult emitTensorOp(Operation *op);
  /// Where the targets differ in emitTensorOp: copying a box of `sizes`
  /// (walked with `srcSteps` in `src`, `dstSteps` in `dst`) from
  /// `srcOffsets` of `src` to `dstOffsets` of `dst`; filling a buffer with a
  /// value; zeroing it; from_elements.
  virtual LogicalResult
  emitBoxCopy(Operation *op, Value dst, ArrayRef<int64_t> dstShape,
              ArrayRef<int64_t> dstOffsets, Value src,
              ArrayRef<int64_t> srcShape, ArrayRef<int64_t> srcOffsets,
              ArrayRef<int64_t> sizes, ArrayRef<int64_t> srcSteps,
              ArrayRef<int64_t> dstSteps);
  virtual LogicalResult emitFillBuffer(Operation *op, Value result,
                                       StringRef value);
  virtual void emitZeroBuffer(Value result);
  virtual LogicalResult emitFromElements(tensor::FromElementsOp op);
  /// tp.cache_update, in place: the result aliases the cache argument.
  LogicalResult emitCacheUpdate(Operation *op);
  /// The target's call that writes `update` ([outer, count, inner]) at
  /// `position` of a cache of `slots` positions.
  virtual void emitCacheWrite(Value cache, Value update, Value position,
                              int64_t outer, int64_t slots, int64_t count,
                              int64_t inner, StringRef site);
  /// A tensor constant (scalar ones are emitScalarOp's).
  virtual LogicalResult emitConstant(Operation *op);
  /// A read of one element (C++: emitScalarOp).
  virtual LogicalResult emitExtract(tensor::ExtractOp op);
  /// Attention chains that run fused (MatchAttention.cpp): found before
  /// any function is emitted, so that the ops they replace are skipped and
  /// what the fused computation reads lives until it runs.
  LogicalResult findFusedAttention();
  /// The fused attention chain ending at `out`: per batch element, the
  /// scores of the filled keys in one buffer, BLAS for both products
  /// (EmitAttention.cpp).
  /// A payload of an attention chain's generic with `bound` block
  /// arguments, its other operands read at `indices`; returns the yield.
  FailureOr<std::string>
  emitChainPayload(linalg::GenericOp generic,
                   ArrayRef<std::pair<Value, std::string>> bound,
                   ArrayRef<std::string> indices = {});
  /// The softmax of one row of fused attention's scores `x`, over the keys
  /// `key` < limit, with the chain's index names `indices`.
  LogicalResult emitAttentionSoftmax(const FusedAttention &a, StringRef key,
                                     ArrayRef<SmallVector<std::string>> indices,
                                     Operation *op);
  virtual LogicalResult emitFusedAttention(linalg::GenericOp out);
  /// Inside the fused attention's batch loop: batch element b of
  /// `product`'s right operand (K or V) in f32, its filled keys [0, limit)
  /// (all `rows` rows of ldb when keys are not its rows), through
  /// `payload` (a copy folded into the product, or null), into `buffer`:
  /// one loop over contiguous elements, which vectorises.
  LogicalResult emitFilledKeys(const Gemm &product, bool keysAreRows,
                               int64_t rows, linalg::GenericOp payload,
                               StringRef buffer, Operation *at);
  llvm::DenseSet<Operation *> fusedIntoAttention;
  llvm::DenseMap<Operation *, std::shared_ptr<FusedAttention>> attentionAt;
  /// Weights (by name) that only products read, all in one layout the
  /// packed kernel takes: the CPU target packs them into their own memory
  /// on first use (tp::rt::residentWeightGemm). Found after
  /// findFusedAttention, whose products are not GEMM calls.
  void findWeightsPackedInPlace();
  llvm::StringSet<> weightsPackedInPlace;
  /// Runs of loop nests over the same rows that run as one pass per row
  /// (EmitRowGroups.cpp): found before emission; the group is emitted at
  /// its first op, and its other ops are skipped. The CUDA target makes
  /// each group one kernel (EmitCudaRowGroups.cpp).
  void findRowGroups();
  /// A group's nests that the product before the group computed already
  /// (computedByProduct) are left out of it; the rest run as before.
  virtual LogicalResult emitRowGroup(const RowGroup &group);
  /// The nests of `group` that run in its loop, in block order: all but
  /// those a product computed. Fewer than two: the group's ops are emitted
  /// one by one.
  SmallVector<linalg::GenericOp> rowGroupNests(const RowGroup &group) const;
  llvm::DenseMap<Operation *, std::shared_ptr<RowGroup>> rowGroupAt;
  /// The ops of each group but its first, which emitBlock skips.
  llvm::DenseSet<Operation *> inRowGroup;
  /// Elementwise generics that run in the epilogue of the packed product
  /// they read (EmitLinalg.cpp), on each block of its columns.
  llvm::DenseSet<Operation *> inGemmEpilogue;
  /// Whether the product that `op` reads computed `op` with itself when it
  /// was emitted (the C++ target's GEMM epilogues; cuBLAS writing a bf16
  /// sum on CUDA), so that no other path emits it again.
  virtual bool computedByProduct(Operation *op) const {
    return inGemmEpilogue.contains(op);
  }
  virtual LogicalResult emitShardOp(Operation *op);
  /// shard.process_multi_index and process_linear_index: host scalars.
  LogicalResult emitProcessIndex(Operation *op);
  LogicalResult emitCall(Operation *op);
  LogicalResult emitIf(Operation *op);

  /// True when `op` accumulates into `init`'s buffer instead of a copy of
  /// it: the payload reads the init, nothing else uses it, and it is a
  /// buffer this function made for it alone (a fill, a loop nest, a
  /// collective's result). A reduction's zeros, filled once, then take the
  /// sums, with no second buffer and no memcpy.
  virtual bool writesInitInPlace(linalg::LinalgOp op, OpOperand &init) const;

  /// Row-major strides of a static shape.
  static SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape);
  /// C++ expression for the flat offset of `map` applied to loop indices
  /// named by `indices`, into a buffer of `shape`.
  static std::string offsetExpr(AffineMap map, ArrayRef<int64_t> shape,
                                ArrayRef<std::string> indices);
  /// Group of a collective over `axes` of grid `gridName`.
  FailureOr<GroupSpec> groupOf(Operation *op, StringRef gridName,
                               ArrayRef<int16_t> axes);
  /// `op` (a shard collective, send or recv) as both targets print it;
  /// emits an error naming what code generation cannot run.
  FailureOr<Collective> describeCollective(Operation *op);
  /// The group as the target's runtime spells it (tp::rt::Group{...}).
  virtual std::string groupLiteral(GroupSpec group) const;
  /// A string literal naming `op` for runtime messages.
  std::string siteLiteral(Operation *op, StringRef what);

  raw_indented_ostream &os;
  /// File-scope declarations (tensor constants), printed before functions.
  std::string globals;

protected:
  /// The C++ type that functions take their rank's context as.
  std::string contextType = "tp::rt::RankContext";

  LogicalResult emitFunction(Operation *func);
  /// Last op of `block` (by position) that uses each alias root, so that
  /// buffers can be released right after it.
  void computeLastUses(Block &block,
                       llvm::DenseMap<Operation *, SmallVector<Value>> &out);
  Value rootOf(Value value) const;
  bool needsBuffer(Value emptyResult) const;

  ModuleOp module;
  /// Values an op reads beyond its operands (a fused kernel emitted at it
  /// reads its chain's inputs): their buffers live until it has run.
  llvm::DenseMap<Operation *, SmallVector<Value>> extraUses;
  llvm::DenseMap<Value, std::string> names;
  llvm::DenseMap<Value, Value> aliasOf;
  llvm::DenseSet<Value> owned;
  /// Values the function returns once, from its own block, and the result
  /// slot each goes to: allocate() binds them to the caller's buffer.
  llvm::DenseMap<Value, unsigned> resultSlots;
  /// Those that allocate() bound so, which the return need not copy.
  llvm::DenseSet<Value> builtInResult;
  llvm::StringMap<unsigned> usedNames;
  unsigned nextId = 0;
  /// Global rank stride of each grid: the pipeline grid's ranks are tp
  /// apart, every other grid's axes are inside one stage.
  llvm::StringMap<int64_t> gridBaseStride;
};

/// A generic kernel selection made a GEMM, as a BLAS or packed-weight call
/// with its epilogue, if any (EmitGemm.cpp).
LogicalResult emitGemm(CppEmitter &e, linalg::GenericOp op, const Gemm &gemm);

} // namespace mlir::tp::emit

#endif // TP_LIB_TARGET_EMIT_CPPEMITTER_H
