//===- plan-partition-fuzzer.cpp - tp-parallelize on random modules -------===//
//
// libFuzzer target: the input's bytes pick a small @main in the importer's
// style (static shapes, weights as `tp.weight` arguments; matmuls, bias and
// residual adds, activations, transposes, reshapes, softmax-like reductions,
// embedding lookups) and the tp-parallelize options (2 or 4 devices,
// sequence parallel, padding, 2 stages). The pipeline must either fail with
// a diagnostic or give a module that verifies after every pass. Set
// TP_FUZZ_PRINT=1 to print each generated module to stderr.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/Shard/ShardingExtensions.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Transforms/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <numeric>

using namespace mlir;

namespace {

/// Reads choices from the fuzzer's bytes; zeros once they run out.
class Choices {
public:
  Choices(const uint8_t *data, size_t size) : data(data), size(size) {}
  bool done() const { return pos >= size; }
  unsigned next() { return pos < size ? data[pos++] : 0; }
  unsigned below(unsigned n) { return next() % n; }
  int64_t dim() {
    static const int64_t dims[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16};
    return dims[below(std::size(dims))];
  }

private:
  const uint8_t *data;
  size_t size, pos = 0;
};

using Shape = SmallVector<int64_t>;

std::string tensorType(ArrayRef<int64_t> shape, StringRef element = "f32") {
  std::string text = "tensor<";
  for (int64_t d : shape)
    text += std::to_string(d) + "x";
  return text + element.str() + ">";
}

/// `(d0, ..., d{n-1}) -> (results)` with results named by index.
std::string affineMap(unsigned n, ArrayRef<unsigned> results) {
  std::string text = "affine_map<(";
  for (unsigned i = 0; i < n; ++i)
    text += (i ? ", d" : "d") + std::to_string(i);
  text += ") -> (";
  for (auto [i, r] : llvm::enumerate(results))
    text += (i ? ", d" : "d") + std::to_string(r);
  return text + ")>";
}

SmallVector<unsigned> iota(unsigned n) {
  SmallVector<unsigned> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::string iterators(unsigned parallel, unsigned reduction) {
  std::string text = "[";
  for (unsigned i = 0; i < parallel + reduction; ++i)
    text += std::string(i ? ", " : "") +
            (i < parallel ? "\"parallel\"" : "\"reduction\"");
  return text + "]";
}

/// Builds @main one op at a time, in the shape the importer gives.
class ModuleBuilder {
public:
  explicit ModuleBuilder(Choices &choices) : choices(choices) {}

  std::string build() {
    start();
    for (unsigned i = 0, e = 1 + choices.below(12); i < e && !choices.done();
         ++i)
      step();
    std::string results, returned, types;
    SmallVector<unsigned> outputs = {current};
    if (choices.below(4) == 0 && current > 0)
      outputs.push_back(choices.below(current));
    for (auto [i, v] : llvm::enumerate(outputs)) {
      std::string type = tensorType(values[v]);
      results += llvm::formatv("{0}{1} {{tp.output = \"y{2}\"}", i ? ", " : "",
                               type, i);
      returned += (i ? ", " : "") + name(v);
      types += (i ? ", " : "") + type;
    }
    return llvm::formatv("func.func @main({0}) -> ({1}) {{\n"
                         "  %zero = arith.constant 0.0 : f32\n{2}"
                         "  return {3} : {4}\n}\n",
                         args, results, body, returned, types);
  }

private:
  unsigned rank() const { return values[current].size(); }
  const Shape &shape() const { return values[current]; }

  std::string weight(ArrayRef<int64_t> shape) {
    unsigned n = weights++;
    args += llvm::formatv(", %w{0}: {1} {{tp.weight = \"w{0}\"}", n,
                          tensorType(shape));
    return "%w" + std::to_string(n);
  }

  /// Records a new value of `shape` and returns its name.
  std::string define(Shape shape) {
    values.push_back(std::move(shape));
    current = values.size() - 1;
    return "%v" + std::to_string(current);
  }

  /// A zero-filled init of `shape`.
  std::string zeros(ArrayRef<int64_t> shape) {
    unsigned n = temps++;
    body += llvm::formatv("  %e{0} = tensor.empty() : {1}\n"
                          "  %z{0} = linalg.fill ins(%zero : f32) outs(%e{0} "
                          ": {1}) -> {1}\n",
                          n, tensorType(shape));
    return "%z" + std::to_string(n);
  }

  std::string empty(ArrayRef<int64_t> shape) {
    unsigned n = temps++;
    body +=
        llvm::formatv("  %e{0} = tensor.empty() : {1}\n", n, tensorType(shape));
    return "%e" + std::to_string(n);
  }

  /// A linalg.generic over `loops` dims; `inputs` pairs each operand with
  /// its map's results; the region is `region` with %a, %b, %acc.
  void generic(unsigned parallel, unsigned reduction,
               ArrayRef<std::pair<std::string, SmallVector<unsigned>>> inputs,
               ArrayRef<std::string> inputTypes, SmallVector<unsigned> outMap,
               Shape outShape, const std::string &init, StringRef region,
               StringRef attrs = "") {
    unsigned loops = parallel + reduction;
    std::string maps, ins, types, blockArgs;
    for (auto [i, in] : llvm::enumerate(inputs)) {
      maps += affineMap(loops, in.second) + ", ";
      ins += (i ? ", " : "") + in.first;
      types += (i ? ", " : "") + inputTypes[i];
      blockArgs += llvm::formatv(
          "%{0}: {1}, ", i ? "b" : "a",
          StringRef(inputTypes[i]).contains("xi64") ? "i64" : "f32");
    }
    maps += affineMap(loops, outMap);
    std::string outType = tensorType(outShape);
    std::string result = define(std::move(outShape));
    body += llvm::formatv(
        "  {0} = linalg.generic {{indexing_maps = [{1}], iterator_types = "
        "{2}} ins({3} : {4}) outs({5} : {6}) {7}{{\n"
        "  ^bb0({8}%acc: f32):\n{9}"
        "  } -> {6}\n",
        result, maps, iterators(parallel, reduction), ins, types, init, outType,
        attrs, blockArgs, region);
  }

  void start() {
    if (choices.below(4) == 0) {
      // Token ids and an embedding lookup, as the importer writes Gather.
      Shape ids = {choices.dim(), choices.dim()};
      int64_t vocab = choices.dim() + choices.dim(), hidden = choices.dim();
      args =
          llvm::formatv("%x: {0} {{tp.input = \"x\"}", tensorType(ids, "i64"));
      std::string table = weight({vocab, hidden});
      Shape out = {ids[0], ids[1], hidden};
      std::string init = zeros(out);
      generic(
          3, 1, {{"%x", {0, 1}}, {table, {3, 2}}},
          {tensorType(ids, "i64"), tensorType({vocab, hidden})}, {0, 1, 2}, out,
          init,
          "    %i = arith.index_cast %a : i64 to index\n"
          "    %j = linalg.index 3 : index\n"
          "    %hit = arith.cmpi eq, %i, %j : index\n"
          "    %t = arith.select %hit, %b, %zero : f32\n"
          "    %s = arith.addf %acc, %t : f32\n"
          "    linalg.yield %s : f32\n",
          llvm::formatv("attrs = {{tp.embedding = {0} : i64} ", vocab).str());
      return;
    }
    Shape x;
    for (unsigned i = 0, e = 2 + choices.below(2); i < e; ++i)
      x.push_back(choices.dim());
    args = llvm::formatv("%x: {0} {{tp.input = \"x\"}", tensorType(x));
    // Value 0 is the input itself.
    values.push_back(x);
    current = 0;
    aliasInput = true;
  }

  std::string name(unsigned v) const {
    return v == 0 && aliasInput ? "%x" : "%v" + std::to_string(v);
  }

  void step() {
    switch (choices.below(10)) {
    case 0:
      return matmulWeight();
    case 1:
      return lastDimWeight(choices.below(2) ? "arith.addf" : "arith.mulf");
    case 2:
      return residual();
    case 3:
      return unary();
    case 4:
      return transpose();
    case 5:
      return expand();
    case 6:
      return collapse();
    case 7:
      return matmulActivations();
    case 8:
      return reduceLast();
    case 9:
      return normalizeLast();
    }
  }

  /// x[..., k] * w[k, n] -> [..., n], as MatMul with a weight imports.
  void matmulWeight() {
    unsigned r = rank();
    Shape out = shape();
    int64_t k = out.back(), n = choices.dim();
    out.back() = n;
    std::string w = weight({k, n});
    std::string in = name(current), inType = tensorType(shape());
    SmallVector<unsigned> lhs = iota(r - 1), res = iota(r);
    lhs.push_back(r);
    std::string init = zeros(out);
    generic(r, 1, {{in, lhs}, {w, {r, r - 1}}}, {inType, tensorType({k, n})},
            res, out, init,
            "    %m = arith.mulf %a, %b : f32\n"
            "    %s = arith.addf %acc, %m : f32\n"
            "    linalg.yield %s : f32\n");
  }

  /// x op w[last], the bias or gamma of a layer.
  void lastDimWeight(StringRef op) {
    unsigned r = rank();
    Shape s = shape();
    std::string w = weight({s.back()});
    std::string in = name(current), type = tensorType(s);
    std::string init = empty(s);
    generic(r, 0, {{in, iota(r)}, {w, {r - 1}}}, {type, tensorType({s.back()})},
            iota(r), s, init,
            llvm::formatv("    %s = {0} %a, %b : f32\n"
                          "    linalg.yield %s : f32\n",
                          op)
                .str());
  }

  /// x + an earlier value of the same shape (a residual connection).
  void residual() {
    SmallVector<unsigned> same;
    for (unsigned v = 0; v < values.size(); ++v)
      if (values[v] == shape())
        same.push_back(v);
    unsigned other = same[choices.below(same.size())];
    unsigned r = rank();
    std::string type = tensorType(shape());
    std::string a = name(current), b = name(other);
    std::string init = empty(shape());
    generic(r, 0, {{a, iota(r)}, {b, iota(r)}}, {type, type}, iota(r), shape(),
            init,
            "    %s = arith.addf %a, %b : f32\n"
            "    linalg.yield %s : f32\n");
  }

  void unary() {
    static const char *regions[] = {
        "    %s = arith.maximumf %a, %zero : f32\n",
        "    %s = math.exp %a : f32\n",
        "    %s = math.tanh %a : f32\n",
        "    %s = arith.mulf %a, %a : f32\n",
    };
    unsigned r = rank();
    std::string type = tensorType(shape());
    std::string a = name(current);
    std::string init = empty(shape());
    generic(r, 0, {{a, iota(r)}}, {type}, iota(r), shape(), init,
            std::string(regions[choices.below(std::size(regions))]) +
                "    linalg.yield %s : f32\n");
  }

  void transpose() {
    unsigned r = rank();
    SmallVector<int64_t> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    for (unsigned i = r; i > 1; --i)
      std::swap(perm[i - 1], perm[choices.below(i)]);
    Shape out;
    for (int64_t p : perm)
      out.push_back(shape()[p]);
    std::string in = name(current), inType = tensorType(shape());
    std::string init = empty(out);
    std::string permText;
    for (auto [i, p] : llvm::enumerate(perm))
      permText += (i ? ", " : "") + std::to_string(p);
    std::string outType = tensorType(out);
    std::string result = define(out);
    body += llvm::formatv("  {0} = linalg.transpose ins({1} : {2}) outs({3} "
                          ": {4}) permutation = [{5}]\n",
                          result, in, inType, init, outType, permText);
  }

  /// Splits a dim in two (Reshape to more dims), e.g. hidden into heads.
  void expand() {
    unsigned r = rank();
    if (r >= 5)
      return collapse();
    unsigned d = choices.below(r);
    int64_t size = shape()[d];
    SmallVector<int64_t> factors;
    for (int64_t f = 1; f <= size; ++f)
      if (size % f == 0)
        factors.push_back(f);
    int64_t outer = factors[choices.below(factors.size())];
    Shape out;
    std::string groups, sizes;
    for (unsigned i = 0, j = 0; i < r; ++i) {
      groups += i ? ", [" : "[";
      if (i == d) {
        out.push_back(outer);
        out.push_back(size / outer);
        groups += std::to_string(j) + ", " + std::to_string(j + 1);
        j += 2;
      } else {
        out.push_back(shape()[i]);
        groups += std::to_string(j++);
      }
      groups += "]";
    }
    for (auto [i, s] : llvm::enumerate(out))
      sizes += (i ? ", " : "") + std::to_string(s);
    std::string in = name(current), inType = tensorType(shape());
    std::string outType = tensorType(out);
    std::string result = define(out);
    body += llvm::formatv("  {0} = tensor.expand_shape {1} [{2}] output_shape "
                          "[{3}] : {4} into {5}\n",
                          result, in, groups, sizes, inType, outType);
  }

  /// Merges two neighbouring dims (Reshape to fewer dims).
  void collapse() {
    unsigned r = rank();
    if (r <= 2)
      return expand();
    unsigned d = choices.below(r - 1);
    Shape out;
    std::string groups;
    for (unsigned i = 0, j = 0; i < r; ++i, ++j) {
      groups += j ? ", [" : "[";
      if (i == d) {
        out.push_back(shape()[i] * shape()[i + 1]);
        groups += std::to_string(i) + ", " + std::to_string(i + 1);
        ++i;
      } else {
        out.push_back(shape()[i]);
        groups += std::to_string(i);
      }
      groups += "]";
    }
    std::string in = name(current), inType = tensorType(shape());
    std::string outType = tensorType(out);
    std::string result = define(out);
    body += llvm::formatv("  {0} = tensor.collapse_shape {1} [{2}] : {3} into "
                          "{4}\n",
                          result, in, groups, inType, outType);
  }

  /// a[..., m, k] x b[..., n, k] -> [..., m, n] with b an earlier value of
  /// a's shape: attention's Q K^T on activations.
  void matmulActivations() {
    unsigned r = rank();
    SmallVector<unsigned> same;
    for (unsigned v = 0; v < values.size(); ++v)
      if (values[v] == shape())
        same.push_back(v);
    unsigned other = same[choices.below(same.size())];
    Shape out = shape();
    out.back() = shape()[r - 2];
    SmallVector<unsigned> lhs = iota(r - 1), rhs = iota(r - 2);
    lhs.push_back(r);
    rhs.push_back(r - 1);
    rhs.push_back(r);
    std::string type = tensorType(shape());
    std::string a = name(current), b = name(other);
    std::string init = zeros(out);
    generic(r, 1, {{a, lhs}, {b, rhs}}, {type, type}, iota(r), out, init,
            "    %m = arith.mulf %a, %b : f32\n"
            "    %s = arith.addf %acc, %m : f32\n"
            "    linalg.yield %s : f32\n");
  }

  /// Sums the last dim away (ReduceSum with keepdims = 0).
  void reduceLast() {
    unsigned r = rank();
    if (r <= 2)
      return unary();
    Shape out(shape().begin(), shape().end() - 1);
    std::string type = tensorType(shape());
    std::string a = name(current);
    std::string init = zeros(out);
    generic(r - 1, 1, {{a, iota(r)}}, {type}, iota(r - 1), out, init,
            "    %s = arith.addf %acc, %a : f32\n"
            "    linalg.yield %s : f32\n");
  }

  /// x / sum(x, last dim), broadcast back: softmax's second half.
  void normalizeLast() {
    unsigned x = current, r = rank();
    Shape s = shape();
    Shape sums(s.begin(), s.end() - 1);
    std::string type = tensorType(s);
    std::string a = name(x);
    std::string init = zeros(sums);
    generic(r - 1, 1, {{a, iota(r)}}, {type}, iota(r - 1), sums, init,
            "    %s = arith.addf %acc, %a : f32\n"
            "    linalg.yield %s : f32\n");
    std::string sum = name(current);
    std::string out = empty(s);
    generic(r, 0, {{a, iota(r)}, {sum, iota(r - 1)}}, {type, tensorType(sums)},
            iota(r), s, out,
            "    %s = arith.divf %a, %b : f32\n"
            "    linalg.yield %s : f32\n");
  }

  Choices &choices;
  std::string args, body;
  SmallVector<Shape> values;
  unsigned current = 0, weights = 0, temps = 0;
  bool aliasInput = false;
};

/// Verifies the module after every pass that succeeded: a pass that leaves
/// invalid IR is named, instead of surfacing as some later pass's failure.
struct VerifyAfterEachPass : public PassInstrumentation {
  void runAfterPass(Pass *pass, Operation *op) override {
    if (succeeded(verify(op)))
      return;
    llvm::errs() << "finding: the IR does not verify after " << pass->getName()
                 << "\n";
    std::abort();
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const DialectRegistry *registry = [] {
    auto *registry = new DialectRegistry();
    // What the importer's output and tp-parallelize's use.
    registry->insert<tp::TPDialect, arith::ArithDialect, func::FuncDialect,
                     linalg::LinalgDialect, math::MathDialect,
                     shard::ShardDialect, tensor::TensorDialect>();
    tp::registerShardingExtensions(*registry);
    return registry;
  }();
  static const bool print = std::getenv("TP_FUZZ_PRINT") != nullptr;

  Choices choices(data, size);
  unsigned flags = choices.next();
  tp::ParallelizeOptions options;
  options.devices = flags & 1 ? 4 : 2;
  options.sequenceParallel = flags & 2;
  options.padding = !(flags & 4);
  options.stages = (flags & 24) == 24 ? 2 : 1;
  std::string text = ModuleBuilder(choices).build();
  if (print)
    llvm::errs() << "// tp-parallelize=devices=" << options.devices
                 << " sequence-parallel=" << options.sequenceParallel
                 << " padding=" << options.padding
                 << " stages=" << options.stages << "\n"
                 << text;

  MLIRContext context(*registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    diagnostics += diag.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module) {
    llvm::errs() << "fuzzer bug: the generated module does not parse:\n"
                 << diagnostics << text;
    std::abort();
  }

  PassManager pm(&context, ModuleOp::getOperationName());
  tp::buildParallelizePipeline(pm, options);
  pm.enableVerifier(false);
  pm.addInstrumentation(std::make_unique<VerifyAfterEachPass>());
  if (succeeded(pm.run(*module)) && failed(verify(*module))) {
    llvm::errs() << "finding: tp-parallelize gave a module that does not "
                    "verify\n";
    std::abort();
  }
  return 0;
}
