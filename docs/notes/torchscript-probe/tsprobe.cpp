// tsprobe.cpp - probe Debian libtorch 1.13 TorchScript import for an MLIR
// frontend. Usage: tsprobe FILE.pt [--no-freeze] [--shapes 2x16[,1x16:long]]
// [--records] [--quiet] Env: TSPROBE_EXEC_SHAPES=1 (type by executing once on
// random inputs; else symbolic shapes)
//      TSPROBE_LEGACY_SHAPES=1, TSPROBE_ELIM_EXCEPTIONS=1,
//      TSPROBE_LOWER_ALL_TUPLES=1, TSPROBE_SCHEMAS=1 (print matched overload
//      schemas), TSPROBE_NO_EVAL=1 (skip eval()).
// Build: g++ -std=c++17 -I/usr/include/torch/csrc/api/include tsprobe.cpp -o
// tsprobe
//          -ltorch -ltorch_cpu -lc10
#include <caffe2/serialize/inline_container.h> // PyTorchStreamReader
#include <torch/csrc/jit/api/module.h>         // torch::jit::freeze
#include <torch/csrc/jit/ir/constants.h>       // torch::jit::toIValue
#include <torch/csrc/jit/ir/ir.h>              // Graph, Node, Value, Block
#include <torch/csrc/jit/ir/scope.h>           // InlinedCallStack
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/dtype_analysis.h> // DtypePropagation
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/passes/remove_dropout.h>
#include <torch/csrc/jit/passes/remove_exceptions.h>
#include <torch/csrc/jit/passes/shape_analysis.h> // PropagateInputShapes (legacy)
#include <torch/csrc/jit/passes/symbolic_shape_analysis.h> // PropagateShapesOnGraph
#include <torch/script.h> // torch::jit::load, Module, IValue

#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

using torch::jit::Node;
using torch::jit::Value;

static std::string typeStr(const Value *v) {
  auto ty = v->type();
  if (auto tt = ty->cast<c10::TensorType>()) {
    std::ostringstream os;
    os << "Tensor<";
    if (auto st = tt->scalarType())
      os << c10::toString(*st);
    else
      os << "?dtype";
    auto sizes = tt->sizes(); // VaryingShape<int64_t>
    if (auto rank = sizes.size()) {
      os << ", [";
      for (size_t i = 0; i < *rank; ++i) {
        if (i)
          os << "x";
        if (auto d = sizes[i])
          os << *d;
        else
          os << "?";
      }
      os << "]";
    } else {
      os << ", rank?";
    }
    if (auto dev = tt->device())
      os << ", " << *dev;
    os << ">";
    return os.str();
  }
  return ty->annotation_str(); // int, float, int[], Tensor[], (Tensor, Tensor),
                               // NoneType, Device...
}

static std::string ivalueStr(const c10::IValue &iv) {
  std::ostringstream os;
  if (iv.isTensor()) {
    const at::Tensor &t = iv.toTensor();
    os << "tensor(dtype=" << t.scalar_type() << ", shape=" << t.sizes()
       << ", strides=" << t.strides() << ", contiguous=" << t.is_contiguous()
       << ", nbytes=" << t.numel() * t.element_size()
       << ", data_ptr=" << t.data_ptr();
    if (t.numel() > 0 && t.scalar_type() == at::kFloat) {
      // Raw data access: contiguous() then data_ptr<float>() (or t.data_ptr()
      // as void*).
      at::Tensor c = t.contiguous();
      os << ", first=" << c.data_ptr<float>()[0];
    }
    os << ")";
  } else if (iv.isInt())
    os << "int " << iv.toInt();
  else if (iv.isDouble())
    os << "float " << iv.toDouble();
  else if (iv.isBool())
    os << "bool " << (iv.toBool() ? "true" : "false");
  else if (iv.isIntList())
    os << "int[] " << iv.toIntVector();
  else if (iv.isDoubleList())
    os << "float[] " << iv.toDoubleVector();
  else if (iv.isString())
    os << "str \"" << iv.toStringRef() << "\"";
  else if (iv.isNone())
    os << "None";
  else if (iv.isDevice())
    os << "Device " << iv.toDevice();
  else
    os << iv.tagKind() << " " << iv; // fallback: IValue has operator<<
  return os.str();
}

static std::string srcStr(const Node *n) {
  const torch::jit::SourceRange &sr = n->sourceRange();
  if (!sr.source())
    return "";
  std::ostringstream os;
  auto emit = [&](const torch::jit::SourceRange &r, const char *tag) {
    std::string text = r.text().str();
    if (auto nl = text.find('\n'); nl != std::string::npos)
      text = text.substr(0, nl) + "...";
    if (text.size() > 70)
      text = text.substr(0, 70) + "...";
    if (auto flc = r.file_line_col()) {
      os << " " << tag << "@" << std::get<0>(*flc) << ":" << std::get<1>(*flc)
         << ":" << std::get<2>(*flc);
    } else {
      os << " " << tag << "@<nofile>";
    }
    os << " `" << text << "`";
  };
  emit(sr, "src");
  // Range in the *original* Python file (only if the serialized code kept it).
  if (auto orig = sr.findSourceRangeThatGenerated())
    emit(*orig, "orig");
  // Module-instance path of the call stack (after inlining), e.g. fc1(Linear).
  if (auto cs = n->callstack()) {
    os << " stack=";
    for (auto &e : (*cs)->vec()) {
      auto &mi = std::get<2>(e);
      os << (mi ? mi->instance_name() : std::string("?")) << "/";
    }
  }
  return os.str();
}

static std::map<std::string, std::string>
    gSchemas; // kind -> overload schema seen

static void dumpBlock(torch::jit::Block *b, int indent,
                      std::set<std::string> &kinds, bool quiet) {
  std::string pad(indent, ' ');
  for (Node *n : b->nodes()) {
    kinds.insert(n->kind().toQualString());
    // The matched overload (argument names, defaults, alias annotations); null
    // for prims.
    if (const c10::FunctionSchema *fs = n->maybeSchema()) {
      std::ostringstream os;
      os << *fs;
      gSchemas[n->kind().toQualString()] = os.str();
    }
    if (!quiet) {
      std::cout << pad << n->kind().toQualString() << "  (";
      for (size_t i = 0; i < n->inputs().size(); ++i)
        std::cout << (i ? ", " : "") << "%" << n->input(i)->debugName() << ":"
                  << typeStr(n->input(i));
      std::cout << ") -> (";
      for (size_t i = 0; i < n->outputs().size(); ++i)
        std::cout << (i ? ", " : "") << "%" << n->output(i)->debugName() << ":"
                  << typeStr(n->output(i));
      std::cout << ")";
      if (n->kind() == c10::prim::Constant) {
        if (auto iv = torch::jit::toIValue(n->output()))
          std::cout << " = " << ivalueStr(*iv);
      }
      if (n->kind() == c10::prim::GetAttr)
        std::cout << " name=" << n->s(c10::attr::name);
      std::cout << srcStr(n) << "\n";
    }
    for (auto *sub : n->blocks()) {
      if (!quiet) {
        std::cout
            << pad
            << "  block("; // block params: for prim::Loop = (iter, carried...)
        for (auto *p : sub->inputs())
          std::cout << " %" << p->debugName() << ":" << typeStr(p);
        std::cout << " ):\n";
      }
      dumpBlock(sub, indent + 4, kinds, quiet);
      if (!quiet) { // block returns: for prim::Loop = (continue_cond,
                    // carried...)
        std::cout << pad << "    -> (";
        for (auto *r : sub->outputs())
          std::cout << " %" << r->debugName();
        std::cout << " )\n";
      }
    }
  }
}

// Shape/dtype inference by execution: run each top-level node once on example
// inputs (like tracing does) and stamp complete TensorTypes on every tensor
// Value. Works for straight-line graphs only (frontend rejects
// prim::If/prim::Loop anyway).
static void
annotateByExecution(std::shared_ptr<torch::jit::Graph> &graph,
                    const std::vector<c10::IValue> &inputs /* incl. self */) {
  std::unordered_map<const Value *, c10::IValue> env;
  for (size_t i = 0; i < graph->inputs().size() && i < inputs.size(); ++i)
    env[graph->inputs()[i]] = inputs[i];
  torch::NoGradGuard noGrad;
  for (Node *n : graph->nodes()) {
    TORCH_CHECK(n->blocks().empty(),
                "control flow not supported: ", n->kind().toQualString());
    torch::jit::Stack stack;
    if (n->kind() == c10::prim::Constant) {
      stack.push_back(*torch::jit::toIValue(n->output()));
    } else if (n->kind() == c10::prim::ListConstruct) {
      // The interpreter special-cases these list/tuple prims (no schema'd
      // operator; torch::jit::listConstruct & co. in vararg_functions.h are not
      // exported).
      c10::impl::GenericList list(
          n->output()->type()->expectRef<c10::ListType>().getElementType());
      for (Value *in : n->inputs())
        list.push_back(env.at(in));
      stack.emplace_back(std::move(list));
    } else if (n->kind() == c10::prim::ListUnpack) {
      for (const c10::IValue &e : env.at(n->input()).toListRef())
        stack.push_back(e);
    } else if (n->kind() == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> elems;
      for (Value *in : n->inputs())
        elems.push_back(env.at(in));
      stack.emplace_back(c10::ivalue::Tuple::create(std::move(elems)));
    } else if (n->kind() == c10::prim::TupleUnpack) {
      for (const c10::IValue &e : env.at(n->input()).toTupleRef().elements())
        stack.push_back(e);
    } else {
      for (Value *in : n->inputs())
        stack.push_back(env.at(in));
      n->getOperation()(stack); // Operation = std::function<void(Stack&)>
    }
    TORCH_CHECK(stack.size() == n->outputs().size(), "bad stack for ",
                n->kind().toQualString());
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      Value *o = n->output(i);
      if (stack[i].isTensor() && o->type()->cast<c10::TensorType>())
        o->setType(c10::TensorType::create(
            stack[i].toTensor())); // dtype+sizes+strides+device
      env[o] = std::move(stack[i]);
    }
  }
}

static std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>
parseShapes(const std::string &s) {
  std::vector<std::pair<std::vector<int64_t>, at::ScalarType>> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    at::ScalarType st = at::kFloat;
    if (auto c = item.find(':'); c != std::string::npos) {
      std::string d = item.substr(c + 1);
      item = item.substr(0, c);
      if (d == "long")
        st = at::kLong;
      else if (d == "int")
        st = at::kInt;
      else if (d == "bool")
        st = at::kBool;
    }
    std::vector<int64_t> dims;
    std::stringstream ds(item);
    std::string d;
    while (std::getline(ds, d, 'x'))
      dims.push_back(std::stoll(d));
    out.emplace_back(dims, st);
  }
  return out;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << "usage: tsprobe FILE.pt [--no-freeze] [--shapes "
                 "2x16,1x8:long] [--records] [--quiet]\n";
    return 2;
  }
  std::string path = argv[1];
  bool doFreeze = true, records = false, quiet = false;
  std::string shapes;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-freeze"))
      doFreeze = false;
    else if (!std::strcmp(argv[i], "--records"))
      records = true;
    else if (!std::strcmp(argv[i], "--quiet"))
      quiet = true;
    else if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc)
      shapes = argv[++i];
  }

  if (records) {
    // Zip-level access without building the Module.
    try {
      caffe2::serialize::PyTorchStreamReader reader(path);
      std::cout << "archive version: " << reader.version() << "\n";
      for (const auto &name : reader.getAllRecords()) {
        std::cout << "  record " << name
                  << " offset=" << reader.getRecordOffset(name);
        if (name.rfind("data/", 0) == 0 || name.rfind("constants/", 0) == 0) {
          auto [ptr, size] =
              reader.getRecord(name); // reads (copies) the whole record
          std::cout << " size=" << size;
        }
        std::cout << "\n";
      }
    } catch (const c10::Error &e) {
      std::cout << "PyTorchStreamReader c10::Error: "
                << e.what_without_backtrace() << "\n";
      return 1;
    }
  }

  torch::jit::Module module;
  try {
    module =
        torch::jit::load(path); // CPU; load(path, torch::kCPU) to force device
  } catch (const c10::Error &e) {
    std::cout << "LOAD FAILED (" << c10::demangle(typeid(e).name())
              << "): " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception &e) {
    // e.g. torch::jit::ErrorReport for "Unknown builtin op" while compiling
    // code/*.py
    std::cout << "LOAD FAILED (" << c10::demangle(typeid(e).name())
              << "): " << e.what() << "\n";
    return 1;
  }

  std::cout << "is_training: " << module.is_training() << "\n";
  std::cout << "type: " << module.type()->repr_str() << "\n";

  // forward schema: argument names and types (arg 0 is `self`)
  torch::jit::Method fwd = module.get_method("forward");
  const c10::FunctionSchema &schema = fwd.function().getSchema();
  std::cout << "schema: " << schema << "\n";
  for (const auto &a : schema.arguments())
    std::cout << "  arg " << a.name() << " : " << a.type()->annotation_str()
              << (a.default_value() ? " (has default)" : "") << "\n";
  for (const auto &r : schema.returns())
    std::cout << "  ret : " << r.type()->annotation_str() << "\n";

  if (!quiet) {
    for (const auto &p : module.named_parameters(/*recurse=*/true))
      std::cout << "  param " << p.name << " " << ivalueStr(p.value) << "\n";
    for (const auto &b : module.named_buffers(/*recurse=*/true))
      std::cout << "  buffer " << b.name << " " << ivalueStr(b.value) << "\n";
    for (const auto &s : module.named_modules())
      std::cout << "  submodule '" << s.name
                << "' : " << s.value.type()->name()->qualifiedName() << "\n";
  }

  std::shared_ptr<torch::jit::Graph> graph;
  if (doFreeze) {
    if (!getenv("TSPROBE_NO_EVAL"))
      module.eval(); // freeze() refuses training-mode modules
    torch::jit::Module frozen;
    try {
      frozen = torch::jit::freeze(
          module); // clone + freeze_module + OptimizeFrozenGraph
    } catch (const c10::Error &e) {
      std::cout << "FREEZE FAILED: " << e.what_without_backtrace() << "\n";
      return 1;
    }
    std::cout << "frozen params left: " << frozen.named_parameters().size()
              << "\n";
    graph = frozen.get_method("forward").graph(); // already inlined by freeze
    torch::jit::Inline(*graph); // no-op here, needed for non-frozen
  } else {
    graph = fwd.graph()->copy();
    torch::jit::Inline(
        *graph); // inlines submodule calls; prim::GetAttr chains remain
  }
  // Scripted nn modules keep input checks as `prim::If(cond) {
  // prim::RaiseException }`. EliminateExceptions treats the raising branch as
  // unreachable (risky; opt-in here).
  if (getenv("TSPROBE_ELIM_EXCEPTIONS"))
    torch::jit::EliminateExceptions(graph);
  torch::jit::removeDropout(
      graph); // only removes aten::dropout whose `train` is const false
  // LowerAllTuples also flattens tuple graph outputs/inputs (GPT-2 returns
  // nested tuples).
  if (getenv("TSPROBE_LOWER_ALL_TUPLES"))
    torch::jit::LowerAllTuples(graph);
  else
    torch::jit::LowerSimpleTuples(graph);
  torch::jit::ConstantPropagation(graph);
  torch::jit::EliminateDeadCode(graph);

  if (!shapes.empty()) {
    auto sh = parseShapes(shapes);
    // graph input 0 is `self` (a ClassType); after freeze it is unused but
    // still present.
    size_t first = graph->inputs().size() > 0 &&
                           graph->inputs()[0]->type()->cast<c10::ClassType>()
                       ? 1
                       : 0;
    for (size_t i = 0; i < sh.size() && first + i < graph->inputs().size(); ++i)
      graph->inputs()[first + i]->setType(c10::TensorType::createContiguous(
          sh[i].second, at::kCPU, sh[i].first));
    if (getenv("TSPROBE_EXEC_SHAPES")) {
      std::vector<c10::IValue> ins{c10::IValue()}; // self: unused after freeze
      for (auto &[dims, st] : sh)
        ins.emplace_back(st == at::kFloat ? torch::randn(dims, st)
                                          : torch::zeros(dims, st));
      // First fold what static analysis can (e.g. scripted `input.dim() != 2`
      // checks -> constant prim::If -> removed), then execute the remaining
      // straight-line graph.
      torch::jit::PropagateShapesOnGraph(graph);
      torch::jit::PeepholeOptimize(graph, /*disable_shape_peepholes=*/false);
      torch::jit::ConstantPropagation(graph);
      torch::jit::EliminateDeadCode(graph);
      try {
        annotateByExecution(graph, ins);
      } catch (const c10::Error &e) {
        std::cout << "exec shape inference failed: " << e.msg() << "\n";
      }
      for (int round = 0; round < 4;
           ++round) { // fold aten::size chains, now concrete
        bool changed = torch::jit::PeepholeOptimize(
            graph, /*disable_shape_peepholes=*/false);
        changed |= torch::jit::ConstantPropagation(graph);
        torch::jit::EliminateDeadCode(graph);
        if (!changed)
          break;
      }
    } else if (getenv("TSPROBE_LEGACY_SHAPES")) {
      torch::jit::PropagateInputShapes(
          graph); // legacy: few ops (no aten::linear)
    } else {
      // Symbolic shape formulas (sizes only).  With concrete input shapes, the
      // peephole folds aten::size / prim::NumToTensor / aten::Int chains
      // recorded by tracing; iterate to a fixpoint since each round can make
      // more sizes concrete.
      for (int round = 0; round < 8; ++round) {
        torch::jit::PropagateShapesOnGraph(graph);
        bool changed = torch::jit::PeepholeOptimize(
            graph, /*disable_shape_peepholes=*/false);
        changed |= torch::jit::ConstantPropagation(graph);
        torch::jit::EliminateDeadCode(graph);
        if (!changed)
          break;
      }
      try {
        torch::jit::DtypePropagation(
            graph); // partial; INTERNAL ASSERTs on some prim ops
      } catch (const c10::Error &e) {
        std::cout << "DtypePropagation failed: "
                  << std::string(e.what_without_backtrace()).substr(0, 160)
                  << "\n";
      }
    }
  }

  std::cout << "graph inputs:";
  for (auto *v : graph->inputs())
    std::cout << " %" << v->debugName() << ":" << typeStr(v);
  std::cout << "\n";
  std::set<std::string> kinds;
  dumpBlock(graph->block(), 2, kinds, quiet);
  std::cout << "graph outputs:";
  for (auto *v : graph->outputs())
    std::cout << " %" << v->debugName() << ":" << typeStr(v);
  // Frontend-style rejection of data-dependent control flow, with a Python
  // location.
  for (Node *n : graph->nodes()) {
    if (n->kind() != c10::prim::If && n->kind() != c10::prim::Loop)
      continue;
    const torch::jit::SourceRange &sr = n->sourceRange();
    auto orig = sr.source() ? sr.findSourceRangeThatGenerated() : c10::nullopt;
    auto flc = orig ? orig->file_line_col()
                    : (sr.source() ? sr.file_line_col() : c10::nullopt);
    std::cout
        << "\nerror: "
        << (flc ? std::get<0>(*flc) + ":" + std::to_string(std::get<1>(*flc))
                : std::string("<unknown>"))
        << ": unsupported control flow " << n->kind().toQualString()
        << " (scripted Python if/for/while); trace the model or make it static";
  }
  std::cout << "\nKINDS:";
  for (auto &k : kinds)
    std::cout << " " << k;
  std::cout << "\n";
  if (getenv("TSPROBE_SCHEMAS"))
    for (auto &[k, sch] : gSchemas)
      std::cout << "SCHEMA " << sch << "\n";
  return 0;
}
