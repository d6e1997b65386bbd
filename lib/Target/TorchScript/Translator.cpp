//===- Translator.cpp - typed TorchScript graph to ONNX nodes -------------===//

#include "Translator.h"

#include <algorithm>
#include <cstring>
#include <set>

using namespace tp::torchscript;
using torch::jit::Node;
using torch::jit::Value;

Attr::Attr(const char *name, int64_t value) {
  proto.set_name(name);
  proto.set_type(onnx::AttributeProto::INT);
  proto.set_i(value);
}

Attr::Attr(const char *name, float value) {
  proto.set_name(name);
  proto.set_type(onnx::AttributeProto::FLOAT);
  proto.set_f(value);
}

Attr::Attr(const char *name, std::vector<int64_t> values) {
  proto.set_name(name);
  proto.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values)
    proto.add_ints(v);
}

Attr::Attr(const char *name, const char *value) {
  proto.set_name(name);
  proto.set_type(onnx::AttributeProto::STRING);
  proto.set_s(value);
}

int32_t tp::torchscript::onnxElementType(c10::ScalarType type,
                                         const std::string &what) {
  switch (type) {
  case c10::ScalarType::Float:
    return onnx::TensorProto::FLOAT;
  case c10::ScalarType::Double:
    return onnx::TensorProto::DOUBLE;
  case c10::ScalarType::Half:
    return onnx::TensorProto::FLOAT16;
  case c10::ScalarType::BFloat16:
    return onnx::TensorProto::BFLOAT16;
  case c10::ScalarType::Long:
    return onnx::TensorProto::INT64;
  case c10::ScalarType::Int:
    return onnx::TensorProto::INT32;
  case c10::ScalarType::Short:
    return onnx::TensorProto::INT16;
  case c10::ScalarType::Char:
    return onnx::TensorProto::INT8;
  case c10::ScalarType::Byte:
    return onnx::TensorProto::UINT8;
  case c10::ScalarType::Bool:
    return onnx::TensorProto::BOOL;
  default:
    throw ConvertError(what + " has element type " +
                       std::string(c10::toString(type)) +
                       ", which tp-mlir does not support");
  }
}

Translator::Translator(const std::string &path, LoadedGraph &loaded,
                       const ArchiveState &archive, onnx::GraphProto &graph)
    : path(path), loaded(loaded), archive(archive),
      locations(archive.locations), graph(graph) {
  size_t slash = path.find_last_of('/');
  archiveName = slash == std::string::npos ? path : path.substr(slash + 1);
}

void Translator::fail(const std::string &what) const {
  throw ConvertError(path + ": " + (node ? describeNode(node) + ": " : "") +
                     what);
}

bool Translator::isNone(size_t i) const {
  if (i >= numInputs())
    return true;
  c10::optional<c10::IValue> value = torch::jit::toIValue(in(i));
  return value && value->isNone();
}

c10::IValue Translator::constant(size_t i) const {
  if (i >= numInputs())
    fail("expected an input " + std::to_string(i));
  c10::optional<c10::IValue> value = torch::jit::toIValue(in(i));
  if (!value)
    fail("input " + std::to_string(i) + " ('" + in(i)->debugName() +
         "') is not a constant; it depends on the values of the model's "
         "inputs, which a static graph cannot");
  return *value;
}

int64_t Translator::intArg(size_t i) const {
  c10::IValue value = constant(i);
  if (value.isInt())
    return value.toInt();
  if (value.isTensor() && value.toTensor().dim() == 0)
    return value.toTensor().item<int64_t>();
  fail("input " + std::to_string(i) + " must be an int");
}

double Translator::doubleArg(size_t i) const {
  c10::IValue value = constant(i);
  if (value.isDouble())
    return value.toDouble();
  if (value.isInt())
    return static_cast<double>(value.toInt());
  if (value.isBool())
    return value.toBool() ? 1.0 : 0.0;
  if (value.isTensor() && value.toTensor().dim() == 0)
    return value.toTensor().item<double>();
  fail("input " + std::to_string(i) + " must be a number");
}

bool Translator::boolArg(size_t i) const {
  c10::IValue value = constant(i);
  if (value.isBool())
    return value.toBool();
  if (value.isInt())
    return value.toInt() != 0;
  fail("input " + std::to_string(i) + " must be a bool");
}

std::vector<int64_t> Translator::intListArg(size_t i) const {
  c10::IValue value = constant(i);
  if (value.isIntList())
    return value.toIntVector();
  if (value.isInt())
    return {value.toInt()};
  fail("input " + std::to_string(i) + " must be a list of ints");
}

bool Translator::isScalar(size_t i) const {
  c10::optional<c10::IValue> value = torch::jit::toIValue(in(i));
  if (!value)
    return false;
  return value->isInt() || value->isDouble() || value->isBool() ||
         (value->isTensor() && value->toTensor().dim() == 0);
}

int32_t Translator::typeOf(const Value *v) const {
  auto type = v->type()->cast<c10::TensorType>();
  if (!type || !type->scalarType())
    fail("value '" + v->debugName() + "' is not a typed tensor");
  return onnxElementType(*type->scalarType(),
                         path + ": value '" + v->debugName() + "'");
}

std::vector<int64_t> Translator::sizesOf(const Value *v) const {
  auto type = v->type()->cast<c10::TensorType>();
  c10::optional<std::vector<int64_t>> sizes =
      type ? type->sizes().concrete_sizes() : c10::nullopt;
  if (!sizes)
    fail("value '" + v->debugName() + "' has no known shape");
  return *sizes;
}

int64_t Translator::dim(int64_t d, int64_t rank) const {
  int64_t normalized = d < 0 ? d + rank : d;
  if (normalized < 0 || normalized >= std::max<int64_t>(rank, 1))
    fail("dim " + std::to_string(d) + " is out of range for rank " +
         std::to_string(rank));
  return normalized;
}

std::string Translator::fresh(const std::string &hint) {
  return hint + "_" + std::to_string(counter++);
}

std::string Translator::emit(const char *op, std::vector<std::string> inputs,
                             std::initializer_list<Attr> attrs, size_t outputs,
                             std::vector<std::string> *names) {
  onnx::NodeProto *proto = graph.add_node();
  proto->set_op_type(op);
  std::string name = node ? describeNode(node) : std::string(op);
  proto->set_name(name + " #" + std::to_string(graph.node_size()));
  for (std::string &input : inputs)
    proto->add_input(std::move(input));
  for (const Attr &attr : attrs)
    *proto->add_attribute() = attr.proto;
  for (size_t i = 0; i < outputs; ++i) {
    std::string output = fresh(op);
    proto->add_output(output);
    if (names)
      names->push_back(output);
  }
  return proto->output(0);
}

static onnx::TensorProto tensorProto(const at::Tensor &tensor,
                                     int32_t elementType) {
  at::Tensor dense = tensor.contiguous();
  onnx::TensorProto proto;
  proto.set_data_type(elementType);
  for (int64_t d : dense.sizes())
    proto.add_dims(d);
  proto.set_raw_data(dense.data_ptr(), dense.numel() * dense.element_size());
  return proto;
}

std::string Translator::constTensor(const at::Tensor &tensor) {
  std::string name = fresh("const");
  onnx::NodeProto *proto = graph.add_node();
  proto->set_op_type("Constant");
  proto->set_name(name);
  proto->add_output(name);
  onnx::AttributeProto *value = proto->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() =
      tensorProto(tensor, onnxElementType(tensor.scalar_type(), "a constant"));
  return name;
}

std::string Translator::constInts(const std::vector<int64_t> &values) {
  return constTensor(at::tensor(values, at::kLong));
}

std::string Translator::constScalar(double value, int32_t type) {
  at::ScalarType scalar;
  switch (type) {
  case onnx::TensorProto::DOUBLE:
    scalar = at::kDouble;
    break;
  case onnx::TensorProto::FLOAT16:
    scalar = at::kHalf;
    break;
  case onnx::TensorProto::BFLOAT16:
    scalar = at::kBFloat16;
    break;
  case onnx::TensorProto::INT64:
    scalar = at::kLong;
    break;
  case onnx::TensorProto::INT32:
    scalar = at::kInt;
    break;
  case onnx::TensorProto::BOOL:
    scalar = at::kBool;
    break;
  default:
    scalar = at::kFloat;
  }
  return constTensor(at::scalar_tensor(value, at::TensorOptions(scalar)));
}

std::string Translator::cast(const std::string &name, int32_t from,
                             int32_t to) {
  if (!to || from == to)
    return name;
  return emit("Cast", {name}, {{"to", int64_t(to)}});
}

std::string Translator::weight(Value *v) {
  const std::string &attributePath = loaded.weights.at(v);
  const at::Tensor &tensor = loaded.weightTensors.at(v);
  int32_t type =
      onnxElementType(tensor.scalar_type(), "weight '" + attributePath + "'");
  auto location = locations.find(attributePath);
  std::string key = attributePath, name = attributePath;
  if (location != locations.end()) {
    // Tied weights (an LM head that is the embedding) are one range of the
    // archive under several paths: one initializer, named by the first
    // path in sort order, whichever use comes first.
    std::string range = std::to_string(location->second.offset) + ":" +
                        std::to_string(location->second.bytes);
    key = range + ":" + std::to_string(type);
    for (int64_t d : tensor.sizes())
      key += "x" + std::to_string(d);
    for (const auto &[path, other] : locations)
      if (other.offset == location->second.offset &&
          other.bytes == location->second.bytes && path < name)
        name = path;
  }
  auto known = initializers.find(key);
  if (known != initializers.end())
    return known->second;

  for (const auto &[otherKey, otherName] : initializers)
    if (otherName == name)
      name = attributePath; // the same range seen with another shape
  onnx::TensorProto *proto = graph.add_initializer();
  proto->set_name(name);
  proto->set_data_type(type);
  for (int64_t d : tensor.sizes())
    proto->add_dims(d);
  if (location != locations.end()) {
    // Streamed from the archive by the artifact writer.
    proto->set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char *k, const std::string &value) {
      onnx::StringStringEntryProto *entry = proto->add_external_data();
      entry->set_key(k);
      entry->set_value(value);
    };
    add("location", archiveName);
    add("offset", std::to_string(location->second.offset));
    add("length", std::to_string(location->second.bytes));
  } else {
    // Not a plain record of the archive (a strided view): its bytes, read
    // from the file (the loaded tensor may not have been), go into the
    // model we hand on.
    auto stored = archive.tensors.find(attributePath);
    if (stored == archive.tensors.end())
      fail("weight '" + attributePath + "' is not in the archive's data.pkl");
    *proto = tensorProto(stored->second, type);
    proto->set_name(name);
  }
  initializers[key] = name;
  return name;
}

std::string Translator::tensorName(Value *v) {
  auto known = names.find(v);
  if (known != names.end())
    return known->second;
  if (loaded.weights.count(v))
    return names[v] = weight(v);
  c10::optional<c10::IValue> value = torch::jit::toIValue(v);
  if (value && value->isTensor())
    return names[v] = constTensor(value->toTensor());
  fail("value '" + v->debugName() + "' is not a tensor this translation made");
}

std::string Translator::operand(size_t i, int32_t type) {
  Value *v = in(i);
  c10::optional<c10::IValue> value = torch::jit::toIValue(v);
  if (value && (value->isInt() || value->isDouble() || value->isBool()))
    return constScalar(doubleArg(i), type ? type : onnx::TensorProto::FLOAT);
  if (value && value->isTensor() && value->toTensor().dim() == 0 && type)
    return constScalar(value->toTensor().item<double>(), type);
  std::string name = tensorName(v);
  return type ? cast(name, typeOf(v), type) : name;
}

void Translator::define(const std::string &name, size_t i) {
  names[out(i)] = name;
}

/// Ops whose result shares its operand's storage.
static const std::set<std::string> &viewOps() {
  static const std::set<std::string> ops = {
      "aten::slice",     "aten::select",    "aten::view",
      "aten::expand",    "aten::transpose", "aten::permute",
      "aten::unsqueeze", "aten::squeeze",   "aten::narrow",
      "aten::reshape",   "aten::t",         "aten::as_strided"};
  return ops;
}

bool tp::torchscript::isViewOp(const std::string &kind) {
  return viewOps().count(kind) != 0;
}

/// Ops that are the identity on a static inference graph (a dropout left
/// here has train=False: loadGraph rejects the others).
static const std::set<std::string> &identityOps() {
  static const std::set<std::string> ops = {
      "aten::contiguous",     "aten::detach",     "aten::clone",
      "aten::alias",          "aten::lift_fresh", "aten::dropout",
      "aten::feature_dropout"};
  return ops;
}

static const ConverterMap &converters() {
  static const ConverterMap map = [] {
    ConverterMap m;
    populateElementwiseConverters(m);
    populateTensorConverters(m);
    populateNNConverters(m);
    populateAttentionConverters(m);
    return m;
  }();
  return map;
}

static void
addValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> *list,
             const std::string &name, int32_t type,
             const std::vector<int64_t> &shape) {
  onnx::ValueInfoProto *info = list->Add();
  info->set_name(name);
  onnx::TypeProto_Tensor *tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(type);
  onnx::TensorShapeProto *dims = tensor->mutable_shape();
  for (int64_t d : shape)
    dims->add_dim()->set_dim_value(d);
}

void Translator::run() {
  torch::jit::Graph &g = *loaded.graph;
  for (size_t i = 0; i < loaded.inputNames.size(); ++i) {
    const std::string &name = loaded.inputNames[i];
    Value *input = g.inputs()[i + 1];
    names[input] = name;
    addValueInfo(graph.mutable_input(), name, typeOf(input), sizesOf(input));
  }

  const ConverterMap &map = converters();
  const std::set<std::string> &identities = identityOps();
  for (Node *n : g.nodes()) {
    node = n;
    c10::Symbol kind = n->kind();
    // Lists are read by their consumers (aten::cat) and unpacked by their
    // producers (aten::split): see TensorOps.cpp.
    if (kind == c10::prim::Constant || kind == c10::prim::GetAttr ||
        kind == c10::prim::ListUnpack || kind == c10::prim::ListConstruct)
      continue;
    std::string name = kind.toQualString();
    if (identities.count(name)) {
      names[n->output()] = tensorName(n->input(0));
      continue;
    }
    // An in-place op that mutation removal left (its tensor is aliased):
    // the functional op, whose result later reads of the tensor see; a
    // write into a view is written back through it (writeThroughViews).
    bool inPlace = name.size() > 1 && name.back() == '_' &&
                   name != "aten::copy_" &&
                   map.count(name.substr(0, name.size() - 1));
    if (inPlace) {
      map.at(name.substr(0, name.size() - 1))(*this);
      std::string producer = n->input(0)->node()->kind().toQualString();
      if (isViewOp(producer))
        writeThroughViews(*this, n->input(0), names.at(n->output()));
      else
        rebind(n->input(0), names.at(n->output()));
      continue;
    }
    auto converter = map.find(name);
    if (converter == map.end())
      fail("unsupported aten op (tp-mlir's TorchScript frontend converts " +
           std::to_string(map.size() + identities.size()) +
           " ops; tp-import-torchscript --list-ops lists them)");
    converter->second(*this);
  }
  node = nullptr;

  size_t count = g.outputs().size();
  for (size_t i = 0; i < count; ++i) {
    Value *output = g.outputs()[i];
    if (!output->type()->cast<c10::TensorType>())
      throw ConvertError(path + ": forward() returns a " +
                         output->type()->annotation_str() + " as output " +
                         std::to_string(i) +
                         "; only tensors (in tuples) are supported");
    std::string name =
        count == 1 ? std::string("output") : "output_" + std::to_string(i);
    emit("Identity", {tensorName(output)});
    graph.mutable_node(graph.node_size() - 1)->set_output(0, name);
    addValueInfo(graph.mutable_output(), name, typeOf(output), sizesOf(output));
  }
}

std::vector<std::string> tp::torchscript::supportedAtenOps() {
  std::vector<std::string> ops;
  for (const auto &entry : converters())
    ops.push_back(entry.first);
  for (const std::string &op : identityOps())
    ops.push_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

void tp::torchscript::translateGraph(const std::string &path,
                                     LoadedGraph &loaded,
                                     const ArchiveState &archive,
                                     onnx::ModelProto &model) {
  Translator(path, loaded, archive, *model.mutable_graph()).run();
}
