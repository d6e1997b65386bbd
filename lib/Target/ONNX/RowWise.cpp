//===- RowWise.cpp - the check that a dense token list stays row-wise -----===//
//
// DenseRouting.cpp replaces a run-time token list by all tokens. That is
// exact only if row i of every value computed from the list depends on row
// i of its inputs alone: then the rows of the routed tokens are what the
// original graph computed for them, and the rest are never written. This
// follows the list through the graph as it imports (with every shape
// known) and names the first node that mixes rows.
//
//===----------------------------------------------------------------------===//

#include "DenseRouting.h"

#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

/// Elementwise ops, n-ary with numpy broadcasting, and their unary kin.
bool isElementwise(StringRef op) {
  static const llvm::StringSet<> ops = {
      "Abs",         "Add",      "And",         "Cast",
      "Ceil",        "Clip",     "Cos",         "Div",
      "Elu",         "Equal",    "Erf",         "Exp",
      "Floor",       "Gelu",     "Greater",     "GreaterOrEqual",
      "HardSigmoid", "Identity", "IsInf",       "IsNaN",
      "LeakyRelu",   "Less",     "LessOrEqual", "Log",
      "Max",         "Mean",     "Min",         "Mod",
      "Mul",         "Neg",      "Not",         "Or",
      "Pow",         "PRelu",    "Reciprocal",  "Relu",
      "Round",       "Selu",     "Sigmoid",     "Sign",
      "Sin",         "Softplus", "Softsign",    "Sqrt",
      "Sub",         "Sum",      "Tanh",        "Where",
      "Xor"};
  return ops.contains(op);
}

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

} // namespace

LogicalResult
DenseRouting::visit(const onnx::NodeProto &node,
                    function_ref<const ImportedValue *(StringRef)> lookup,
                    Location loc) {
  // The list inputs and their row dims.
  SmallVector<std::optional<int64_t>> axisOf;
  const Rows *first = nullptr;
  for (const std::string &in : node.input()) {
    auto it = in.empty() ? rows.end() : rows.find(in);
    axisOf.push_back(it == rows.end() ? std::nullopt
                                      : std::optional(it->second.axis));
    if (it != rows.end() && !first)
      first = &it->second;
  }
  if (!first)
    return success();
  std::string nonZero = first->nonZero;
  StringRef op = node.op_type();
  auto shapeOf = [&](int i) -> ArrayRef<int64_t> {
    return lookup(node.input(i))->shape;
  };
  auto outShape = [&](int i) -> ArrayRef<int64_t> {
    return lookup(node.output(i))->shape;
  };
  auto attrInt = [&](StringRef name, int64_t dflt) {
    for (const auto &a : node.attribute())
      if (a.name() == name)
        return a.i();
    return dflt;
  };
  auto notRowWise = [&](StringRef why) {
    return emitError(loc) << "NonZero at node '" << nonZero
                          << "': the expert body at node '" << getNodeName(node)
                          << "' (" << op << ") is not row-wise: " << why;
  };
  auto onlyInput0 = [&]() {
    for (size_t i = 1; i < axisOf.size(); ++i)
      if (axisOf[i])
        return false;
    return axisOf[0].has_value();
  };
  auto setAll = [&](int64_t axis) {
    for (const std::string &out : node.output())
      if (!out.empty())
        rows[out] = Rows{axis, nonZero};
    return success();
  };
  int64_t numInputs = node.input_size();

  // The end of a list: a scatter DenseRouting.cpp masked.
  if (op == "ScatterElements") {
    if (!sinks.contains(node.output(0)))
      return notRowWise("a scatter of token rows that does not write them "
                        "back to their tokens");
    if (axisOf[0] || !axisOf[1] || !axisOf[2] || *axisOf[1] != *axisOf[2])
      return notRowWise("the indices and updates are not rows of one list");
    return success();
  }
  // The shape of a list is known at import: nothing row-dependent.
  if (op == "Shape" || op == "Size")
    return success();

  if (isElementwise(op)) {
    ArrayRef<int64_t> out = outShape(0);
    int64_t rank = out.size();
    std::optional<int64_t> axis;
    for (int64_t i = 0; i < numInputs; ++i) {
      if (!axisOf[i])
        continue;
      int64_t a = *axisOf[i] + rank - int64_t(shapeOf(i).size());
      if (axis && *axis != a)
        return notRowWise("its inputs are lists on different dims");
      axis = a;
    }
    for (int64_t i = 0; i < numInputs; ++i) {
      if (axisOf[i] || node.input(i).empty())
        continue;
      ArrayRef<int64_t> s = shapeOf(i);
      int64_t at = *axis - (rank - int64_t(s.size()));
      if (at >= 0 && s[at] != 1)
        return notRowWise("input " + std::to_string(i) +
                          " is not a list but has rows that broadcast "
                          "against it");
    }
    return setAll(*axis);
  }
  if (op == "MatMul" || op == "Gemm") {
    ArrayRef<int64_t> a = shapeOf(0);
    if (!onlyInput0() || a.size() < 2 || *axisOf[0] == int64_t(a.size()) - 1 ||
        (op == "Gemm" && attrInt("transA", 0) != 0))
      return notRowWise("a product that contracts or multiplies by the rows");
    if (shapeOf(1).size() > 2)
      return notRowWise("a batched product of the rows");
    if (op == "Gemm" && numInputs > 2 && !node.input(2).empty()) {
      ArrayRef<int64_t> c = shapeOf(2);
      if (c.size() == 2 && c[0] != 1)
        return notRowWise("a bias with rows of its own");
    }
    if (shapeOf(1).size() == 1)
      return setAll(*axisOf[0]);
    return setAll(*axisOf[0] + outShape(0).size() - a.size());
  }
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
      op == "Unsqueeze") {
    if (!onlyInput0())
      return notRowWise("the list is used as a shape");
    // The row dim stays a dim of its own iff some output dim has its size
    // and the same number of elements before it.
    ArrayRef<int64_t> in = shapeOf(0), out = outShape(0);
    int64_t a = *axisOf[0];
    int64_t before = product(in.take_front(a));
    for (size_t d = 0; d < out.size(); ++d)
      if (out[d] == in[a] && product(out.take_front(d)) == before)
        return setAll(d);
    return notRowWise("the reshape merges the rows with another dim");
  }
  if (op == "Transpose") {
    if (!onlyInput0())
      return notRowWise("unexpected list input");
    int64_t rank = shapeOf(0).size();
    SmallVector<int64_t> perm;
    for (const auto &at : node.attribute())
      if (at.name() == "perm")
        perm.assign(at.ints().begin(), at.ints().end());
    if (perm.empty())
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    for (int64_t d = 0; d < rank; ++d)
      if (perm[d] == *axisOf[0])
        return setAll(d);
    return notRowWise("a malformed perm");
  }
  if (op == "Expand") {
    if (!onlyInput0())
      return notRowWise("the list is used as a shape");
    int64_t a = *axisOf[0] + outShape(0).size() - shapeOf(0).size();
    if (outShape(0)[a] != shapeOf(0)[*axisOf[0]])
      return notRowWise("the rows are broadcast");
    return setAll(a);
  }
  if (op == "Gather") {
    int64_t rank = shapeOf(0).size();
    int64_t g = attrInt("axis", 0);
    if (g < 0)
      g += rank;
    if (axisOf[0] && !axisOf[1] && g != *axisOf[0])
      return setAll(*axisOf[0] < g
                        ? *axisOf[0]
                        : *axisOf[0] + int64_t(shapeOf(1).size()) - 1);
    if (!axisOf[0] && axisOf[1])
      return setAll(g + *axisOf[1]);
    return notRowWise("a gather across the rows");
  }
  if (op == "GatherElements") {
    if (axisOf[0] || !axisOf[1])
      return notRowWise("a gather across the rows");
    return setAll(*axisOf[1]);
  }
  if (op == "Concat" || op == "Split") {
    int64_t rank = shapeOf(0).size();
    int64_t c = attrInt("axis", 0);
    if (c < 0)
      c += rank;
    int64_t inputs = op == "Concat" ? numInputs : 1;
    for (int64_t i = 0; i < inputs; ++i)
      if (!axisOf[i] || *axisOf[i] != *axisOf[0])
        return notRowWise("it joins the list with values that are not");
    if (c == *axisOf[0])
      return notRowWise("it joins or splits along the rows");
    return setAll(*axisOf[0]);
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    int64_t rank = shapeOf(0).size();
    int64_t s = attrInt("axis", -1);
    if (s < 0)
      s += rank;
    // Before opset 13 the normalized dims are `axis` and all after it.
    if (!onlyInput0() || s <= *axisOf[0])
      return notRowWise("it normalizes over the rows");
    return setAll(*axisOf[0]);
  }
  return notRowWise("no rule says it keeps the rows apart");
}

LogicalResult DenseRouting::checkOutput(StringRef name, Location loc) const {
  auto it = rows.find(name);
  if (it == rows.end())
    return success();
  return emitError(loc) << "NonZero at node '" << it->second.nonZero
                        << "': graph output '" << name
                        << "' is one of its token lists";
}
