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
  return t.emit("Slice",
                {x, t.constInts({clamp(start)}), t.constInts({clamp(end)}),
                 t.constInts({axis}), t.constInts({step})});
}

/// base with `part` written over [start, end) of dim `axis` (step 1):
/// what remains of base on either side, joined around part.
std::string sliceScatter(Translator &t, const std::string &base,
                         const std::vector<int64_t> &sizes,
                         const std::string &part, int64_t axis, int64_t start,
                         int64_t end) {
  if (start == 0 && end == sizes[axis])
    return part;
  std::vector<std::string> pieces;
  if (start > 0)
    pieces.push_back(slice(t, base, axis, sizes[axis], 0, start, 1));
  pieces.push_back(part);
  if (end < sizes[axis])
    pieces.push_back(slice(t, base, axis, sizes[axis], end, sizes[axis], 1));
  return t.emit("Concat", pieces, {{"axis", axis}});
}

/// dst.copy_(src) where dst is a chain of slices of some tensor: x[:, :, :,
/// :n] = y, which mutation removal cannot make functional. The tensor's
/// new value is built by writing src back through each slice in turn, and
/// later reads of the tensor read it.
void copyIntoSlices(Translator &t) {
  struct Level {
    Value *base;
    int64_t axis, start, end;
  };
  std::vector<Level> levels;
  Value *view = t.in(0);
  while (view->node()->kind().toQualString() == std::string("aten::slice")) {
    Node *s = view->node();
    Translator::Scope scope(t, s);
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.intArg(1), sizes.size());
    auto clamp = [&](int64_t v) {
      return std::clamp<int64_t>(v < 0 ? v + sizes[axis] : v, 0, sizes[axis]);
    };
    int64_t start = t.isNone(2) ? 0 : clamp(t.intArg(2));
    int64_t end = t.isNone(3) ? sizes[axis] : clamp(t.intArg(3));
    if (t.numInputs() > 4 && t.intArg(4) != 1)
      t.fail("an in-place write into a strided slice is not supported");
    levels.push_back({t.in(0), axis, start, std::max(start, end)});
    view = t.in(0);
  }
  if (levels.empty() && view != t.in(0))
    t.fail("an in-place write into a view is not supported");
  int32_t type = t.typeOf(t.in(0));
  std::string value =
      t.emit("Expand", {t.operand(1, type), t.constInts(t.sizesOf(t.in(0)))});
  // Innermost slice first: each level writes the part into its base.
  for (const Level &level : levels)
    value = sliceScatter(t, t.tensorName(level.base), t.sizesOf(level.base),
                         value, level.axis, level.start, level.end);
  t.rebind(view, value);
  t.define(value);
}

/// True if `alias`, or a view of it (of a view...), is read after `write`.
bool readAfter(Value *alias, Node *write) {
  for (const torch::jit::Use &use : alias->uses()) {
    if (use.user == write)
      continue;
    if (write->isBefore(use.user))
      return true;
    if (isViewOp(use.user->kind().toQualString()))
      for (Value *view : use.user->outputs())
        if (readAfter(view, write))
          return true;
  }
  return false;
}

/// True if a view of `base` made before `write` (other than `chainView`,
/// the one written through) is read after it: that read would not see
/// the write. Conservative: disjoint slices are refused too.
bool aliasReadAfter(Value *base, Node *chainView, Node *write) {
  for (const torch::jit::Use &use : base->uses()) {
    Node *user = use.user;
    if (user == chainView || !user->isBefore(write) ||
        !isViewOp(user->kind().toQualString()))
      continue;
    for (Value *alias : user->outputs())
      if (readAfter(alias, write))
        return true;
  }
  return false;
}

} // namespace

void tp::torchscript::writeThroughViews(Translator &t, Value *view,
                                        const std::string &value) {
  Node *write = t.out()->node();
  std::string current = value;
  t.rebind(view, current);
  while (true) {
    Node *producer = view->node();
    std::string kind = producer->kind().toQualString();
    Translator::Scope scope(t, producer);
    Value *base = t.in(0);
    if (aliasReadAfter(base, producer, write))
      t.fail("an in-place write into a view of a tensor that another view, "
             "made before the write, reads after it");
    std::vector<int64_t> sizes = t.sizesOf(base);
    int64_t rank = static_cast<int64_t>(sizes.size());
    if (kind == "aten::slice" || kind == "aten::narrow") {
      int64_t axis = t.dim(t.intArg(1), rank);
      auto clamp = [&](int64_t v) {
        return std::clamp<int64_t>(v < 0 ? v + sizes[axis] : v, 0, sizes[axis]);
      };
      int64_t start, end;
      if (kind == "aten::narrow") {
        start = clamp(t.intArg(2));
        end = start + t.intArg(3);
      } else {
        if (t.numInputs() > 4 && t.intArg(4) != 1)
          t.fail("an in-place write into a strided slice is not supported");
        start = t.isNone(2) ? 0 : clamp(t.intArg(2));
        end = t.isNone(3) ? sizes[axis] : clamp(t.intArg(3));
      }
      current = sliceScatter(t, t.tensorName(base), sizes, current, axis, start,
                             std::max(start, end));
    } else if (kind == "aten::select") {
      int64_t axis = t.dim(t.intArg(1), rank);
      int64_t index = t.intArg(2);
      if (index < 0)
        index += sizes[axis];
      std::vector<int64_t> part = sizes;
      part[axis] = 1;
      current = sliceScatter(t, t.tensorName(base), sizes,
                             t.emit("Reshape", {current, t.constInts(part)}),
                             axis, index, index + 1);
    } else if (kind == "aten::view" || kind == "aten::reshape" ||
               kind == "aten::unsqueeze" || kind == "aten::squeeze") {
      current = t.emit("Reshape", {current, t.constInts(sizes)});
    } else if (kind == "aten::transpose" || kind == "aten::t" ||
               kind == "aten::permute") {
      std::vector<int64_t> perm(rank);
      std::iota(perm.begin(), perm.end(), 0);
      if (kind == "aten::permute") {
        perm = t.intListArg(1);
        for (int64_t &d : perm)
          d = t.dim(d, rank);
      } else if (rank >= 2) {
        int64_t a = t.numInputs() > 1 ? t.dim(t.intArg(1), rank) : 0;
        int64_t b = t.numInputs() > 2 ? t.dim(t.intArg(2), rank) : 1;
        std::swap(perm[a], perm[b]);
      }
      std::vector<int64_t> inverse(rank);
      for (int64_t i = 0; i < rank; ++i)
        inverse[perm[i]] = i;
      current = t.emit("Transpose", {current}, {{"perm", inverse}});
    } else {
      t.fail("an in-place write into a view (" + kind +
             ") that cannot be written back is not supported");
    }
    t.rebind(base, current);
    view = base;
    if (!isViewOp(view->node()->kind().toQualString()))
      return;
  }
}

void tp::torchscript::populateTensorConverters(ConverterMap &m) {
  m["aten::copy_"] = copyIntoSlices;
  for (const char *name :
       {"aten::view", "aten::reshape", "aten::flatten", "aten::unflatten",
        "aten::squeeze", "aten::unsqueeze", "aten::view_as", "aten::reshape_as",
        "aten::_reshape_alias"})
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
  // x.T: every dim reversed; x.mT: the last two swapped.
  m["aten::numpy_T"] = [](Translator &t) {
    std::vector<int64_t> perm(t.rankOf(t.in(0)));
    std::iota(perm.rbegin(), perm.rend(), 0);
    t.define(t.emit("Transpose", {t.operand(0)}, {{"perm", perm}}));
  };
  m["aten::mT"] = [](Translator &t) {
    int64_t rank = t.rankOf(t.in(0));
    if (rank < 2)
      t.fail("mT of a tensor of rank < 2");
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[rank - 2], perm[rank - 1]);
    t.define(t.emit("Transpose", {t.operand(0)}, {{"perm", perm}}));
  };
  // F.pad(x, pad, mode, value) and constant_pad_nd(x, pad, value): `pad`
  // holds (begin, end) pairs from the last dim backwards; ONNX's Pad all
  // begins, then all ends, from the first dim.
  auto pad = [](Translator &t, bool hasMode) {
    int64_t rank = t.rankOf(t.in(0));
    std::vector<int64_t> pairs = t.intListArg(1);
    if (pairs.size() % 2 != 0 || int64_t(pairs.size()) > 2 * rank)
      t.fail("pad list of " + std::to_string(pairs.size()) +
             " entries for a tensor of rank " + std::to_string(rank));
    size_t valueArg = hasMode ? 3 : 2;
    if (hasMode && !t.isNone(2)) {
      std::string mode = t.constant(2).toStringRef();
      if (mode != "constant")
        t.fail("pad mode '" + mode + "' (only 'constant' is supported)");
    }
    std::vector<int64_t> pads(2 * rank, 0);
    for (size_t i = 0; i < pairs.size() / 2; ++i) {
      int64_t d = rank - 1 - int64_t(i);
      pads[d] = pairs[2 * i];
      pads[rank + d] = pairs[2 * i + 1];
    }
    int32_t type = t.typeOf(t.out());
    double value = t.numInputs() > valueArg && !t.isNone(valueArg)
                       ? t.doubleArg(valueArg)
                       : 0.0;
    t.define(t.emit("Pad", {t.operand(0, type), t.constInts(pads),
                            t.constScalar(value, type)}));
  };
  m["aten::pad"] = [pad](Translator &t) { pad(t, /*hasMode=*/true); };
  m["aten::constant_pad_nd"] = [pad](Translator &t) {
    pad(t, /*hasMode=*/false);
  };

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
    int64_t end =
        t.isNone(3) ? std::numeric_limits<int64_t>::max() : t.intArg(3);
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
                   (start < 0 ? start + sizes[axis] : start) + t.intArg(3), 1));
  };
  m["aten::select"] = [](Translator &t) {
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    int64_t axis = t.dim(t.intArg(1), sizes.size());
    int64_t index = t.intArg(2);
    if (index < 0)
      index += sizes[axis];
    t.define(t.emit(
        "Gather",
        {t.operand(0), t.constTensor(at::scalar_tensor(index, at::kLong))},
        {{"axis", axis}}));
  };
  m["aten::index_select"] = [](Translator &t) {
    int64_t axis = t.dim(t.intArg(1), t.rankOf(t.in(0)));
    t.define(t.emit("Gather",
                    {t.operand(0), t.operand(2, onnx::TensorProto::INT64)},
                    {{"axis", axis}}));
  };
  // x[..., i0, i1, ...] with index tensors: the indexed dims (adjacent)
  // become one, indexed by i0 * D1 + i1 ... (each index wrapped where
  // negative, the indices broadcast against each other), so that one
  // Gather puts the indices' shape where the first indexed dim was, as
  // torch does.
  m["aten::index"] = [](Translator &t) {
    // The list is built in the graph, or a constant where every index is.
    struct Index {
      int64_t dim;
      std::string name;
      int32_t type;
    };
    std::vector<Index> indices;
    Node *list = t.in(1)->node();
    if (list->kind() == c10::prim::ListConstruct) {
      for (size_t i = 0; i < list->inputs().size(); ++i) {
        Value *index = list->input(i);
        if (index->type()->kind() != c10::TypeKind::NoneType)
          indices.push_back(
              {static_cast<int64_t>(i), t.tensorName(index), t.typeOf(index)});
      }
    } else {
      c10::IValue constant = t.constant(1);
      if (!constant.isList())
        t.fail("indices that are neither a list built in the graph nor a "
               "constant");
      c10::ArrayRef<c10::IValue> elements = constant.toListRef();
      for (size_t i = 0; i < elements.size(); ++i)
        if (elements[i].isTensor()) {
          const at::Tensor &index = elements[i].toTensor();
          indices.push_back({static_cast<int64_t>(i), t.constTensor(index),
                             onnxElementType(index.scalar_type(), "an index")});
        }
    }
    for (const Index &index : indices)
      if (index.type == onnx::TensorProto::BOOL)
        t.fail("indexing with a boolean mask (its result's shape depends "
               "on the mask's values); use torch.where or masked_fill");
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    if (indices.empty()) {
      t.define(t.operand(0));
      return;
    }
    for (size_t j = 1; j < indices.size(); ++j)
      if (indices[j].dim != indices[j - 1].dim + 1)
        t.fail("index tensors on dims that are not adjacent");
    int64_t first = indices.front().dim;
    int32_t i64 = onnx::TensorProto::INT64;
    std::string zero = t.constScalar(0, i64), linear;
    int64_t extent = 1;
    for (size_t j = 0; j < indices.size(); ++j) {
      int64_t size = sizes[first + j];
      std::string index = t.cast(indices[j].name, indices[j].type, i64);
      std::string wrapped = t.emit(
          "Where", {t.emit("Less", {index, zero}),
                    t.emit("Add", {index, t.constScalar(size, i64)}), index});
      linear = j == 0
                   ? wrapped
                   : t.emit("Add",
                            {t.emit("Mul", {linear, t.constScalar(size, i64)}),
                             wrapped});
      extent *= size;
    }
    std::string x = t.operand(0);
    if (indices.size() > 1) {
      std::vector<int64_t> flat(sizes.begin(), sizes.begin() + first);
      flat.push_back(extent);
      flat.insert(flat.end(), sizes.begin() + first + indices.size(),
                  sizes.end());
      x = t.emit("Reshape", {x, t.constInts(flat)});
    }
    t.define(t.emit("Gather", {x, linear}, {{"axis", first}}));
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
    int64_t axis =
        t.dim(t.numInputs() > 1 ? t.intArg(1) : 0, t.rankOf(t.out()));
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
    t.define(t.emit(
        "Trilu",
        {t.operand(0), t.constTensor(at::scalar_tensor(
                           t.numInputs() > 1 ? t.intArg(1) : 0, at::kLong))},
        {{"upper", int64_t(1)}}));
  };
  m["aten::tril"] = [](Translator &t) {
    t.define(t.emit(
        "Trilu",
        {t.operand(0), t.constTensor(at::scalar_tensor(
                           t.numInputs() > 1 ? t.intArg(1) : 0, at::kLong))},
        {{"upper", int64_t(0)}}));
  };
  m["aten::cumsum"] = [](Translator &t) {
    int64_t axis = t.dim(t.intArg(1), t.rankOf(t.in(0)));
    int32_t type = t.typeOf(t.out());
    t.define(t.emit("CumSum", {t.operand(0, type), t.constInts({axis})}));
  };

  // Factory ops whose arguments are constants (a mask built from the
  // input's sizes and device, and then written in place, is not folded
  // before): the tensor itself, computed here.
  auto resultType = [](Translator &t) {
    return *t.out()->type()->cast<c10::TensorType>()->scalarType();
  };
  m["aten::full"] = [resultType](Translator &t) {
    t.define(t.constTensor(at::full(t.sizesOf(t.out()), t.doubleArg(1),
                                    at::TensorOptions(resultType(t)))));
  };
  for (auto [name, value] :
       {std::pair("aten::zeros", 0.0), std::pair("aten::ones", 1.0)})
    m[name] = [resultType, value = value](Translator &t) {
      t.define(t.constTensor(at::full(t.sizesOf(t.out()), value,
                                      at::TensorOptions(resultType(t)))));
    };
  m["aten::arange"] = [resultType](Translator &t) {
    // arange(end, ...), arange(start, end, ...), arange(start, end, step,
    // ...): read by the overload's argument names.
    const c10::FunctionSchema *schema = t.node->maybeSchema();
    if (!schema)
      t.fail("arange without a schema");
    double start = 0, end = 0, step = 1;
    bool haveEnd = false;
    for (size_t i = 0; i < schema->arguments().size() && i < t.numInputs();
         ++i) {
      const std::string &arg = schema->arguments()[i].name();
      if (arg == "start")
        start = t.doubleArg(i);
      else if (arg == "end")
        end = t.doubleArg(i), haveEnd = true;
      else if (arg == "step")
        step = t.doubleArg(i);
    }
    if (!haveEnd)
      t.fail("arange without an end");
    t.define(t.constTensor(
        at::arange(start, end, step, at::TensorOptions(at::kDouble))
            .to(resultType(t))));
  };

  // Tensors that depend only on the result's shape and type.
  auto filledLike = [](double value) {
    return [value](Translator &t) {
      at::ScalarType type =
          *t.out()->type()->cast<c10::TensorType>()->scalarType();
      t.define(t.constTensor(
          at::full(t.sizesOf(t.out()), value, at::TensorOptions(type))));
    };
  };
  m["aten::zeros_like"] = filledLike(0);
  m["aten::ones_like"] = filledLike(1);
  m["aten::new_zeros"] = filledLike(0);
  m["aten::new_ones"] = filledLike(1);
  m["aten::full_like"] = [](Translator &t) {
    at::ScalarType type =
        *t.out()->type()->cast<c10::TensorType>()->scalarType();
    t.define(t.constTensor(
        at::full(t.sizesOf(t.out()), t.doubleArg(1), at::TensorOptions(type))));
  };
}
