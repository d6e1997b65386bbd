//===- NodeContext.cpp - what a converter sees of one ONNX node -----------===//
//
// Inputs (SSA values or import-time constants), attributes, results and
// diagnostics of the node being converted.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::onnx_import;

std::string mlir::tp::onnx_import::getNodeName(const onnx::NodeProto &node) {
  if (!node.name().empty())
    return node.name();
  if (node.output_size() && !node.output(0).empty())
    return node.output(0);
  return "<unnamed " + node.op_type() + ">";
}

NodeContext::NodeContext(GraphImporter &importer, const onnx::NodeProto &node,
                         OpBuilder &builder, Location loc, int64_t opset)
    : node(node), b(builder), loc(loc), opset(opset), importer(importer) {}

bool NodeContext::hasInput(unsigned i) const {
  return i < getNumInputs() && !node.input(i).empty();
}

const ImportedValue &NodeContext::input(unsigned i) const {
  return *importer.lookup(node.input(i));
}

Value NodeContext::operand(unsigned i) {
  return importer.materialize(*importer.lookup(node.input(i)), b, loc);
}

const ConstTensor *NodeContext::constInput(unsigned i) const {
  if (!hasInput(i))
    return nullptr;
  const ImportedValue &v = input(i);
  return v.constant ? &*v.constant : nullptr;
}

std::optional<SmallVector<int64_t>> NodeContext::constInts(unsigned i,
                                                           StringRef what) {
  const ConstTensor *c = constInput(i);
  if (!c) {
    emitError() << "the " << what << " (input " << i
                << ") must be known at import time; it depends on a model "
                   "input or weight";
    return std::nullopt;
  }
  SmallVector<int64_t> out;
  for (int64_t k = 0, e = c->numel(); k < e; ++k)
    out.push_back(c->getAsInt(k));
  return out;
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t NodeContext::attrInt(StringRef name, int64_t dflt) const {
  const auto *a = attr(name);
  return a ? a->i() : dflt;
}

float NodeContext::attrFloat(StringRef name, float dflt) const {
  const auto *a = attr(name);
  return a ? a->f() : dflt;
}

std::string NodeContext::attrString(StringRef name, StringRef dflt) const {
  const auto *a = attr(name);
  return a ? a->s() : dflt.str();
}

std::optional<SmallVector<int64_t>>
NodeContext::attrInts(StringRef name) const {
  const auto *a = attr(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

bool NodeContext::hasOutput(unsigned i) const {
  return i < getNumOutputs() && !node.output(i).empty();
}

void NodeContext::setResult(unsigned i, Value value, DType dtype) {
  if (!hasOutput(i))
    return;
  ImportedValue v;
  v.dtype = dtype;
  v.shape = llvm::to_vector(cast<RankedTensorType>(value.getType()).getShape());
  v.value = value;
  importer.define(node.output(i), std::move(v));
}

void NodeContext::setConstResult(unsigned i, ConstTensor value) {
  if (!hasOutput(i))
    return;
  ImportedValue v;
  v.dtype = value.dtype;
  v.shape = value.shape;
  v.constant = std::move(value);
  importer.define(node.output(i), std::move(v));
}

void NodeContext::setValue(unsigned i, ImportedValue v) {
  if (hasOutput(i))
    importer.define(node.output(i), std::move(v));
}

FailureOr<SmallVector<ImportedValue>>
NodeContext::importSubgraph(const onnx::GraphProto &body,
                            ArrayRef<ImportedValue> inputs) {
  return importer.importSubgraph(body, inputs, loc);
}

InFlightDiagnostic NodeContext::emitError() {
  std::string name = getNodeName(node);
  return mlir::emitError(loc)
         << "node '" << name << "' (" << node.op_type() << "): ";
}

std::optional<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    emitError() << "axis " << axis << " is out of range for rank " << rank;
    return std::nullopt;
  }
  return axis < 0 ? axis + rank : axis;
}

bool NodeContext::allInputsConstant() const {
  for (unsigned i = 0; i < getNumInputs(); ++i) {
    if (!hasInput(i))
      continue;
    const ConstTensor *c = constInput(i);
    if (!c || c->numel() > maxFoldedElements())
      return false;
  }
  return true;
}
