//===- Translator.h - typed TorchScript graph to ONNX nodes -----*- C++ -*-===//
//
// Private to the TorchScript frontend: the state of one translation and
// what an aten op's converter sees of it. Every tensor value has a
// complete type here (LoadGraph.cpp ran the graph), and every non-tensor
// value (ints, lists, None) is a constant.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_TORCHSCRIPT_TRANSLATOR_H
#define TP_LIB_TARGET_TORCHSCRIPT_TRANSLATOR_H

#include "TorchScriptGraph.h"

#include <functional>
#include <initializer_list>

namespace tp::torchscript {

/// ONNX's opset for the nodes we make (LayerNormalization needs 17).
constexpr int64_t kOpset = 17;

/// One ONNX attribute, built inline: {"axis", int64_t(1)}.
struct Attr {
  Attr(const char *name, int64_t value);
  Attr(const char *name, int value) : Attr(name, int64_t(value)) {}
  Attr(const char *name, float value);
  Attr(const char *name, std::vector<int64_t> values);
  Attr(const char *name, const char *value);
  onnx::AttributeProto proto;
};

class Translator {
public:
  Translator(const std::string &path, LoadedGraph &loaded,
             const ArchiveState &archive, onnx::GraphProto &graph);

  /// Translates every node and declares the graph's inputs and outputs.
  void run();

  //===--- What converters use -------------------------------------------===//

  /// The node being converted.
  torch::jit::Node *node = nullptr;

  /// Makes another node the current one for a while (to define its
  /// results).
  struct Scope {
    Scope(Translator &t, torch::jit::Node *n) : t(t), saved(t.node) {
      t.node = n;
    }
    ~Scope() { t.node = saved; }
    Translator &t;
    torch::jit::Node *saved;
  };

  /// A failure at the current node.
  [[noreturn]] void fail(const std::string &what) const;

  torch::jit::Value *in(size_t i) const { return node->input(i); }
  torch::jit::Value *out(size_t i = 0) const { return node->output(i); }
  size_t numInputs() const { return node->inputs().size(); }
  bool isNone(size_t i) const;
  /// The constant value of input i; fails when it is not a constant.
  c10::IValue constant(size_t i) const;
  int64_t intArg(size_t i) const;
  double doubleArg(size_t i) const;
  bool boolArg(size_t i) const;
  std::vector<int64_t> intListArg(size_t i) const;
  /// True for a constant number, or a constant 0-dim tensor (a Python
  /// scalar that tracing wrapped).
  bool isScalar(size_t i) const;

  /// Element type (ONNX) and sizes of a tensor value.
  int32_t typeOf(const torch::jit::Value *v) const;
  std::vector<int64_t> sizesOf(const torch::jit::Value *v) const;
  int64_t rankOf(const torch::jit::Value *v) const {
    return static_cast<int64_t>(sizesOf(v).size());
  }
  /// Normalizes a possibly negative dim of a rank-`rank` tensor.
  int64_t dim(int64_t d, int64_t rank) const;

  /// The ONNX name of tensor input i, cast to `type` when given (a scalar
  /// constant becomes a 0-dim constant of that type).
  std::string operand(size_t i, int32_t type = 0);
  std::string tensorName(torch::jit::Value *v);

  /// Adds a node; returns its first output's name (fresh names).
  std::string emit(const char *op, std::vector<std::string> inputs,
                   std::initializer_list<Attr> attrs = {}, size_t outputs = 1,
                   std::vector<std::string> *names = nullptr);
  std::string constInts(const std::vector<int64_t> &values);
  std::string constScalar(double value, int32_t type);
  std::string constTensor(const at::Tensor &tensor);
  std::string cast(const std::string &name, int32_t from, int32_t to);
  /// Gives node output i the ONNX value `name`.
  void define(const std::string &name, size_t i = 0);
  /// Makes later uses of `v` read `name`: how an in-place write that the
  /// mutation-removal pass left (into a view) takes effect.
  void rebind(torch::jit::Value *v, const std::string &name) {
    names[v] = name;
  }

private:
  std::string fresh(const std::string &hint);
  std::string weight(torch::jit::Value *v);

  std::string path;
  LoadedGraph &loaded;
  const ArchiveState &archive;
  const std::unordered_map<std::string, ArchiveLocation> &locations;
  onnx::GraphProto &graph;
  std::string archiveName;
  std::unordered_map<const torch::jit::Value *, std::string> names;
  /// Initializers already made, by archive range (tied weights share one).
  std::map<std::string, std::string> initializers;
  size_t counter = 0;
};

using Converter = std::function<void(Translator &)>;
using ConverterMap = std::map<std::string, Converter>;

/// True for an op whose result shares its operand's storage.
bool isViewOp(const std::string &kind);

/// After an in-place op wrote `value` into `view` (a chain of views of some
/// tensor: x.unsqueeze(0) += 1, x[:, :n] *= m), gives the tensor and every
/// view on the chain their new values, so that later reads see the write.
/// Fails where a view cannot be inverted (expand, a strided slice) or an
/// alias made before the write is read after it.
void writeThroughViews(Translator &t, torch::jit::Value *view,
                       const std::string &value);

void populateElementwiseConverters(ConverterMap &map);
void populateTensorConverters(ConverterMap &map);
void populateNNConverters(ConverterMap &map);
void populateAttentionConverters(ConverterMap &map);

/// Registers, with kernels, the aten ops that files from newer PyTorch
/// versions call and this libtorch lacks (scaled_dot_product_attention),
/// so that their code loads and runs. Call before loading.
void registerMissingAtenOps();

} // namespace tp::torchscript

#endif // TP_LIB_TARGET_TORCHSCRIPT_TRANSLATOR_H
