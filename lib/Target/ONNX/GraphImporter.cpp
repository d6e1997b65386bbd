//===- GraphImporter.cpp - ONNX graph to func.func @main ------------------===//
//
// Walks an ONNX graph in order and builds `func.func @main`: graph inputs
// and weights become arguments, nodes go through the converter table, and
// values known at import (shapes, small constants) fold on the way.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"
#include "ModelLoader.h"
#include "TorchScriptLoader.h"

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "onnx/defs/schema.h"

#include "llvm/Support/SaveAndRestore.h"

#include <cstring>
#include <limits>

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::onnx_import;

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

Location GraphImporter::nodeLoc(const onnx::NodeProto &node) {
  std::string name = node.name();
  if (name.empty())
    name = node.output_size() ? node.output(0) : node.op_type();
  return NameLoc::get(StringAttr::get(ctx, name), fileLoc);
}

LogicalResult GraphImporter::checkOpset() {
  for (const auto &entry : model.opset_import())
    if (entry.domain().empty() || entry.domain() == "ai.onnx")
      opset = entry.version();
  if (opset == 0)
    return emitError(fileLoc)
           << "'" << path << "' does not import the default ONNX opset";
  if (opset < kMinOpset || opset > kMaxOpset)
    return emitError(fileLoc) << "'" << path << "' imports ONNX opset " << opset
                              << "; this importer reads opsets " << kMinOpset
                              << " to " << kMaxOpset;
  return success();
}

LogicalResult GraphImporter::checkSupportedOps() {
  bool ok = true;
  checkSupportedOps(graph, ok);
  return success(ok);
}

/// Reports every unsupported op of `g` and of the subgraphs (Loop bodies)
/// nested in its nodes' attributes.
void GraphImporter::checkSupportedOps(const onnx::GraphProto &g, bool &ok) {
  const ConverterMap &converters = getConverters();
  for (const auto &node : g.node()) {
    for (const auto &attr : node.attribute()) {
      if (attr.has_g())
        checkSupportedOps(attr.g(), ok);
      for (const auto &sub : attr.graphs())
        checkSupportedOps(sub, ok);
    }
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (defaultDomain && converters.count(node.op_type()))
      continue;
    InFlightDiagnostic diag = emitError(nodeLoc(node))
                              << "unsupported ONNX op '";
    if (!defaultDomain)
      diag << node.domain() << ".";
    diag << node.op_type() << "' (opset " << opset << ") at node '"
         << getNodeName(node) << "'";
    ok = false;
  }
}

/// Reads a value's declared dtype and (possibly symbolic) dims.
static uint64_t elementBytes(DType t) {
  switch (t) {
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  default:
    return 1;
  }
}

/// Whether a tensor of `shape` and `dtype` has a size in bytes that fits in
/// 64 bits: every size computed from a value's shape then does too.
static bool hasRepresentableSize(ArrayRef<int64_t> shape, DType dtype) {
  std::optional<int64_t> count = getCheckedNumElements(shape);
  int64_t bytes;
  return count &&
         !llvm::MulOverflow(*count, int64_t(elementBytes(dtype)), bytes);
}

static LogicalResult readValueType(const onnx::ValueInfoProto &info,
                                   DType &dtype,
                                   SmallVectorImpl<int64_t> &shape,
                                   SmallVectorImpl<std::string> &symbols) {
  if (!info.type().has_tensor_type())
    return failure();
  const auto &tt = info.type().tensor_type();
  dtype = tt.elem_type();
  if (!tt.has_shape())
    return failure();
  for (const auto &dim : tt.shape().dim()) {
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      shape.push_back(dim.dim_value());
      symbols.push_back("");
    } else {
      shape.push_back(ShapedType::kDynamic);
      symbols.push_back(dim.has_dim_param() ? dim.dim_param() : "?");
    }
  }
  return success();
}

LogicalResult
GraphImporter::importInputs(SmallVectorImpl<Type> &argTypes,
                            SmallVectorImpl<NamedAttribute> &argAttrs) {
  llvm::StringSet<> initializerNames;
  for (const auto &init : graph.initializer())
    initializerNames.insert(init.name());
  llvm::StringSet<> inputNames;
  bool ok = true;
  for (const auto &[index, info] : llvm::enumerate(graph.input())) {
    if (initializerNames.contains(info.name()))
      continue; // IR < 4 lists initializers as inputs too.
    // Inputs are fed by name.
    if (info.name().empty()) {
      emitError(fileLoc) << "graph input " << index << " has no name";
      ok = false;
      continue;
    }
    if (!inputNames.insert(info.name()).second) {
      emitError(fileLoc) << "graph input '" << info.name()
                         << "' is listed twice";
      ok = false;
      continue;
    }
    Location loc = NameLoc::get(StringAttr::get(ctx, info.name()), fileLoc);
    DType dtype = 0;
    SmallVector<int64_t> shape;
    SmallVector<std::string> symbols;
    bool hasShape = succeeded(readValueType(info, dtype, shape, symbols));
    if (!info.type().has_tensor_type()) {
      emitError(loc) << "input '" << info.name() << "' is not a tensor";
      ok = false;
      continue;
    }
    auto it = options.inputShapes.find(info.name());
    if (it != options.inputShapes.end()) {
      if (hasShape && shape.size() != it->second.size()) {
        emitError(loc) << "--input-shape gives input '" << info.name()
                       << "' rank " << it->second.size()
                       << " but the model declares rank " << shape.size();
        ok = false;
        continue;
      }
      shape.assign(it->second.begin(), it->second.end());
    } else if (!hasShape) {
      emitError(loc) << "input '" << info.name()
                     << "' has no declared shape; pass --input-shape "
                     << info.name() << "=<dims, e.g. 1x128>";
      ok = false;
      continue;
    } else {
      for (auto [i, d] : llvm::enumerate(shape)) {
        if (d != ShapedType::kDynamic)
          continue;
        emitError(loc) << "input '" << info.name() << "' has dynamic dim " << i
                       << " ('" << symbols[i] << "'); pass --input-shape "
                       << info.name() << "=<dims, e.g. 1x128>";
        ok = false;
        break;
      }
    }
    Type elementType = getElementType(ctx, dtype);
    if (!elementType) {
      emitError(loc) << "input '" << info.name()
                     << "' has unsupported element type " << dtypeName(dtype);
      ok = false;
      continue;
    }
    if (!ok)
      continue;
    if (!hasRepresentableSize(shape, dtype)) {
      emitError(loc) << "input '" << info.name() << "' has shape "
                     << formatShape(shape)
                     << ", whose size in bytes does not fit in 64 bits";
      ok = false;
      continue;
    }
    argTypes.push_back(RankedTensorType::get(shape, elementType));
    argAttrs.push_back(builder.getNamedAttr(
        TPDialect::kInputAttrName, builder.getStringAttr(info.name())));
    argNames.push_back(info.name());
    ImportedValue v;
    v.dtype = dtype;
    v.shape = shape;
    define(info.name(), std::move(v));
  }
  for (const auto &entry : options.inputShapes) {
    if (inputNames.contains(entry.getKey()))
      continue;
    std::string known;
    for (const auto &name : inputNames.keys())
      known += (known.empty() ? "'" : ", '") + name.str() + "'";
    emitError(fileLoc) << "--input-shape names '" << entry.getKey()
                       << "', which is not an input of the model (inputs: "
                       << known << ")";
    ok = false;
  }
  return success(ok);
}

/// Float initializers a converter reads at import rather than as weights:
/// Resize's roi and scales and Upsample's scales, which torch.onnx.export's
/// constant folding stores as initializers.
static void collectReadAtImport(const onnx::GraphProto &g,
                                llvm::StringSet<> &names) {
  for (const auto &node : g.node()) {
    for (const auto &attr : node.attribute()) {
      if (attr.has_g())
        collectReadAtImport(attr.g(), names);
      for (const auto &sub : attr.graphs())
        collectReadAtImport(sub, names);
    }
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      continue;
    int last = node.op_type() == "Resize"     ? 2
               : node.op_type() == "Upsample" ? 1
                                              : 0;
    for (int i = 1; i <= last && i < node.input_size(); ++i)
      names.insert(node.input(i));
  }
}

/// Integer tensors (shape-like, index buffers) and float scalars are folded
/// constants, and so are the small float tensors converters read at import;
/// every other float tensor is a weight that stays in the file.
static bool shouldInline(const onnx::TensorProto &t, bool readAtImport) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return false;
  std::optional<int64_t> count = getCheckedNumElements(
      SmallVector<int64_t>(t.dims().begin(), t.dims().end()));
  if (!count)
    return false;
  int64_t n = *count;
  if (isFloatDType(t.data_type()))
    return n <= 1 || (readAtImport && n <= 64);
  return n <= maxFoldedElements();
}

/// How many values the typed field that holds `t`'s data (float_data,
/// int32_data, ...) has, for data not in raw_data.
static uint64_t getTypedFieldCount(const onnx::TensorProto &t) {
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    return t.float_data_size();
  case onnx::TensorProto::DOUBLE:
    return t.double_data_size();
  case onnx::TensorProto::INT64:
    return t.int64_data_size();
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    return t.uint64_data_size();
  default:
    // INT32, INT16, INT8, UINT16, UINT8, BOOL, FLOAT16, BFLOAT16.
    return t.int32_data_size();
  }
}

LogicalResult
GraphImporter::importInitializers(SmallVectorImpl<Type> &argTypes,
                                  SmallVectorImpl<NamedAttribute> &argAttrs) {
  modelDir = path;
  llvm::sys::path::remove_filename(modelDir);
  llvm::StringSet<> readAtImport;
  collectReadAtImport(graph, readAtImport);
  bool ok = true;
  for (const auto &init : graph.initializer()) {
    Location loc = NameLoc::get(StringAttr::get(ctx, init.name()), fileLoc);
    SmallVector<int64_t> shape(init.dims().begin(), init.dims().end());
    if (llvm::any_of(shape, [](int64_t d) { return d < 0; })) {
      emitError(loc) << "initializer '" << init.name()
                     << "' has a negative dim in " << formatShape(shape);
      ok = false;
      continue;
    }
    if (!hasRepresentableSize(shape, init.data_type())) {
      emitError(loc) << "initializer '" << init.name() << "' has shape "
                     << formatShape(shape)
                     << ", whose size in bytes does not fit in 64 bits";
      ok = false;
      continue;
    }
    int64_t count = getNumElements(shape);
    uint64_t bytes = count * elementBytes(init.data_type());
    Type elementType = getElementType(ctx, init.data_type());
    if (!elementType) {
      emitError(loc) << "initializer '" << init.name()
                     << "' has unsupported element type "
                     << dtypeName(init.data_type());
      ok = false;
      continue;
    }
    ImportedValue v;
    v.dtype = init.data_type();
    v.shape = shape;
    if (shouldInline(init, readAtImport.contains(init.name()))) {
      std::string error;
      FailureOr<ConstTensor> c = readTensorProto(init, error);
      if (failed(c)) {
        emitError(loc) << "initializer '" << init.name() << "' " << error;
        ok = false;
        continue;
      }
      v.constant = std::move(*c);
    } else {
      std::optional<ExternalLocation> external;
      if (init.data_location() == onnx::TensorProto::EXTERNAL) {
        FailureOr<ExternalLocation> ext =
            checkExternalData(init, modelDir, bytes, loc);
        if (failed(ext)) {
          ok = false;
          continue;
        }
        externalFiles.insert(StringAttr::get(ctx, ext->file).getValue());
        external = *ext;
      } else if (init.has_raw_data() && init.raw_data().size() != bytes) {
        emitError(loc) << "initializer '" << init.name() << "' holds "
                       << init.raw_data().size() << " bytes but its shape "
                       << formatShape(shape) << " needs " << bytes;
        ok = false;
        continue;
      } else if (!init.has_raw_data() &&
                 getTypedFieldCount(init) != uint64_t(count)) {
        // The weight is streamed from this field into the rank files: a
        // short one would be read past its end.
        emitError(loc) << "initializer '" << init.name() << "' holds "
                       << getTypedFieldCount(init) << " values but its shape "
                       << formatShape(shape) << " needs " << count;
        ok = false;
        continue;
      }
      if (!options.tieWeights || !tieToEarlier(init, external)) {
        argTypes.push_back(RankedTensorType::get(shape, elementType));
        argAttrs.push_back(builder.getNamedAttr(
            TPDialect::kWeightAttrName, builder.getStringAttr(init.name())));
        argNames.push_back(init.name());
      }
    }
    define(init.name(), std::move(v));
  }
  return success(ok);
}

/// FNV-1a over the float32 bits of `values` ([rows, cols] row-major), read
/// in row-major order or, with `transposed`, column by column.
static uint64_t hashValues(ArrayRef<float> values, int64_t rows, int64_t cols,
                           bool transposed) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0, e = rows * cols; i < e; ++i) {
    int64_t at = transposed ? (i % rows) * cols + i / rows : i;
    uint32_t bits;
    std::memcpy(&bits, &values[at], 4);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

std::optional<std::vector<float>> GraphImporter::readFloats(
    const onnx::TensorProto &init,
    const std::optional<ExternalLocation> &external) const {
  int64_t count = 1;
  for (int64_t d : init.dims())
    count *= d;
  std::vector<float> values(count);
  uint64_t bytes = uint64_t(count) * sizeof(float);
  if (external) {
    // Checked by checkExternalData: inside the model's folder, long enough.
    SmallString<256> file(modelDir);
    llvm::sys::path::append(file, external->file);
    auto buffer =
        llvm::MemoryBuffer::getFileSlice(file, bytes, external->offset,
                                         /*IsVolatile=*/false);
    if (!buffer || (*buffer)->getBufferSize() != bytes)
      return std::nullopt;
    std::memcpy(values.data(), (*buffer)->getBufferStart(), bytes);
    return values;
  }
  if (init.has_raw_data()) {
    if (init.raw_data().size() != bytes)
      return std::nullopt;
    std::memcpy(values.data(), init.raw_data().data(), bytes);
    return values;
  }
  if (init.float_data_size() != count)
    return std::nullopt;
  std::copy(init.float_data().begin(), init.float_data().end(), values.begin());
  return values;
}

bool GraphImporter::tieToEarlier(
    const onnx::TensorProto &init,
    const std::optional<ExternalLocation> &external) {
  if (init.data_type() != onnx::TensorProto::FLOAT || init.dims_size() != 2)
    return false;
  std::optional<std::vector<float>> values = readFloats(init, external);
  if (!values || values->empty() || llvm::all_equal(*values))
    return false;
  int64_t rows = init.dims(0), cols = init.dims(1);
  for (bool transposed : {false, true}) {
    auto it = byValues.find(hashValues(*values, rows, cols, transposed));
    if (it == byValues.end())
      continue;
    const onnx::TensorProto &source = *it->second.init;
    if (source.dims(0) != (transposed ? cols : rows) ||
        source.dims(1) != (transposed ? rows : cols))
      continue;
    std::optional<std::vector<float>> other =
        readFloats(source, it->second.external);
    if (!other)
      continue;
    bool same = true;
    for (int64_t r = 0; same && r < rows; ++r)
      for (int64_t c = 0; same && c < cols; ++c)
        same = (*values)[r * cols + c] ==
               (*other)[transposed ? c * rows + r : r * cols + c];
    if (!same)
      continue;
    ties.push_back({init.name(), source.name(), transposed});
    return true;
  }
  byValues.emplace(hashValues(*values, rows, cols, false),
                   Stored{&init, external});
  return false;
}

LogicalResult GraphImporter::checkDeclaredType(const onnx::ValueInfoProto &info,
                                               const ImportedValue &v,
                                               Location loc) {
  if (v.isSequence() && info.type().has_tensor_type())
    return emitError(loc) << "value '" << info.name()
                          << "' is declared as a tensor but computes to a "
                             "sequence";
  DType dtype = 0;
  SmallVector<int64_t> shape;
  SmallVector<std::string> symbols;
  if (failed(readValueType(info, dtype, shape, symbols)))
    return success(); // Nothing declared, nothing to contradict.
  bool sameDType = dtype == 0 || dtype == v.dtype;
  bool sameShape = shape.size() == v.shape.size();
  for (size_t i = 0; sameShape && i < shape.size(); ++i)
    sameShape = shape[i] == ShapedType::kDynamic || shape[i] == v.shape[i];
  // A user-given --input-shape legitimately overrides declared dims.
  if (sameDType && (sameShape || !options.inputShapes.empty()))
    return success();
  return emitError(loc) << "value '" << info.name() << "' is declared as "
                        << dtypeName(dtype) << formatShape(shape)
                        << " but computes to " << dtypeName(v.dtype)
                        << formatShape(v.shape);
}

/// Checks the node's input and output counts against ONNX's own schema for
/// the model's opset, so that converters can rely on required inputs.
LogicalResult GraphImporter::checkArity(const onnx::NodeProto &node,
                                        Location loc) {
  // Debian's ONNX knows opsets up to its release; a newer model's schemas
  // may differ (ReduceMean took axes as an input from 18), so only the
  // opsets it knows are checked.
  const auto &versions =
      onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto known = versions.find(onnx::ONNX_DOMAIN);
  if (known == versions.end())
    return success();
  // Only optional inputs may be left out (an empty name); a variadic one
  // (Concat's, Sum's) may not. The newest schema this ONNX knows stands in
  // for a newer opset's here: which inputs are optional rarely changes.
  const onnx::OpSchema *latest = onnx::OpSchemaRegistry::Schema(
      node.op_type(), std::min<int64_t>(opset, known->second.second), "");
  if (latest) {
    const auto &formal = latest->inputs();
    for (int i = 0; i < node.input_size() && !formal.empty(); ++i) {
      const auto &param = formal[std::min<size_t>(i, formal.size() - 1)];
      if (node.input(i).empty() &&
          param.GetOption() == onnx::OpSchema::Variadic)
        return emitError(loc) << "node '" << getNodeName(node) << "' ("
                              << node.op_type() << "): input " << i
                              << " has an empty name; only optional inputs "
                                 "may be left out";
    }
  }
  if (opset > known->second.second) {
    // A newer opset may add inputs and outputs but keeps the ones an op
    // needs, which the converters read without checking (Concat's first,
    // Gather's indices).
    if (latest)
      for (int i = 0; i < node.input_size() &&
                      i < static_cast<int>(latest->inputs().size());
           ++i)
        if (node.input(i).empty() &&
            latest->inputs()[i].GetOption() == onnx::OpSchema::Single)
          return emitError(loc)
                 << "node '" << getNodeName(node) << "' (" << node.op_type()
                 << "): required input " << i << " ('"
                 << latest->inputs()[i].GetName() << "') is missing";
    if (latest && (node.input_size() < latest->min_input() ||
                   node.output_size() < latest->min_output()))
      return emitError(loc)
             << "node '" << getNodeName(node) << "' (" << node.op_type()
             << ") has " << node.input_size() << " inputs and "
             << node.output_size() << " outputs; opset " << known->second.second
             << ", the newest this ONNX knows, "
             << "expects at least " << latest->min_input() << " and "
             << latest->min_output();
    return success();
  }
  const onnx::OpSchema *schema =
      onnx::OpSchemaRegistry::Schema(node.op_type(), opset, "");
  if (!schema) {
    // An op of a later opset (SplitToSequence at opset 7): the converters
    // would read inputs nothing checked.
    if (const onnx::OpSchema *newest = onnx::OpSchemaRegistry::Schema(
            node.op_type(), known->second.second, ""))
      return emitError(loc)
             << "node '" << getNodeName(node) << "' (" << node.op_type()
             << ") is not an op of opset " << opset << "; it was introduced "
             << "in opset " << newest->since_version();
    return success();
  }
  int inputs = node.input_size(), outputs = node.output_size();
  auto fail = [&](StringRef what, int have, int lo, int hi) {
    InFlightDiagnostic diag = emitError(loc)
                              << "node '" << getNodeName(node) << "' ("
                              << node.op_type() << ") has " << have << " "
                              << what << "; opset " << opset << " expects ";
    if (lo == hi)
      diag << lo;
    else if (hi == std::numeric_limits<int>::max())
      diag << "at least " << lo;
    else
      diag << lo << " to " << hi;
    return diag;
  };
  if (inputs < schema->min_input() || inputs > schema->max_input())
    return fail("inputs", inputs, schema->min_input(), schema->max_input());
  if (outputs < schema->min_output() || outputs > schema->max_output())
    return fail("outputs", outputs, schema->min_output(), schema->max_output());
  const auto &formal = schema->inputs();
  for (int i = 0; i < inputs && i < static_cast<int>(formal.size()); ++i)
    if (node.input(i).empty() &&
        formal[i].GetOption() == onnx::OpSchema::Single)
      return emitError(loc) << "node '" << getNodeName(node) << "' ("
                            << node.op_type() << "): required input " << i
                            << " ('" << formal[i].GetName() << "') is missing";
  return success();
}

/// Inputs bound to one type parameter of the op's schema (Add's T, both
/// operands) must have one element type: converters build a single arith op
/// for them, which would not verify otherwise.
LogicalResult GraphImporter::checkInputTypes(const onnx::NodeProto &node,
                                             Location loc) {
  const auto &versions =
      onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto known = versions.find(onnx::ONNX_DOMAIN);
  if (known == versions.end() || opset > known->second.second)
    return success();
  const onnx::OpSchema *schema =
      onnx::OpSchemaRegistry::Schema(node.op_type(), opset, "");
  if (!schema || schema->inputs().empty())
    return success();
  llvm::StringSet<> params;
  for (const auto &constraint : schema->typeConstraintParams())
    params.insert(constraint.type_param_str);
  // Per type parameter: the first input bound to it, and its type.
  llvm::StringMap<std::pair<int, DType>> bound;
  const auto &formal = schema->inputs();
  for (int i = 0; i < node.input_size(); ++i) {
    const auto &param = formal[std::min<size_t>(i, formal.size() - 1)];
    if (node.input(i).empty() || !param.GetIsHomogeneous() ||
        !params.contains(param.GetTypeStr()))
      continue;
    const ImportedValue *v = lookup(node.input(i));
    if (v->isSequence())
      continue;
    auto [it, inserted] =
        bound.try_emplace(param.GetTypeStr(), std::make_pair(i, v->dtype));
    if (!inserted && it->second.second != v->dtype)
      return emitError(loc)
             << "node '" << getNodeName(node) << "' (" << node.op_type()
             << "): input " << i << " is " << dtypeName(v->dtype)
             << " but input " << it->second.first << " is "
             << dtypeName(it->second.second) << "; the op takes both as '"
             << param.GetTypeStr() << "'";
  }
  return success();
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node) {
  Location loc = nodeLoc(node);
  std::string name = getNodeName(node);
  if (node.output_size() == 0)
    return emitError(loc) << "node '" << name << "' (" << node.op_type()
                          << ") has no outputs";
  if (failed(checkArity(node, loc)))
    return failure();
  for (const auto &output : node.output())
    if (!output.empty() && lookup(output))
      return emitError(loc) << "node '" << name << "' (" << node.op_type()
                            << ") writes '" << output
                            << "', which an earlier node, input or "
                               "initializer already defines (ONNX values are "
                               "assigned once)";
  for (const auto &input : node.input()) {
    if (input.empty() || lookup(input))
      continue;
    return emitError(loc) << "node '" << name << "' (" << node.op_type()
                          << ") reads '" << input
                          << "', which no earlier node, input or initializer "
                             "defines";
  }
  if (!acceptsSequences(node.op_type()))
    for (const auto &input : node.input())
      if (!input.empty() && lookup(input)->isSequence())
        return emitError(loc) << "node '" << name << "' (" << node.op_type()
                              << ") reads '" << input
                              << "', a sequence; only sequence ops and Loop "
                                 "accept sequences";
  if (failed(checkInputTypes(node, loc)))
    return failure();
  NodeContext context(*this, node, builder, loc, opset);
  const OpConverter &convert = getConverters().lookup(node.op_type());
  if (failed(convert(context)))
    return failure();
  for (const auto &output : node.output()) {
    if (output.empty())
      continue;
    ImportedValue *v = lookup(output);
    if (!v)
      return emitError(loc)
             << "node '" << name << "' (" << node.op_type() << "): output '"
             << output << "' is not produced by this importer";
    // Shapes computed from constants (Expand, Tile, ConstantOfShape...)
    // are bounded here, so that no later op overflows computing a size.
    if (!v->isSequence() && !hasRepresentableSize(v->shape, v->dtype))
      return emitError(loc)
             << "node '" << name << "' (" << node.op_type() << "): output '"
             << output << "' has shape " << formatShape(v->shape)
             << ", whose size in bytes does not fit in 64 bits";
    auto it = declared.find(output);
    if (it != declared.end() && failed(checkDeclaredType(*it->second, *v, loc)))
      return failure();
  }
  if (!routing.empty() && failed(routing.visit(
                              node,
                              [&](StringRef value) -> const ImportedValue * {
                                return lookup(value);
                              },
                              loc)))
    return failure();
  return success();
}

FailureOr<SmallVector<ImportedValue>>
GraphImporter::importSubgraph(const onnx::GraphProto &body,
                              ArrayRef<ImportedValue> inputs, Location loc) {
  if (static_cast<size_t>(body.input_size()) != inputs.size())
    return emitError(loc) << "subgraph '" << body.name() << "' has "
                          << body.input_size() << " inputs; expected "
                          << inputs.size();
  scopes.emplace_back();
  llvm::scope_exit popScope([&] { scopes.pop_back(); });
  for (auto [info, v] : llvm::zip(body.input(), inputs))
    define(info.name(), v);
  // A body's initializers are its own constants: all are folded.
  for (const auto &init : body.initializer()) {
    std::string error;
    FailureOr<ConstTensor> c = readTensorProto(init, error);
    if (failed(c))
      return emitError(loc) << "subgraph '" << body.name() << "': initializer '"
                            << init.name() << "' " << error;
    ImportedValue v;
    v.dtype = c->dtype;
    v.shape = c->shape;
    v.constant = std::move(*c);
    define(init.name(), std::move(v));
  }
  for (const auto &node : body.node())
    if (failed(importNode(node)))
      return failure();
  SmallVector<ImportedValue> outputs;
  for (const auto &info : body.output()) {
    ImportedValue *v = lookup(info.name());
    if (!v)
      return emitError(loc) << "subgraph '" << body.name() << "': output '"
                            << info.name() << "' is never computed";
    outputs.push_back(*v);
  }
  return outputs;
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  ctx->loadDialect<TPDialect, func::FuncDialect, arith::ArithDialect,
                   math::MathDialect, linalg::LinalgDialect,
                   tensor::TensorDialect>();
  if (failed(checkOpset()))
    return nullptr;
  if (failed(checkSupportedOps()))
    return nullptr;
  SmallVector<Type> argTypes;
  SmallVector<NamedAttribute> argAttrs;
  bool inputsOk = succeeded(importInputs(argTypes, argAttrs));
  if (!inputsOk | failed(importInitializers(argTypes, argAttrs)))
    return nullptr;
  for (const auto &info : graph.value_info())
    declared[info.name()] = &info;
  for (const auto &info : graph.output())
    declared[info.name()] = &info;

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  module->getOperation()->setAttr(TPDialect::kModelAttrName,
                                  builder.getStringAttr(path));
  module->getOperation()->setAttr(TPDialect::kOpsetAttrName,
                                  builder.getI64IntegerAttr(opset));
  if (!externalFiles.empty()) {
    SmallVector<Attribute> files;
    for (StringRef f : externalFiles)
      files.push_back(builder.getStringAttr(f));
    module->getOperation()->setAttr(TPDialect::kExternalDataAttrName,
                                    builder.getArrayAttr(files));
  }
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, fileLoc, "main",
                                   builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  // All argument attributes at once: setting them one by one makes a new
  // array of every argument's dictionary each time (attributes live as
  // long as the context), quadratic in the number of weights.
  SmallVector<DictionaryAttr> argDicts;
  for (auto [i, name] : llvm::enumerate(argNames)) {
    BlockArgument arg = entry->getArgument(i);
    arg.setLoc(NameLoc::get(StringAttr::get(ctx, name), fileLoc));
    argDicts.push_back(builder.getDictionaryAttr(argAttrs[i]));
    lookup(name)->value = arg;
  }
  func.setAllArgAttrs(argDicts);
  builder.setInsertionPointToStart(entry);
  // A tied copy reads its source's argument (transposed).
  SmallVector<Attribute> tied;
  for (const Tie &tie : ties) {
    Value source = lookup(tie.source)->value;
    Location loc = NameLoc::get(StringAttr::get(ctx, tie.copy), fileLoc);
    if (tie.transposed) {
      auto type = cast<RankedTensorType>(source.getType());
      Value init = tensor::EmptyOp::create(
          builder, loc, {type.getDimSize(1), type.getDimSize(0)},
          type.getElementType());
      source = linalg::TransposeOp::create(builder, loc, source, init,
                                           ArrayRef<int64_t>{1, 0})
                   .getResult()[0];
    }
    lookup(tie.copy)->value = source;
    tied.push_back(TiedWeightAttr::get(ctx, StringAttr::get(ctx, tie.copy),
                                       StringAttr::get(ctx, tie.source),
                                       tie.transposed));
  }
  if (!tied.empty())
    module->getOperation()->setAttr(TPDialect::kTiedWeightsAttrName,
                                    builder.getArrayAttr(tied));

  for (const auto &node : graph.node())
    if (failed(importNode(node)))
      return nullptr;

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const auto &info : graph.output()) {
    Location loc = NameLoc::get(StringAttr::get(ctx, info.name()), fileLoc);
    ImportedValue *v = lookup(info.name());
    if (!v) {
      emitError(loc) << "graph output '" << info.name()
                     << "' is never computed";
      return nullptr;
    }
    if (failed(routing.checkOutput(info.name(), loc)))
      return nullptr;
    if (v->isSequence()) {
      emitError(loc) << "graph output '" << info.name()
                     << "' is a sequence; only tensors can be returned";
      return nullptr;
    }
    results.push_back(materialize(*v, builder, loc));
    resultTypes.push_back(results.back().getType());
  }
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(builder.getFunctionType(argTypes, resultTypes));
  SmallVector<DictionaryAttr> resultDicts;
  for (const auto &info : graph.output())
    resultDicts.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        TPDialect::kOutputAttrName, builder.getStringAttr(info.name()))));
  func.setAllResultAttrs(resultDicts);
  if (failed(verify(*module))) {
    emitError(fileLoc) << "internal error: the module imported from '" << path
                       << "' does not verify";
    return nullptr;
  }
  return module;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

/// An ONNX model declares its input types: a type given with
/// --input-shape must agree.
static LogicalResult checkInputTypes(const onnx::ModelProto &model,
                                     const ONNXImportOptions &options,
                                     Location loc) {
  for (const auto &entry : options.inputTypes) {
    const onnx::ValueInfoProto *declared = nullptr;
    for (const onnx::ValueInfoProto &input : model.graph().input())
      if (input.name() == entry.getKey())
        declared = &input;
    if (!declared)
      continue; // reported with the shape
    int32_t want = getElementTypeByName(entry.getValue());
    int32_t have = declared->type().tensor_type().elem_type();
    if (have != want)
      return emitError(loc)
             << "--input-shape gives input '" << entry.getKey() << "' type "
             << entry.getValue()
             << ", but the model declares ONNX element type " << have;
  }
  return success();
}

/// The fold limit of the import under way on this thread.
static thread_local int64_t currentMaxFoldedElements =
    ONNXImportOptions().maxFoldedElements;

int64_t mlir::tp::onnx_import::maxFoldedElements() {
  return currentMaxFoldedElements;
}

OwningOpRef<ModuleOp>
mlir::tp::importONNXBuffer(StringRef bytes, StringRef path, MLIRContext *ctx,
                           const ONNXImportOptions &options) {
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  llvm::SaveAndRestore<int64_t> foldLimit(currentMaxFoldedElements,
                                          options.maxFoldedElements);
  onnx::ModelProto model;
  if (isTorchScriptFile(bytes)) {
    if (failed(loadTorchScript(path, &options, loc, model)))
      return nullptr;
  } else {
    if (failed(parseModel(bytes, path, loc, model)) ||
        failed(checkInputTypes(model, options, loc)))
      return nullptr;
  }
  DenseRouting routing;
  if (failed(rewriteDenseRouting(*model.mutable_graph(), loc, routing)))
    return nullptr;
  return GraphImporter(ctx, model, path, options, std::move(routing)).run();
}

FailureOr<SmallVector<ONNXGraphInput>>
mlir::tp::readONNXGraphInputs(StringRef path, MLIRContext *ctx) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(UnknownLoc::get(ctx))
           << "cannot open '" << path << "': " << buffer.getError().message();
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  onnx::ModelProto model;
  if (failed(parseModel((*buffer)->getBuffer(), path, loc, model)))
    return failure();
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &init : model.graph().initializer())
    initializers.insert(init.name());
  SmallVector<ONNXGraphInput> inputs;
  for (const onnx::ValueInfoProto &info : model.graph().input()) {
    if (initializers.contains(info.name()))
      continue;
    ONNXGraphInput input;
    input.name = info.name();
    if (info.type().has_tensor_type() && info.type().tensor_type().has_shape())
      for (const auto &dim : info.type().tensor_type().shape().dim()) {
        bool known = dim.has_dim_value() && dim.dim_value() >= 0;
        input.dims.push_back(known ? dim.dim_value() : -1);
        input.dimParams.push_back(known ? "" : dim.dim_param());
      }
    inputs.push_back(std::move(input));
  }
  return inputs;
}

SmallVector<StringRef> mlir::tp::getSupportedONNXOps() {
  SmallVector<StringRef> ops;
  for (const auto &entry : getConverters())
    ops.push_back(entry.getKey());
  llvm::sort(ops);
  return ops;
}

const ConverterMap &mlir::tp::onnx_import::getConverters() {
  static const ConverterMap converters = [] {
    ConverterMap map;
    populateElementwiseConverters(map);
    populateShapeConverters(map);
    populateDataMovementConverters(map);
    populateIndexingConverters(map);
    populateMatMulConverters(map);
    populateReductionConverters(map);
    populateResizeConverters(map);
    populateConvConverters(map);
    populateSequenceConverters(map);
    populateIfConverters(map);
    populateLoopConverters(map);
    populateLossConverters(map);
    populateTopKConverters(map);
    return map;
  }();
  return converters;
}
