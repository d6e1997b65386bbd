//===- DenseRouting.cpp - per-expert token lists made static --------------===//
//
// transformers' eager MoE loop exports, per expert e, NonZero(mask_e) (the
// (slot, token) pairs routed to e, a count known only at run time), Gathers
// of those tokens' rows and routing weights, the expert's MLP, and a
// ScatterElements of the weighted rows back to their tokens. This rewrite
// runs on the GraphProto before import and makes the list dense: every
// token is in it, with the slot that routes it to e (or slot 0), and the
// scatter writes, for a token not routed to e, the value it already had
// (a select, not a multiply by zero, so nothing computed for it reaches a
// result). It is exact when each row of the list is computed from that row
// alone, which DenseRouting::visit (RowWise.cpp) checks node by node while
// the graph imports, and when a token is at most once in a list, which the
// mask's form guarantees: a row of OneHot(TopK indices), whose picks per
// token are distinct.
//
//===----------------------------------------------------------------------===//

#include "DenseRouting.h"

#include "mlir/IR/Diagnostics.h"

#include <map>
#include <set>

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

class Rewriter {
public:
  Rewriter(onnx::GraphProto &graph, Location loc, DenseRouting &routing)
      : graph(graph), loc(loc), routing(routing) {
    for (const auto &init : graph.initializer())
      inits[init.name()] = &init;
    for (int i = 0, e = graph.node_size(); i < e; ++i) {
      for (const auto &out : graph.node(i).output())
        producer[out] = i;
      for (const auto &in : graph.node(i).input())
        if (!in.empty())
          users[in].push_back(i);
    }
  }

  LogicalResult run();

private:
  /// Makes NonZero node `i` dense.
  LogicalResult rewrite(int i);
  InFlightDiagnostic fail(const onnx::NodeProto &nonZero) {
    return emitError(loc) << "NonZero at node '" << getNodeName(nonZero)
                          << "': ";
  }

  const onnx::NodeProto *def(const std::string &v) const {
    auto it = producer.find(v);
    return it == producer.end() ? nullptr : &graph.node(it->second);
  }
  static const onnx::AttributeProto *attr(const onnx::NodeProto &n,
                                          StringRef name) {
    for (const auto &a : n.attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  static int64_t attrInt(const onnx::NodeProto &n, StringRef name,
                         int64_t dflt) {
    const onnx::AttributeProto *a = attr(n, name);
    return a ? a->i() : dflt;
  }
  /// The contents of `v` when it is an initializer or a Constant's value.
  std::optional<ConstTensor> constant(const std::string &v) const {
    const onnx::TensorProto *t = nullptr;
    if (auto it = inits.find(v); it != inits.end())
      t = it->second;
    else if (const onnx::NodeProto *n = def(v); n && n->op_type() == "Constant")
      if (const onnx::AttributeProto *a = attr(*n, "value"))
        t = &a->t();
    if (!t)
      return std::nullopt;
    std::string error;
    FailureOr<ConstTensor> c = readTensorProto(*t, error);
    if (failed(c))
      return std::nullopt;
    return std::move(*c);
  }
  /// A node's axes, from its attribute or its constant input 1.
  std::optional<std::vector<int64_t>> axes(const onnx::NodeProto &n) const {
    if (const onnx::AttributeProto *a = attr(n, "axes"))
      return std::vector<int64_t>(a->ints().begin(), a->ints().end());
    if (n.input_size() < 2)
      return std::nullopt;
    std::optional<ConstTensor> c = constant(n.input(1));
    if (!c || c->isFloat())
      return std::nullopt;
    return c->ints;
  }

  /// A new value name derived from `base`.
  std::string fresh(const std::string &base, StringRef what) {
    std::string name;
    do
      name = base + "/dense_" + what.str() + std::to_string(counter++);
    while (producer.count(name) || inits.count(name));
    return name;
  }
  /// Appends node `op` to the nodes inserted before node `at`.
  std::string add(int at, StringRef op, ArrayRef<std::string> inputs,
                  const std::string &base, StringRef what,
                  std::function<void(onnx::NodeProto &)> edit = nullptr) {
    onnx::NodeProto n;
    n.set_op_type(op.str());
    for (const std::string &in : inputs)
      n.add_input(in);
    std::string out = fresh(base, what);
    n.add_output(out);
    n.set_name(out);
    if (edit)
      edit(n);
    before[at].push_back(std::move(n));
    return out;
  }
  static void setInt(onnx::NodeProto &n, StringRef name, int64_t v) {
    onnx::AttributeProto *a = n.add_attribute();
    a->set_name(name.str());
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  /// An int64 Constant of `values`, a scalar when `shape` is empty.
  std::string constInts(int at, const std::string &base,
                        ArrayRef<int64_t> values, ArrayRef<int64_t> shape) {
    return add(at, "Constant", {}, base, "const", [&](onnx::NodeProto &n) {
      onnx::AttributeProto *a = n.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      onnx::TensorProto *t = a->mutable_t();
      t->set_data_type(onnx::TensorProto::INT64);
      for (int64_t d : shape)
        t->add_dims(d);
      for (int64_t v : values)
        t->add_int64_data(v);
    });
  }

  onnx::GraphProto &graph;
  Location loc;
  DenseRouting &routing;
  llvm::StringMap<int> producer;
  llvm::StringMap<SmallVector<int>> users;
  llvm::StringMap<const onnx::TensorProto *> inits;
  /// The new graph: nodes inserted before a node, nodes replaced, erased.
  std::map<int, std::vector<onnx::NodeProto>> before;
  std::map<int, onnx::NodeProto> replaced;
  std::set<int> erased;
  int counter = 0;
};

LogicalResult Rewriter::rewrite(int i) {
  const onnx::NodeProto &nz = graph.node(i);
  const std::string &mask = nz.input(0);
  const std::string &base = nz.output(0);

  // The mask: Gather(Transpose(OneHot(TopK indices, axis -1), [2, 1, 0]),
  // e, axis 0) [K, T], through Casts: column t is token t's top-k picks
  // compared with e, true at most once.
  auto notMask = [&](StringRef what) {
    return fail(nz) << "its input is not one expert's row of the top-k "
                       "one-hot mask ("
                    << what << ")";
  };
  const onnx::NodeProto *n = def(mask);
  while (n && n->op_type() == "Cast")
    n = def(n->input(0));
  if (!n || n->op_type() != "Gather" || attrInt(*n, "axis", 0) != 0)
    return notMask("expected a Gather on axis 0");
  std::optional<ConstTensor> expert = constant(n->input(1));
  if (!expert || !expert->shape.empty())
    return notMask("the expert is not a constant scalar");
  n = def(n->input(0));
  const onnx::AttributeProto *perm = n ? attr(*n, "perm") : nullptr;
  if (!n || n->op_type() != "Transpose" || !perm ||
      std::vector<int64_t>(perm->ints().begin(), perm->ints().end()) !=
          std::vector<int64_t>{2, 1, 0})
    return notMask("expected a Transpose with perm [2, 1, 0]");
  n = def(n->input(0));
  if (!n || n->op_type() != "OneHot" ||
      (attrInt(*n, "axis", -1) != -1 && attrInt(*n, "axis", -1) != 2))
    return notMask("expected a OneHot on the last axis");
  std::optional<ConstTensor> values = constant(n->input(2));
  if (!values || values->numel() != 2 || values->getAsDouble(0) != 0 ||
      values->getAsDouble(1) == 0)
    return notMask("the OneHot values are not constants [0, on != 0]");
  std::string indices = n->input(0);
  const onnx::NodeProto *topk = def(indices);
  while (topk && topk->op_type() == "Cast") {
    indices = topk->input(0);
    topk = def(indices);
  }
  if (!topk || topk->op_type() != "TopK" || topk->output_size() < 2 ||
      indices != topk->output(1) ||
      (attrInt(*topk, "axis", -1) != -1 && attrInt(*topk, "axis", -1) != 1))
    return notMask("the OneHot does not read TopK's indices on the last axis");

  // The coordinates: Transpose([1, 0]) -> Split(axis 1) -> Squeeze([1]),
  // or Gather(nz, c, axis 0); slot is coordinate 0, token coordinate 1.
  SmallVector<std::pair<int, int>> coords; // (node replaced, coordinate)
  for (int u : users.lookup(nz.output(0))) {
    const onnx::NodeProto &user = graph.node(u);
    auto notCoords = [&] {
      return fail(nz) << "its coordinates are read by node '"
                      << getNodeName(user) << "' (" << user.op_type()
                      << "), not as lists of slots and tokens";
    };
    if (user.op_type() == "Gather") {
      std::optional<ConstTensor> c = constant(user.input(1));
      if (attrInt(user, "axis", 0) != 0 || !c || !c->shape.empty() ||
          c->isFloat() || (c->ints[0] != 0 && c->ints[0] != 1))
        return notCoords();
      coords.push_back({u, int(c->ints[0])});
      continue;
    }
    const onnx::AttributeProto *p = attr(user, "perm");
    if (user.op_type() != "Transpose" || !p || p->ints_size() != 2 ||
        p->ints(0) != 1 || p->ints(1) != 0)
      return notCoords();
    erased.insert(u);
    for (int s : users.lookup(user.output(0))) {
      const onnx::NodeProto &split = graph.node(s);
      if (split.op_type() != "Split" || attrInt(split, "axis", 0) != 1 ||
          split.output_size() != 2)
        return fail(nz) << "its transposed coordinates are read by node '"
                        << getNodeName(split) << "' (" << split.op_type()
                        << "), not split into slots and tokens";
      erased.insert(s);
      for (int j = 0; j < 2; ++j)
        for (int q : users.lookup(split.output(j))) {
          const onnx::NodeProto &sq = graph.node(q);
          std::optional<std::vector<int64_t>> ax =
              sq.op_type() == "Squeeze" ? axes(sq) : std::nullopt;
          if (!ax || ax->size() != 1 || ((*ax)[0] != 1 && (*ax)[0] != -1))
            return fail(nz) << "its split coordinates are read by node '"
                            << getNodeName(sq) << "' (" << sq.op_type()
                            << "), not squeezed to lists";
          coords.push_back({q, j});
        }
    }
  }

  // The dense lists: slot = the first slot routing each token to the
  // expert (0 if none), token = 0..T-1, routed = whether any slot does.
  std::string maskInt =
      add(i, "Cast", {mask}, base, "mask", [](onnx::NodeProto &c) {
        setInt(c, "to", onnx::TensorProto::INT32);
      });
  std::string slot =
      add(i, "ArgMax", {maskInt}, base, "slot", [](onnx::NodeProto &c) {
        setInt(c, "axis", 0);
        setInt(c, "keepdims", 0);
      });
  std::string shape = add(i, "Shape", {mask}, base, "shape");
  std::string zero = constInts(i, base, {0}, {});
  std::string one = constInts(i, base, {1}, {});
  std::string count = add(i, "Gather", {shape, one}, base, "count");
  std::string token = add(i, "Range", {zero, count, one}, base, "token");
  std::string slotRow = add(
      i, "Reshape", {slot, constInts(i, base, {1, -1}, {2})}, base, "slot_row");
  std::string hitRow =
      add(i, "GatherElements", {maskInt, slotRow}, base, "routed_row",
          [](onnx::NodeProto &c) { setInt(c, "axis", 0); });
  std::string hit = add(i, "Reshape", {hitRow, constInts(i, base, {-1}, {1})},
                        base, "routed_int");
  std::string routed =
      add(i, "Cast", {hit}, base, "routed",
          [](onnx::NodeProto &c) { setInt(c, "to", onnx::TensorProto::BOOL); });
  for (const std::string &v : {slot, token, routed})
    routing.addRows(v, 0, getNodeName(nz));
  erased.insert(i);
  std::set<std::string> tokens;
  for (auto [u, c] : coords) {
    onnx::NodeProto id;
    id.set_op_type("Identity");
    id.set_name(graph.node(u).name());
    id.add_input(c == 0 ? slot : token);
    id.add_output(graph.node(u).output(0));
    replaced[u] = std::move(id);
    if (c == 1)
      tokens.insert(graph.node(u).output(0));
  }

  // The scatters writing the token list back: their indices are the token
  // coordinate through shape-only ops. The update becomes
  // Where(routed, update, what the position held), routed taken through
  // the same shape ops as the indices.
  int sinks = 0;
  for (int s = 0, e = graph.node_size(); s < e; ++s) {
    const onnx::NodeProto &scatter = graph.node(s);
    if (scatter.op_type() != "ScatterElements" || replaced.count(s))
      continue;
    SmallVector<const onnx::NodeProto *> chain;
    std::string v = scatter.input(1);
    static const std::set<std::string> shapeOps = {
        "Expand", "Unsqueeze", "Reshape", "Identity", "Cast", "Squeeze"};
    while (!tokens.count(v)) {
      const onnx::NodeProto *c = def(v);
      if (!c || !shapeOps.count(c->op_type()) || c->input_size() == 0) {
        chain.clear();
        break;
      }
      chain.push_back(c);
      v = c->input(0);
    }
    if (!tokens.count(v))
      continue;
    std::string cond = routed;
    for (const onnx::NodeProto *c : llvm::reverse(chain)) {
      if (c->op_type() == "Cast" || c->op_type() == "Identity")
        continue;
      onnx::NodeProto copy = *c;
      copy.set_input(0, cond);
      cond = fresh(base, "routed");
      copy.clear_output();
      copy.add_output(cond);
      copy.set_name(cond);
      before[s].push_back(std::move(copy));
    }
    std::string kept;
    const onnx::NodeProto *data = def(scatter.input(0));
    if (data && data->op_type() == "ConstantOfShape") {
      onnx::TensorProto fill;
      fill.set_data_type(onnx::TensorProto::FLOAT);
      fill.add_float_data(0.0f);
      if (const onnx::AttributeProto *a = attr(*data, "value"))
        fill = a->t();
      fill.clear_dims();
      fill.add_dims(1);
      kept = add(s, "Constant", {}, base, "kept", [&](onnx::NodeProto &c) {
        onnx::AttributeProto *a = c.add_attribute();
        a->set_name("value");
        a->set_type(onnx::AttributeProto::TENSOR);
        *a->mutable_t() = fill;
      });
    } else {
      kept = add(s, "GatherElements", {scatter.input(0), scatter.input(1)},
                 base, "kept", [&](onnx::NodeProto &c) {
                   setInt(c, "axis", attrInt(scatter, "axis", 0));
                 });
    }
    std::string update =
        add(s, "Where", {cond, scatter.input(2), kept}, base, "update");
    onnx::NodeProto copy = scatter;
    copy.set_input(2, update);
    replaced[s] = std::move(copy);
    routing.addSink(scatter.output(0));
    ++sinks;
  }
  if (!sinks)
    return fail(nz) << "no ScatterElements writes its tokens' rows back";
  return success();
}

LogicalResult Rewriter::run() {
  bool any = false;
  for (int i = 0, e = graph.node_size(); i < e; ++i) {
    if (graph.node(i).op_type() != "NonZero")
      continue;
    any = true;
    if (failed(rewrite(i)))
      return failure();
  }
  if (!any)
    return success();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0, e = graph.node_size(); i < e; ++i) {
    for (onnx::NodeProto &n : before[i])
      *nodes.Add() = std::move(n);
    if (erased.count(i))
      continue;
    auto it = replaced.find(i);
    *nodes.Add() = it != replaced.end() ? it->second : graph.node(i);
  }
  graph.mutable_node()->Swap(&nodes);
  return success();
}

} // namespace

void DenseRouting::addRows(StringRef value, int64_t axis, StringRef nonZero) {
  rows[value] = Rows{axis, nonZero.str()};
}

LogicalResult mlir::tp::onnx_import::rewriteDenseRouting(
    onnx::GraphProto &graph, Location loc, DenseRouting &routing) {
  return Rewriter(graph, loc, routing).run();
}
