//===- AttentionOps.cpp - aten::scaled_dot_product_attention --------------===//
//
// PyTorch 2's fused attention op, which transformers' SDPA attention (the
// default for most models since 4.36) calls, so that a module traced with
// PyTorch 2 saves `torch.scaled_dot_product_attention(q, k, v, mask, 0.,
// is_causal, scale=...)` in its code. libtorch 1.13 (Debian's) has no such
// op and could not load that code: where it is missing we register it,
// with PyTorch 2.5's schema (the widest: a file written by 2.0 passes
// fewer arguments, which take their defaults) and a kernel that computes
// its definition, which the run that types the graph calls. The converter
// writes the same definition as ONNX nodes, the pattern of eager attention
// (so the planner splits it by heads as any other). With it,
// repeat_interleave, with which code that calls the op repeats K/V heads.
//
//===----------------------------------------------------------------------===//

#include "Translator.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <mutex>

using namespace tp::torchscript;

namespace {

constexpr const char *kSchema =
    "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
    "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
    "float? scale=None, bool enable_gqa=False) -> Tensor";

/// The op's definition (dropout aside, which eval mode never applies).
at::Tensor attention(const at::Tensor &query, const at::Tensor &key,
                     const at::Tensor &value,
                     const c10::optional<at::Tensor> &mask, double dropout,
                     bool isCausal, c10::optional<double> scale,
                     bool enableGqa) {
  TORCH_CHECK(dropout == 0.0,
              "scaled_dot_product_attention with dropout_p > 0 (training)");
  at::Tensor k = key, v = value;
  if (enableGqa && query.dim() >= 3 && key.size(-3) != query.size(-3)) {
    k = key.repeat_interleave(query.size(-3) / key.size(-3), -3);
    v = value.repeat_interleave(query.size(-3) / value.size(-3), -3);
  }
  double factor = scale ? *scale : 1.0 / std::sqrt(double(query.size(-1)));
  at::Tensor scores = at::matmul(query, k.transpose(-2, -1)) * factor;
  double lowest = -std::numeric_limits<double>::infinity();
  if (isCausal)
    scores = scores.masked_fill(
        at::ones({query.size(-2), k.size(-2)}, query.options().dtype(at::kBool))
            .tril()
            .logical_not(),
        lowest);
  if (mask && mask->defined())
    scores = mask->scalar_type() == at::kBool
                 ? scores.masked_fill(mask->logical_not(), lowest)
                 : scores + *mask;
  return at::matmul(at::softmax(scores, -1), v);
}

/// Each of `x`'s slices along `dim` repeated `times` times in place
/// (x.repeat_interleave(times, dim)), as transformers' repeat_kv writes it:
/// [.., D, ..] -> [.., D, 1, ..] -> [.., D, times, ..] -> [.., D * times, ..],
/// the pattern the planner knows from GQA exports.
std::string repeatEach(Translator &t, const std::string &x,
                       std::vector<int64_t> sizes, int64_t dim, int64_t times) {
  if (times == 1)
    return x;
  std::string unsqueezed = t.emit("Unsqueeze", {x, t.constInts({dim + 1})});
  std::vector<int64_t> expanded = sizes;
  expanded.insert(expanded.begin() + dim + 1, times);
  std::string wide = t.emit("Expand", {unsqueezed, t.constInts(expanded)});
  sizes[dim] *= times;
  return t.emit("Reshape", {wide, t.constInts(sizes)});
}

/// repeat_interleave(self, int repeats, int dim).
void convertRepeatInterleave(Translator &t) {
  if (t.numInputs() < 3 || t.isNone(2) || !t.constant(1).isInt())
    t.fail("repeat_interleave is converted with a constant number of "
           "repeats and a dim");
  std::vector<int64_t> sizes = t.sizesOf(t.in(0));
  int64_t dim = t.dim(t.intArg(2), static_cast<int64_t>(sizes.size()));
  int32_t type = t.typeOf(t.out());
  t.define(repeatEach(t, t.operand(0, type), sizes, dim, t.intArg(1)));
}

/// q k^T * scale, masked, softmax, times v: the converter.
void convertAttention(Translator &t) {
  int32_t type = t.typeOf(t.out());
  std::vector<int64_t> q = t.sizesOf(t.in(0)), k = t.sizesOf(t.in(1));
  int64_t rank = static_cast<int64_t>(q.size());
  if (rank < 2 || static_cast<int64_t>(k.size()) != rank)
    t.fail("attention on operands of ranks " + std::to_string(q.size()) +
           " and " + std::to_string(k.size()));
  if (t.numInputs() > 4 && t.doubleArg(4) != 0.0)
    t.fail("dropout_p > 0: the module runs in training mode; call "
           "model.eval() before tracing");
  bool isCausal = t.numInputs() > 5 && t.boolArg(5);
  double scale = t.numInputs() > 6 && !t.isNone(6)
                     ? t.doubleArg(6)
                     : 1.0 / std::sqrt(double(q[rank - 1]));
  bool enableGqa = t.numInputs() > 7 && t.boolArg(7);

  std::string key = t.operand(1, type), value = t.operand(2, type);
  if (enableGqa && rank >= 3 && k[rank - 3] != q[rank - 3]) {
    // Each K/V head serves q / k query heads.
    int64_t times = q[rank - 3] / k[rank - 3];
    key = repeatEach(t, key, k, rank - 3, times);
    value = repeatEach(t, value, t.sizesOf(t.in(2)), rank - 3, times);
  }
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i)
    perm[i] = i;
  std::swap(perm[rank - 2], perm[rank - 1]);
  std::string scores =
      t.emit("MatMul", {t.operand(0, type),
                        t.emit("Transpose", {key}, {{"perm", perm}})});
  scores = t.emit("Mul", {scores, t.constScalar(scale, type)});
  std::string lowest =
      t.constScalar(-std::numeric_limits<double>::infinity(), type);
  if (isCausal) {
    at::Tensor keep = at::ones({q[rank - 2], k[rank - 2]}, at::kBool).tril();
    scores = t.emit("Where", {t.constTensor(keep), scores, lowest});
  }
  if (t.numInputs() > 3 && !t.isNone(3)) {
    if (t.typeOf(t.in(3)) == onnx::TensorProto::BOOL)
      scores = t.emit("Where",
                      {t.operand(3, onnx::TensorProto::BOOL), scores, lowest});
    else
      scores = t.emit("Add", {scores, t.operand(3, type)});
  }
  std::string probabilities =
      t.emit("Softmax", {scores}, {{"axis", int64_t(-1)}});
  t.define(t.emit("MatMul", {probabilities, value}));
}

} // namespace

void tp::torchscript::registerMissingAtenOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (c10::Dispatcher::singleton().findSchema(
            {"aten::scaled_dot_product_attention", ""}))
      return;
    // Lives as long as the program: the registration ends with it.
    static torch::Library library(torch::Library::FRAGMENT, "aten",
                                  c10::nullopt, __FILE__, __LINE__);
    library.def(kSchema);
    library.impl("scaled_dot_product_attention",
                 torch::dispatch(c10::DispatchKey::CompositeImplicitAutograd,
                                 TORCH_FN(attention)));
  });
}

void tp::torchscript::populateAttentionConverters(ConverterMap &m) {
  m["aten::scaled_dot_product_attention"] = convertAttention;
  m["aten::repeat_interleave"] = convertRepeatInterleave;
}
