//===- TensorOps.cpp - aten reshapes, views, slices, joins, splits --------===//
//
// Shapes are static here, so every reshape-like op becomes an ONNX
// Reshape to the result's known shape, and slices take their bounds
// clamped to the operand's size.
//
//===----------------------------------------------------------------------===//

#include "Translator.h"

#include <algorithm>
#include <limits>
#include <numeric>

using namespace tp::torchscript;
using torch::jit::Node;
using torch::jit::Value;

namespace {

void reshapeToResult(Translator &t) {
  t.define(t.emit("Reshape", {t.operand(0), t.constInts(t.sizesOf(t.out()))}));
}

/// The tensors of list input i, which a prim::ListConstruct makes.
std::vector<Value *> listOperands(Translator &t, size_t i) {
  Node *producer = t.in(i)->node();
  if (producer->kind() != c10::prim::ListConstruct)
    t.fail("expected a list of tensors built in the graph as input " +
           std::to_string(i));
  return {producer->inputs().begin(), producer->inputs().end()};
}

/// Names the list result of the current node, piece by piece: it must be
/// unpacked (prim::ListUnpack) and nothing else.
void definePieces(Translator &t, const std::vector<std::string> &pieces) {
  Value *list = t.out();
  for (const torch::jit::Use &use : list->uses()) {
    Node *user = use.user;
    if (user->kind() != c10::prim::ListUnpack ||
        user->outputs().size() != pieces.size())
      t.fail("its list of " + std::to_string(pieces.size()) +
             " pieces must be unpacked into as many values");
  }
  for (const torch::jit::Use &use : list->uses()) {
    Translator::Scope scope(t, use.user);
    for (size_t i = 0; i < pieces.size(); ++i)
      t.define(pieces[i], i);
  }
}

void split(Translator &t, int64_t axis, const std::vector<int64_t> &sizes) {
  std::vector<std::string> pieces;
  t.emit("Split", {t.operand(0), t.constInts(sizes)}, {{"axis", axis}},
         sizes.size(), &pieces);
  definePieces(t, pieces);
}

/// start:end:step along `axis`, with Python's bounds.
std::string slice(Translator &t, const std::string &x, int64_t axis,
                  int64_t size, int64_t start, int64_t end, int64_t step) {
  auto clamp = [&](int64_t v) {
    if (v < 0)
      v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  return t.emit("Slice", {x, t.constInts({clamp(start)}),
                          t.constInts({clamp(end)}), t.constInts({axis}),
                          t.constInts({step})});
}

} // namespace

void tp::torchscript::populateTensorConverters(ConverterMap &m) {
  for (const char *name :
       {"aten::view", "aten::reshape", "aten::flatten", "aten::unflatten",
        "aten::squeeze", "aten::unsqueeze", "aten::view_as",
        "aten::reshape_as", "aten::_reshape_alias"})
    m[name] = reshapeToResult;

  m["aten::permute"] = [](Translator &t) {
    int64_t rank = t.rankOf(t.in(0));
    std::vector<int64_t> perm = t.intListArg(1);
    for (int64_t &d : perm)
      d = t.dim(d, rank);
    t.define(t.emit("Transpose", {t.operand(0)}, {{"perm", perm}}));
  };
  auto transpose = [](Translator &t) {
    int64_t rank = t.rankOf(t.in(0));
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    if (rank >= 2) {
      int64_t a = t.numInputs() > 1 ? t.dim(t.intArg(1), rank) : 0;
      int64_t b = t.numInputs() > 2 ? t.dim(t.intArg(2), rank) : 1;
      std::swap(perm[a], perm[b]);
    }
    t.define(t.emit("Transpose", {t.operand(0)}, {{"perm", perm}}));
  };
  m["aten::transpose"] = transpose;
  m["aten::t"] = transpose;

  auto expand = [](Translator &t) {
    t.define(t.emit("Expand", {t.operand(0), t.constInts(t.sizesOf(t.out()))}));
  };
  m["aten::expand"] = expand;
  m["aten::expand_as"] = expand;
  m["aten::broadcast_to"] = expand;
  m["aten::repeat"] = [](Translator &t) {
    std::vector<int64_t> repeats = t.intListArg(1);
    std::vector<int64_t> in = t.sizesOf(t.in(0));
    std::string x = t.operand(0);
    if (repeats.size() > in.size()) {
      in.insert(in.begin(), repeats.size() - in.size(), 1);
      x = t.emit("Reshape", {x, t.constInts(in)});
    }
    t.define(t.emit("Tile", {x, t.constInts(repeats)}));
  };

  m["aten::slice"] = [](Translator &t) {
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.intArg(1), sizes.size());
    int64_t start = t.isNone(2) ? 0 : t.intArg(2);
    int64_t end = t.isNone(3) ? std::numeric_limits<int64_t>::max()
                              : t.intArg(3);
    int64_t step = t.numInputs() > 4 ? t.intArg(4) : 1;
    if (step < 1)
      t.fail("slice step must be positive");
    t.define(slice(t, t.operand(0), axis, sizes[axis], start, end, step));
  };
  m["aten::narrow"] = [](Translator &t) {
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.intArg(1), sizes.size());
    int64_t start = t.intArg(2);
    t.define(slice(t, t.operand(0), axis, sizes[axis], start,
                   (start < 0 ? start + sizes[axis] : start) + t.intArg(3),
                   1));
  };
  m["aten::select"] = [](Translator &t) {
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.intArg(1), sizes.size());
    int64_t index = t.intArg(2);
    if (index < 0)
      index += sizes[axis];
    t.define(t.emit("Gather",
                    {t.operand(0),
                     t.constTensor(at::scalar_tensor(index, at::kLong))},
                    {{"axis", axis}}));
  };
  m["aten::index_select"] = [](Translator &t) {
    int64_t axis = t.dim(t.intArg(1), t.rankOf(t.in(0)));
    t.define(t.emit("Gather",
                    {t.operand(0), t.operand(2, onnx::TensorProto::INT64)},
                    {{"axis", axis}}));
  };
  m["aten::gather"] = [](Translator &t) {
    int64_t axis = t.dim(t.intArg(1), t.rankOf(t.in(0)));
    t.define(t.emit("GatherElements",
                    {t.operand(0), t.operand(2, onnx::TensorProto::INT64)},
                    {{"axis", axis}}));
  };
  m["aten::embedding"] = [](Translator &t) {
    t.define(t.emit("Gather",
                    {t.operand(0), t.operand(1, onnx::TensorProto::INT64)},
                    {{"axis", int64_t(0)}}));
  };

  m["aten::cat"] = [](Translator &t) {
    std::vector<Value *> parts = listOperands(t, 0);
    int64_t axis = t.dim(t.numInputs() > 1 ? t.intArg(1) : 0,
                         t.rankOf(t.out()));
    int32_t type = t.typeOf(t.out());
    std::vector<std::string> names;
    for (Value *part : parts) {
      // torch.cat skips 1-D empty tensors (a legacy rule).
      std::vector<int64_t> sizes = t.sizesOf(part);
      if (sizes.size() == 1 && sizes[0] == 0 && t.rankOf(t.out()) != 1)
        continue;
      names.push_back(t.cast(t.tensorName(part), t.typeOf(part), type));
    }
    t.define(names.size() == 1 ? names[0]
                               : t.emit("Concat", names, {{"axis", axis}}));
  };
  m["aten::stack"] = [](Translator &t) {
    std::vector<Value *> parts = listOperands(t, 0);
    int64_t rank = t.rankOf(t.out());
    int64_t axis = t.dim(t.numInputs() > 1 ? t.intArg(1) : 0, rank);
    std::vector<std::string> names;
    for (Value *part : parts) {
      std::vector<int64_t> sizes = t.sizesOf(part);
      sizes.insert(sizes.begin() + axis, 1);
      names.push_back(
          t.emit("Reshape", {t.tensorName(part), t.constInts(sizes)}));
    }
    t.define(t.emit("Concat", names, {{"axis", axis}}));
  };

  auto splitBySize = [](Translator &t) {
    std::vector<int64_t> in = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.numInputs() > 2 ? t.intArg(2) : 0, in.size());
    c10::IValue how = t.constant(1);
    std::vector<int64_t> sizes;
    if (how.isIntList()) {
      sizes = how.toIntVector();
    } else {
      int64_t size = t.intArg(1);
      if (size <= 0)
        t.fail("split size must be positive");
      for (int64_t left = in[axis]; left > 0; left -= size)
        sizes.push_back(std::min(size, left));
    }
    split(t, axis, sizes);
  };
  m["aten::split"] = splitBySize;
  m["aten::split_with_sizes"] = splitBySize;
  m["aten::unsafe_split"] = splitBySize;
  m["aten::chunk"] = [](Translator &t) {
    std::vector<int64_t> in = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.numInputs() > 2 ? t.intArg(2) : 0, in.size());
    int64_t chunks = t.intArg(1);
    if (chunks <= 0)
      t.fail("chunk count must be positive");
    int64_t size = (in[axis] + chunks - 1) / chunks;
    std::vector<int64_t> sizes;
    for (int64_t left = in[axis]; left > 0; left -= size)
      sizes.push_back(std::min(size, left));
    split(t, axis, sizes);
  };

  m["aten::triu"] = [](Translator &t) {
    t.define(t.emit("Trilu",
                    {t.operand(0), t.constTensor(at::scalar_tensor(
                                       t.numInputs() > 1 ? t.intArg(1) : 0,
                                       at::kLong))},
                    {{"upper", int64_t(1)}}));
  };
  m["aten::tril"] = [](Translator &t) {
    t.define(t.emit("Trilu",
                    {t.operand(0), t.constTensor(at::scalar_tensor(
                                       t.numInputs() > 1 ? t.intArg(1) : 0,
                                       at::kLong))},
                    {{"upper", int64_t(0)}}));
  };
  m["aten::cumsum"] = [](Translator &t) {
    int64_t axis = t.dim(t.intArg(1), t.rankOf(t.in(0)));
    int32_t type = t.typeOf(t.out());
    t.define(t.emit("CumSum", {t.operand(0, type), t.constInts({axis})}));
  };

  // Tensors that depend only on the result's shape and type.
  auto filledLike = [](double value) {
    return [value](Translator &t) {
      at::ScalarType type =
          *t.out()->type()->cast<c10::TensorType>()->scalarType();
      t.define(t.constTensor(at::full(t.sizesOf(t.out()), value,
                                      at::TensorOptions(type))));
    };
  };
  m["aten::zeros_like"] = filledLike(0);
  m["aten::ones_like"] = filledLike(1);
  m["aten::new_zeros"] = filledLike(0);
  m["aten::new_ones"] = filledLike(1);
  m["aten::full_like"] = [](Translator &t) {
    at::ScalarType type =
        *t.out()->type()->cast<c10::TensorType>()->scalarType();
    t.define(t.constTensor(at::full(t.sizesOf(t.out()), t.doubleArg(1),
                                    at::TensorOptions(type))));
  };
}
