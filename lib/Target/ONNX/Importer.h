//===- Importer.h - shared pieces of the ONNX importer ----------*- C++ -*-===//
//
// Private header of lib/Target/ONNX: the value table entry, import-time
// constants, the per-node conversion context, and the builders that the op
// families (Elementwise, Shape, MatMul, Reduction, Resize, Conv, Sequence,
// Loop) share.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ONNX_IMPORTER_H
#define TP_LIB_TARGET_ONNX_IMPORTER_H

#include "mlir/Dialect/Utils/ReshapeOpsUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"

#include "onnx/onnx_pb.h"

#include <functional>
#include <limits>
#include <optional>
#include <vector>

namespace mlir::tp::onnx_import {

/// ONNX element type codes (onnx::TensorProto::DataType).
using DType = int32_t;

bool isFloatDType(DType t);
bool isUnsignedDType(DType t);
StringRef dtypeName(DType t);
/// The MLIR element type of an ONNX dtype, or null if unsupported.
Type getElementType(MLIRContext *ctx, DType t);

/// Float to integer as a cast on x86-64 computes it (cvttsd2si, which
/// onnxruntime's folds give): truncation toward zero, and the "integer
/// indefinite" INT64_MIN for NaN and values out of range, where a C++
/// cast would be undefined (a -inf mask cast to int64).
inline int64_t truncToInt64(double v) {
  if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0))
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

/// A tensor whose contents are known at import time: shape arithmetic,
/// small initializers, Constant nodes. Integers (and bools) live in `ints`,
/// floating-point values in `floats`.
struct ConstTensor {
  DType dtype = onnx::TensorProto::INT64;
  SmallVector<int64_t> shape;
  std::vector<int64_t> ints;
  std::vector<double> floats;

  bool isFloat() const { return isFloatDType(dtype); }
  int64_t numel() const;
  double getAsDouble(int64_t i) const {
    return isFloat() ? floats[i] : static_cast<double>(ints[i]);
  }
  int64_t getAsInt(int64_t i) const {
    return isFloat() ? truncToInt64(floats[i]) : ints[i];
  }
  /// Resizes storage for numel() elements of the current dtype.
  void allocate();
  /// Converts the contents to `to` with ONNX Cast semantics.
  ConstTensor castTo(DType to) const;
};

/// Constants with more elements than this are emitted as IR, not folded:
/// ONNXImportOptions::maxFoldedElements of the import under way on this
/// thread.
int64_t maxFoldedElements();
/// Sequences are unrolled at import, one value per element: longer ones
/// are refused (a SplitToSequence of a 66M-element dim into pairs would be
/// 33M ops).
constexpr int64_t kMaxSequenceLength = 4096;

/// One ONNX value during import: its type, and either an SSA value, an
/// import-time constant, or both. An ONNX sequence is held only here, as
/// the list of its elements (`dtype` is theirs); it never reaches the IR.
struct ImportedValue {
  DType dtype = 0;
  SmallVector<int64_t> shape;
  Value value;
  std::optional<ConstTensor> constant;
  std::optional<std::vector<ImportedValue>> sequence;

  bool isSequence() const { return sequence.has_value(); }
};

/// Row-major strides of `shape`.
SmallVector<int64_t> getStrides(ArrayRef<int64_t> shape);
int64_t getNumElements(ArrayRef<int64_t> shape);
/// The element count of `shape`, or nullopt if a dim is negative or the
/// count does not fit in int64_t (a malformed or hostile model).
std::optional<int64_t> getCheckedNumElements(ArrayRef<int64_t> shape);
/// The ONNX opsets the converters implement (ReduceMean and friends take
/// axes as inputs from 18; 21 is the newest the zoo is tested at).
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;
/// The largest element count a constant folded at import may have.
constexpr int64_t kMaxConstantElements = int64_t(1) << 26;
/// Formats a shape as `[2, 3]` for diagnostics.
std::string formatShape(ArrayRef<int64_t> shape);

class GraphImporter;

/// How diagnostics name a node: its name, else its first output.
std::string getNodeName(const onnx::NodeProto &node);

/// What a converter sees of one node.
class NodeContext {
public:
  NodeContext(GraphImporter &importer, const onnx::NodeProto &node,
              OpBuilder &builder, Location loc, int64_t opset);

  const onnx::NodeProto &node;
  OpBuilder &b;
  Location loc;
  /// The opset version of the default ONNX domain.
  int64_t opset;

  //===--- inputs ---===//
  unsigned getNumInputs() const { return node.input_size(); }
  /// An optional input may be absent (missing or an empty name).
  bool hasInput(unsigned i) const;
  const ImportedValue &input(unsigned i) const;
  /// The input as an SSA value, materializing a constant if needed.
  Value operand(unsigned i);
  /// How many elements input `i` has.
  int64_t getNumElements(unsigned i) const {
    return mlir::tp::onnx_import::getNumElements(input(i).shape);
  }
  /// The input's constant contents, or null if not known at import.
  const ConstTensor *constInput(unsigned i) const;
  /// Reads a constant integer-vector input (axes, shapes, pads); emits an
  /// error and returns nullopt when it is not known at import.
  std::optional<SmallVector<int64_t>> constInts(unsigned i, StringRef what);

  //===--- attributes ---===//
  const onnx::AttributeProto *attr(StringRef name) const;
  int64_t attrInt(StringRef name, int64_t dflt) const;
  float attrFloat(StringRef name, float dflt) const;
  std::string attrString(StringRef name, StringRef dflt) const;
  std::optional<SmallVector<int64_t>> attrInts(StringRef name) const;

  //===--- results ---===//
  unsigned getNumOutputs() const { return node.output_size(); }
  bool hasOutput(unsigned i) const;
  void setResult(unsigned i, Value value, DType dtype);
  void setConstResult(unsigned i, ConstTensor value);
  /// Defines output `i` as `v` as it is: a tensor or a sequence.
  void setValue(unsigned i, ImportedValue v);

  //===--- subgraphs ---===//
  /// Imports `body` (a Loop body) with its inputs bound to `inputs`, in a
  /// scope of its own that sees the enclosing values by name; returns its
  /// outputs. Nothing the body defines outlives the call.
  FailureOr<SmallVector<ImportedValue>>
  importSubgraph(const onnx::GraphProto &body, ArrayRef<ImportedValue> inputs);

  /// An error attached to this node: "node 'n' (Op): ...".
  InFlightDiagnostic emitError();

  /// Normalizes a possibly negative axis against `rank`; emits an error
  /// and returns nullopt when it is out of range.
  std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);

  /// True if all present inputs are constants whose results may be folded.
  bool allInputsConstant() const;

private:
  GraphImporter &importer;
};

/// A conversion routine for one ONNX op type.
using OpConverter = std::function<LogicalResult(NodeContext &)>;
using ConverterMap = llvm::StringMap<OpConverter>;

void populateElementwiseConverters(ConverterMap &map);
void populateShapeConverters(ConverterMap &map);
void populateDataMovementConverters(ConverterMap &map);
void populateIndexingConverters(ConverterMap &map);
void populateMatMulConverters(ConverterMap &map);
void populateReductionConverters(ConverterMap &map);
void populateResizeConverters(ConverterMap &map);
void populateConvConverters(ConverterMap &map);
void populateSequenceConverters(ConverterMap &map);
void populateIfConverters(ConverterMap &map);
void populateLoopConverters(ConverterMap &map);
void populateLossConverters(ConverterMap &map);
void populateTopKConverters(ConverterMap &map);
/// Whether converters of `opType` accept sequence-valued inputs.
bool acceptsSequences(StringRef opType);
const ConverterMap &getConverters();

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

/// Decodes an initializer or Constant payload stored inside the model.
FailureOr<ConstTensor> readTensorProto(const onnx::TensorProto &tensor,
                                       std::string &error);
/// Emits `arith.constant` holding `c`.
Value materializeConstant(OpBuilder &b, Location loc, const ConstTensor &c);

//===----------------------------------------------------------------------===//
// IR builders shared by the op families
//===----------------------------------------------------------------------===//

RankedTensorType getTensorType(Value v);
Value createEmpty(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                  Type elementType);
Value createScalar(OpBuilder &b, Location loc, Type type, double value);
/// A tensor of `shape` filled with `value`.
Value createFilled(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                   Type elementType, double value);

/// Multidirectional (numpy) broadcast; nullopt if the shapes do not
/// broadcast.
std::optional<SmallVector<int64_t>>
broadcastShapes(ArrayRef<SmallVector<int64_t>> shapes);

/// The body of an elementwise op: scalar arguments in, scalar result out.
using ScalarBody =
    function_ref<Value(OpBuilder &, Location, ValueRange scalars)>;

/// A `linalg.generic` over `resultShape` whose inputs broadcast to it.
Value buildElementwise(OpBuilder &b, Location loc, ValueRange inputs,
                       ArrayRef<int64_t> resultShape, Type resultElementType,
                       ScalarBody body);

/// Reshape between static shapes with the same element count, as
/// `tensor.expand_shape` / `collapse_shape` (both, through a flat tensor,
/// when neither alone fits).
Value buildReshape(OpBuilder &b, Location loc, Value input,
                   ArrayRef<int64_t> shape);

/// A reduction over `axes` (sorted, unique) with `keepDims`, combining with
/// `combine(acc, x)` from `init`.
Value buildReduction(
    OpBuilder &b, Location loc, Value input, ArrayRef<int64_t> axes,
    bool keepDims, double init,
    function_ref<Value(OpBuilder &, Location, Value acc, Value x)> combine);

/// Softmax of a float tensor over `axes`, or with `log` its logarithm,
/// (x - max) - log(sum(exp(x - max))).
Value buildSoftmax(OpBuilder &b, Location loc, Value input,
                   ArrayRef<int64_t> axes, bool log);

/// Scalar arithmetic that picks the float or integer arith op.
Value createAdd(OpBuilder &b, Location loc, Value x, Value y);
Value createSub(OpBuilder &b, Location loc, Value x, Value y);
Value createMul(OpBuilder &b, Location loc, Value x, Value y);
Value createMax(OpBuilder &b, Location loc, Value x, Value y);

/// An einsum-style contraction, e.g. "bsh,ho->bso": named linalg ops for
/// plain and batched matmul, `linalg.generic` otherwise. Operand dims named
/// by the same letter must agree (checked by the caller).
Value buildContraction(OpBuilder &b, Location loc, Value lhs, Value rhs,
                       StringRef lhsDims, StringRef rhsDims, StringRef outDims);

/// A `linalg.generic` producing `resultShape` by reading `source` at
/// computed indices: `indexFn(b, loc, loopIndices, inputScalars)` returns
/// the source index (as `index` values). `inputs` are read with
/// `inputMaps`, or with the broadcast maps of buildElementwise if empty.
Value buildIndexedRead(
    OpBuilder &b, Location loc, Value source, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps, ArrayRef<int64_t> resultShape,
    function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange loops,
                                    ValueRange scalars)>
        indexFn);

/// Reads constant `in` into a tensor of `outShape`: `sourceIndex` maps an
/// output multi-index to the flat index read from `in`.
ConstTensor foldByIndex(const ConstTensor &in, ArrayRef<int64_t> outShape,
                        function_ref<int64_t(ArrayRef<int64_t>)> sourceIndex);

/// Concatenates `parts` along `axis`, on a new unit dim there if `newAxis`
/// (ConcatFromSequence, Loop's scan outputs): folded when every part is a
/// constant, else `tensor.concat`.
FailureOr<ImportedValue> concatValues(NodeContext &ctx,
                                      ArrayRef<ImportedValue> parts,
                                      int64_t axis, bool newAxis);

/// Casts a scalar between element types with ONNX semantics.
Value castScalar(OpBuilder &b, Location loc, Value x, Type to, bool srcUnsigned,
                 bool dstUnsigned = false);

} // namespace mlir::tp::onnx_import

#endif // TP_LIB_TARGET_ONNX_IMPORTER_H
