//===- LoadGraph.cpp - a TorchScript module's forward graph, typed --------===//
//
// torch::jit::load (through ArchiveReader: the weights are not read), then
// forward()'s graph inlined. Attribute reads
// (prim::GetAttr chains from self) are resolved against the module: a
// tensor is a weight, kept as a named read; anything else (training, a
// head count) becomes a constant, so that constant propagation folds what
// depends on it, scripted `if self.training:` included. No freezing: it
// would fold buffers into anonymous constants and merge equal tensors.
//
// Traces carry no types, so the graph is run once, node by node, on inputs
// of the user's shapes and of the types InputTypes.cpp chooses; each value
// takes the type of what it produced, and the shape arithmetic that
// tracing recorded (aten::size, NumToTensor, Int) then folds to constants.
// The large floating-point weights it reads were never loaded
// (ArchiveReader): their values are zeros or garbage, which decide no
// type, and nothing computed from a weight is folded.
//
//===----------------------------------------------------------------------===//

#include "TorchScriptGraph.h"

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/passes/remove_dropout.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include <sstream>
#include <unordered_set>

using namespace tp::torchscript;
using torch::jit::Node;
using torch::jit::Value;

std::string tp::torchscript::describeNode(const Node *node) {
  std::string text = node->kind().toQualString();
  const torch::jit::SourceRange &range = node->sourceRange();
  if (!range.source())
    return text;
  c10::optional<torch::jit::SourceRange> original =
      range.findSourceRangeThatGenerated();
  if (original) {
    // A trace records the Python stack as text, innermost frame first:
    // "…/torch/nn/modules/linear.py(114): forward\nmodel.py(9): forward".
    // Point at the first frame outside torch itself. Scripted code keeps
    // the real source range instead.
    std::istringstream lines(original->text().str());
    std::string line;
    bool traced = false;
    while (std::getline(lines, line)) {
      size_t close = line.rfind("): ");
      size_t open = close == std::string::npos ? close : line.rfind('(', close);
      if (open == std::string::npos || open + 1 >= close ||
          line.find_first_not_of("0123456789", open + 1) != close)
        continue;
      traced = true;
      if (line.find("/torch/") == std::string::npos)
        return text + " at " + line.substr(0, open) + ":" +
               line.substr(open + 1, close - open - 1);
    }
    if (!traced) {
      // Scripted: the op's own line may be inside torch (an nn.Module's
      // forward, inlined); then point at the innermost call from outside.
      std::vector<torch::jit::SourceRange> ranges = {*original};
      if (c10::optional<torch::jit::InlinedCallStackPtr> stack =
              node->callstack()) {
        std::vector<torch::jit::InlinedCallStackEntry> calls = (*stack)->vec();
        for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
          const torch::jit::SourceRange &call = std::get<1>(*it);
          if (!call.source())
            continue;
          c10::optional<torch::jit::SourceRange> from =
              call.findSourceRangeThatGenerated();
          ranges.push_back(from ? *from : call);
        }
      }
      for (const torch::jit::SourceRange &candidate : ranges) {
        auto where = candidate.file_line_col();
        if (where && std::get<0>(*where).find("/torch/") == std::string::npos)
          return text + " at " + std::get<0>(*where) + ":" +
                 std::to_string(std::get<1>(*where));
      }
    }
  }
  if (auto where = range.file_line_col())
    return text + " at " + std::get<0>(*where) + ":" +
           std::to_string(std::get<1>(*where));
  return text;
}

namespace {

/// Replaces attribute reads from self: module objects are followed,
/// tensors recorded as weights, other values become constants.
void resolveAttributes(LoadedGraph &loaded) {
  torch::jit::Graph &graph = *loaded.graph;
  std::unordered_map<const Value *, c10::IValue> objects;
  objects[graph.inputs()[0]] = loaded.module._ivalue();
  std::unordered_map<const Value *, std::string> paths;
  paths[graph.inputs()[0]] = "";
  std::vector<Node *> folded;
  for (Node *node : graph.nodes()) {
    if (node->kind() != c10::prim::GetAttr)
      continue;
    auto parent = objects.find(node->input());
    if (parent == objects.end() || !parent->second.isObject())
      throw ConvertError(describeNode(node) +
                         ": reads an attribute of a value that is not a "
                         "submodule of the model");
    const std::string &name = node->s(c10::attr::name);
    const std::string &prefix = paths[node->input()];
    std::string path = prefix.empty() ? name : prefix + "." + name;
    c10::IValue value = parent->second.toObject()->getAttr(name);
    if (value.isObject()) {
      objects[node->output()] = value;
      paths[node->output()] = path;
      folded.push_back(node);
    } else if (value.isTensor()) {
      loaded.weights[node->output()] = path;
      loaded.weightTensors[node->output()] = value.toTensor();
    } else {
      torch::jit::WithInsertPoint guard(node);
      c10::optional<Value *> constant = graph.insertConstant(value);
      if (!constant)
        throw ConvertError(describeNode(node) + ": attribute '" + path +
                           "' has a value that cannot be a constant");
      node->output()->replaceAllUsesWith(*constant);
      folded.push_back(node);
    }
  }
  // Submodules stay as the inputs of the reads below them; nothing else
  // may use one.
  for (auto it = folded.rbegin(); it != folded.rend(); ++it)
    if (!(*it)->hasUses())
      (*it)->destroy();
  for (Node *node : graph.nodes()) {
    if (node->kind() != c10::prim::GetAttr ||
        loaded.weights.count(node->output()))
      continue;
    for (const torch::jit::Use &use : node->output()->uses())
      if (use.user->kind() != c10::prim::GetAttr)
        throw ConvertError(describeNode(use.user) + ": uses submodule '" +
                           paths[node->output()] + "' as a value");
  }
}

void simplify(std::shared_ptr<torch::jit::Graph> &graph) {
  for (int round = 0; round < 8; ++round) {
    bool changed =
        torch::jit::PeepholeOptimize(graph, /*disable_shape_peepholes=*/false);
    changed |= torch::jit::ConstantPropagation(graph);
    torch::jit::EliminateDeadCode(graph);
    if (!changed)
      break;
  }
}

/// Rejects what cannot be a static graph, and modules left in training
/// mode.
void checkStatic(const LoadedGraph &loaded, const std::string &path) {
  for (const Node *node : loaded.graph->nodes()) {
    c10::Symbol kind = node->kind();
    if (kind == c10::prim::If || kind == c10::prim::Loop)
      throw ConvertError(
          path + ": " + describeNode(node) +
          ": Python control flow (if/for/while) that depends on the "
          "inputs; trace the model, or make the branch static");
    if (kind == c10::prim::RaiseException)
      throw ConvertError(path + ": " + describeNode(node) +
                         ": the model raises an exception for these input "
                         "shapes");
    auto isTrueConstant = [](const Value *v) {
      c10::optional<c10::IValue> value = torch::jit::toIValue(v);
      return value && value->isBool() && value->toBool();
    };
    std::string name = kind.toQualString();
    bool training = false;
    if (name == "aten::dropout" || name == "aten::feature_dropout" ||
        name == "aten::alpha_dropout")
      training = node->inputs().size() > 2 && isTrueConstant(node->input(2));
    else if (name == "aten::batch_norm" || name == "aten::instance_norm")
      training = node->inputs().size() > 5 && isTrueConstant(node->input(5));
    if (training)
      throw ConvertError(path + ": " + describeNode(node) +
                         " runs in training mode: the module was traced in "
                         "training mode; call model.eval() before "
                         "torch.jit.trace");
  }
}

/// Forgets weight reads that the passes removed (their Value pointers may
/// be reused by new nodes).
void pruneWeights(LoadedGraph &loaded) {
  std::unordered_set<const Value *> live;
  for (const Node *node : loaded.graph->nodes())
    if (node->kind() == c10::prim::GetAttr)
      live.insert(node->output());
  for (auto it = loaded.weights.begin(); it != loaded.weights.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    loaded.weightTensors.erase(it->first);
    it = loaded.weights.erase(it);
  }
}

at::Tensor exampleInput(const std::vector<int64_t> &shape, int32_t type) {
  switch (type) {
  case onnx::TensorProto::INT64:
    return at::zeros(shape, at::kLong);
  case onnx::TensorProto::INT32:
    return at::zeros(shape, at::kInt);
  case onnx::TensorProto::BOOL:
    return at::ones(shape, at::kBool);
  case onnx::TensorProto::DOUBLE:
    return at::randn(shape, at::kDouble);
  // Drawn in f32 and rounded: libtorch's CPU randn may lack half types.
  case onnx::TensorProto::FLOAT16:
    return at::randn(shape, at::kFloat).to(at::kHalf);
  case onnx::TensorProto::BFLOAT16:
    return at::randn(shape, at::kFloat).to(at::kBFloat16);
  default:
    return at::randn(shape, at::kFloat);
  }
}

/// Runs the graph once and gives every tensor value the type (dtype,
/// sizes) of what it held. What depends on neither the inputs nor the
/// weights (a mask built with torch.full(..., device=x.device), which
/// constant propagation stops at) becomes the constant it computed.
void typeByRunning(LoadedGraph &loaded, const std::string &path,
                   const std::map<std::string, InputSpec> &inputs,
                   const std::vector<InputType> &types) {
  torch::jit::Graph &graph = *loaded.graph;
  std::unordered_map<const Value *, c10::IValue> env;
  at::manual_seed(0);
  for (size_t i = 0; i < loaded.inputNames.size(); ++i) {
    Value *input = graph.inputs()[i + 1];
    at::Tensor example = exampleInput(inputs.at(loaded.inputNames[i]).shape,
                                      types[i].elementType);
    input->setType(c10::TensorType::create(example));
    env[input] = example;
  }
  torch::NoGradGuard noGrad;
  std::unordered_set<const Value *> variable;
  for (size_t i = 1; i < graph.inputs().size(); ++i)
    variable.insert(graph.inputs()[i]);
  std::vector<std::pair<Value *, c10::IValue>> folded;
  // Values that an in-place op left by mutation removal writes, through
  // any views: they are not what they were when computed, so never folded.
  std::unordered_set<const Value *> written;
  for (Node *node : graph.nodes()) {
    std::string name = node->kind().toQualString();
    if (node->inputs().empty() || name.empty() || name.back() != '_' ||
        name.rfind("aten::", 0) != 0)
      continue;
    for (const Value *v = node->input(0); v && written.insert(v).second;) {
      const Node *producer = v->node();
      std::string kind = producer->kind().toQualString();
      bool view = kind == "aten::slice" || kind == "aten::select" ||
                  kind == "aten::view" || kind == "aten::expand" ||
                  kind == "aten::transpose" || kind == "aten::permute" ||
                  kind == "aten::unsqueeze" || kind == "aten::squeeze" ||
                  kind == "aten::narrow" || kind == "aten::reshape";
      v = view ? producer->input(0) : nullptr;
    }
  }
  for (Node *node : graph.nodes()) {
    torch::jit::Stack stack;
    c10::Symbol kind = node->kind();
    auto in = [&](size_t i) -> c10::IValue & { return env.at(node->input(i)); };
    if (kind == c10::prim::Constant) {
      stack.push_back(*torch::jit::toIValue(node->output()));
    } else if (kind == c10::prim::GetAttr) {
      // A weight, or a submodule that only the reads below it use.
      auto weight = loaded.weightTensors.find(node->output());
      stack.push_back(weight == loaded.weightTensors.end()
                          ? c10::IValue()
                          : c10::IValue(weight->second));
    } else if (kind == c10::prim::ListConstruct) {
      // The interpreter does these itself; they have no operator.
      c10::impl::GenericList list(
          node->output()->type()->expectRef<c10::ListType>().getElementType());
      for (size_t i = 0; i < node->inputs().size(); ++i)
        list.push_back(in(i));
      stack.emplace_back(std::move(list));
    } else if (kind == c10::prim::ListUnpack) {
      for (const c10::IValue &element : in(0).toListRef())
        stack.push_back(element);
    } else if (kind == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> elements;
      for (size_t i = 0; i < node->inputs().size(); ++i)
        elements.push_back(in(i));
      stack.emplace_back(c10::ivalue::Tuple::create(std::move(elements)));
    } else if (kind == c10::prim::TupleUnpack) {
      for (const c10::IValue &element : in(0).toTupleRef().elements())
        stack.push_back(element);
    } else {
      for (size_t i = 0; i < node->inputs().size(); ++i)
        stack.push_back(in(i));
      try {
        node->getOperation()(stack);
      } catch (const c10::Error &e) {
        throw ConvertError(path + ": " + describeNode(node) +
                           " failed on example inputs of the given shapes: " +
                           e.what_without_backtrace());
      }
    }
    if (stack.size() != node->outputs().size())
      throw ConvertError(path + ": " + describeNode(node) +
                         ": unexpected number of results");
    bool fixed = kind != c10::prim::GetAttr && kind != c10::prim::Constant &&
                 !node->hasSideEffects() && !node->isNondeterministic();
    // What a tensor's static type says (its device, dtype, sizes) is fixed
    // even where its values are not.
    std::string name = kind.toQualString();
    bool typeOnly = name == "prim::device" || name == "prim::dtype" ||
                    name == "prim::layout" || name == "aten::size" ||
                    name == "aten::dim" || name == "aten::numel";
    if (!typeOnly)
      for (const Value *input : node->inputs())
        fixed &= !variable.count(input);
    for (size_t i = 0; i < stack.size(); ++i) {
      Value *output = node->output(i);
      if (stack[i].isTensor() && output->type()->cast<c10::TensorType>())
        output->setType(c10::TensorType::create(stack[i].toTensor()));
      if (fixed && !written.count(output) && !stack[i].isObject() &&
          !stack[i].isTuple())
        // A copy: a later in-place op may write the tensor we ran.
        folded.emplace_back(output,
                            stack[i].isTensor()
                                ? c10::IValue(stack[i].toTensor().clone())
                                : stack[i]);
      else if (kind != c10::prim::Constant)
        variable.insert(output);
      env[output] = std::move(stack[i]);
    }
  }
  for (auto &[value, constant] : folded) {
    torch::jit::WithInsertPoint guard(value->node());
    if (c10::optional<Value *> replacement = graph.insertConstant(constant))
      value->replaceAllUsesWith(*replacement);
  }
}

/// "2x16", as --input-shape takes dims.
std::string formatDims(const std::vector<int64_t> &shape) {
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "x" : "") + std::to_string(shape[i]);
  return text;
}

/// Types the graph by running it on inputs of the chosen types. An
/// assumed int64 input that the graph cannot run with is not int64: then
/// every such input is taken as f32 (the type of data) and it runs again.
/// Failing that, the error says which types were assumed and how to give
/// them. Returns whether it fell back.
bool typeWithChosenInputs(LoadedGraph &loaded, const std::string &path,
                          const std::map<std::string, InputSpec> &inputs,
                          std::vector<InputType> &types) {
  auto explain = [&](const ConvertError &e) {
    std::string assumed;
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i].source == InputTypeSource::Assumed)
        assumed += std::string(assumed.empty() ? "" : ", ") + "'" +
                   loaded.inputNames[i] + "' " +
                   elementTypeName(types[i].elementType);
    if (assumed.empty())
      return ConvertError(e.what());
    return ConvertError(std::string(e.what()) +
                        " (with input types assumed: " + assumed +
                        "; give each input's type with its shape, "
                        "--input-shape NAME=DIMS:TYPE)");
  };
  try {
    typeByRunning(loaded, path, inputs, types);
    return false;
  } catch (const ConvertError &e) {
    bool retry = false;
    for (InputType &type : types)
      if (type.source == InputTypeSource::Assumed &&
          type.elementType == onnx::TensorProto::INT64) {
        type.elementType = onnx::TensorProto::FLOAT;
        retry = true;
      }
    if (!retry)
      throw explain(e);
  }
  try {
    typeByRunning(loaded, path, inputs, types);
  } catch (const ConvertError &e) {
    throw explain(e);
  }
  return true;
}

/// One line per assumed input type: which, why, and how to give another.
void warnAssumedTypes(LoadedGraph &loaded,
                      const std::map<std::string, InputSpec> &inputs,
                      const std::vector<InputType> &types, bool fellBack) {
  for (size_t i = 0; i < types.size(); ++i) {
    const InputType &type = types[i];
    if (type.source != InputTypeSource::Assumed)
      continue;
    const std::string &name = loaded.inputNames[i];
    std::string assumed = elementTypeName(type.elementType);
    std::string uses =
        type.reason.empty()
            ? std::string("nothing reads its values")
            : "no use decides it (its first use: " + type.reason + ")";
    std::string why = fellBack
                          ? "the file does not record its type, " + uses +
                                ", and the graph does not run with it as i64"
                          : "the file does not record its type and " + uses;
    std::string other =
        type.elementType == onnx::TensorProto::INT64 ? "f32" : "TYPE";
    std::string flag = "--input-shape " + name + "=" +
                       formatDims(inputs.at(name).shape) + ":" + other;
    loaded.warnings.push_back("input '" + name + "' is assumed to be " +
                              assumed + ": " + why + "; if it is not " +
                              assumed +
                              ", give its type with its shape: " + flag);
  }
}

} // namespace

LoadedGraph
tp::torchscript::loadGraph(const std::string &path, const ArchiveState &archive,
                           const std::map<std::string, InputSpec> &inputs,
                           bool typed) {
  LoadedGraph loaded;
  loaded.module = torch::jit::load(
      makeArchiveReader(path, archive.unreadRecords), at::Device(at::kCPU));
  c10::ClassTypePtr type = loaded.module.type();
  if (type->hasAttribute("training") && loaded.module.is_training())
    throw ConvertError(path + ": the module was saved in training mode; "
                              "call model.eval() before saving it");
  if (!loaded.module.find_method("forward"))
    throw ConvertError(path + ": the module has no forward() method");
  torch::jit::Method forward = loaded.module.get_method("forward");
  const c10::FunctionSchema &schema = forward.function().getSchema();
  for (size_t i = 1; i < schema.arguments().size(); ++i) {
    const c10::Argument &argument = schema.arguments()[i];
    if (!argument.type()->cast<c10::TensorType>())
      throw ConvertError(path + ": forward() argument '" + argument.name() +
                         "' has type " + argument.type()->annotation_str() +
                         "; only tensor inputs are supported");
    loaded.inputNames.push_back(argument.name());
  }

  loaded.graph = forward.graph()->copy();
  torch::jit::Inline(*loaded.graph);
  resolveAttributes(loaded);
  torch::jit::removeDropout(loaded.graph);
  torch::jit::LowerAllTuples(loaded.graph);
  // In-place ops (x += y, mask.mul_(...)) become their functional forms
  // where nothing else aliases what they write.
  torch::jit::RemoveListMutation(loaded.graph);
  torch::jit::RemoveTensorMutation(loaded.graph);
  simplify(loaded.graph);
  pruneWeights(loaded);
  if (!typed)
    return loaded;
  // Control flow is checked before running, so that a data-dependent
  // branch is reported as such rather than by the interpreter below.
  checkStatic(loaded, path);
  for (const std::string &name : loaded.inputNames)
    if (!inputs.count(name))
      throw ConvertError(path + ": give the shape of input '" + name +
                         "' with --input-shape " + name + "=DIMS");
  std::vector<InputType> types =
      chooseInputTypes(loaded, archive, inputs, loaded.warnings);
  bool fellBack = typeWithChosenInputs(loaded, path, inputs, types);
  warnAssumedTypes(loaded, inputs, types, fellBack);
  simplify(loaded.graph);
  pruneWeights(loaded);
  checkStatic(loaded, path);
  return loaded;
}
