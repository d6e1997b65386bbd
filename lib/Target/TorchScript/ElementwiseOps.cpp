//===- ElementwiseOps.cpp - aten arithmetic, comparisons, activations -----===//
//
// Operands are cast to the op's result type as torch promotes them; a
// Python number (or a 0-dim tensor a trace wrapped it in) becomes a 0-dim
// constant of that type.
//
//===----------------------------------------------------------------------===//

#include "Translator.h"

using namespace tp::torchscript;

namespace {

/// self op other, computed in the result's type, other scaled by `alpha`
/// (input `alphaIndex`) where the op has one.
void binary(Translator &t, const char *op, bool reversed = false,
            size_t alphaIndex = 0) {
  int32_t type = t.typeOf(t.out());
  std::string self = t.operand(0, type), other = t.operand(1, type);
  if (alphaIndex && !t.isNone(alphaIndex) && t.doubleArg(alphaIndex) != 1.0)
    (reversed ? self : other) =
        t.emit("Mul", {reversed ? self : other,
                       t.constScalar(t.doubleArg(alphaIndex), type)});
  t.define(reversed ? t.emit(op, {other, self}) : t.emit(op, {self, other}));
}

/// The type both operands of a comparison are compared in: torch's
/// promotion of the tensor operands (a wrapped number does not promote).
int32_t comparisonType(Translator &t) {
  c10::optional<c10::ScalarType> common;
  for (size_t i = 0; i < 2; ++i) {
    if (t.isScalar(i))
      continue;
    auto type = t.in(i)->type()->cast<c10::TensorType>();
    c10::ScalarType scalar = *type->scalarType();
    common = common ? c10::promoteTypes(*common, scalar) : scalar;
  }
  if (!common)
    t.fail("compares two numbers; expected a tensor operand");
  return onnxElementType(*common, "a comparison");
}

void compare(Translator &t, const char *op, bool negate = false) {
  int32_t type = comparisonType(t);
  std::string result = t.emit(op, {t.operand(0, type), t.operand(1, type)});
  t.define(negate ? t.emit("Not", {result}) : result);
}

void unary(Translator &t, const char *op) {
  t.define(t.emit(op, {t.operand(0, t.typeOf(t.out()))}));
}

void castToResult(Translator &t) {
  t.define(t.cast(t.operand(0), t.typeOf(t.in(0)), t.typeOf(t.out())));
}

} // namespace

void tp::torchscript::populateElementwiseConverters(ConverterMap &m) {
  m["aten::add"] = [](Translator &t) { binary(t, "Add", false, 2); };
  m["aten::sub"] = [](Translator &t) { binary(t, "Sub", false, 2); };
  m["aten::rsub"] = [](Translator &t) { binary(t, "Sub", true, 2); };
  m["aten::mul"] = [](Translator &t) { binary(t, "Mul"); };
  m["aten::div"] = [](Translator &t) {
    if (t.numInputs() > 2 && !t.isNone(2))
      t.fail("division with a rounding mode is not supported");
    binary(t, "Div");
  };
  m["aten::true_divide"] = [](Translator &t) { binary(t, "Div"); };
  m["aten::pow"] = [](Translator &t) { binary(t, "Pow"); };
  m["aten::maximum"] = [](Translator &t) { binary(t, "Max"); };
  m["aten::minimum"] = [](Translator &t) { binary(t, "Min"); };
  // torch.max(a, b) is elementwise; max(x) reduces everything, and
  // max(x, dim, keepdim) one dim, with the indices of the extremes as a
  // second result, which is converted only where nothing uses it.
  auto extremum = [](const char *elementwise, const char *reduction) {
    return [=](Translator &t) {
      const c10::FunctionSchema *schema = t.node->maybeSchema();
      std::string overload = schema ? schema->overload_name() : "";
      if (overload == "other") {
        binary(t, elementwise);
        return;
      }
      int64_t rank = t.rankOf(t.in(0));
      std::vector<int64_t> axes;
      int64_t keep = 0;
      if (overload == "dim") {
        if (t.node->outputs().size() > 1 && t.out(1)->hasUses())
          t.fail("the indices that max/min(x, dim) returns are not "
                 "converted; use the values only (torch.amax/amin)");
        axes.push_back(t.dim(t.intArg(1), rank));
        keep = t.numInputs() > 2 && t.boolArg(2) ? 1 : 0;
      } else if (t.numInputs() == 1) {
        for (int64_t d = 0; d < rank; ++d)
          axes.push_back(d);
      } else {
        t.fail("the '" + overload + "' form of max/min is not converted");
      }
      t.define(t.emit(reduction, {t.operand(0, t.typeOf(t.out()))},
                      {{"axes", axes}, {"keepdims", keep}}));
    };
  };
  m["aten::max"] = extremum("Max", "ReduceMax");
  m["aten::min"] = extremum("Min", "ReduceMin");

  m["aten::eq"] = [](Translator &t) { compare(t, "Equal"); };
  m["aten::ne"] = [](Translator &t) { compare(t, "Equal", true); };
  m["aten::lt"] = [](Translator &t) { compare(t, "Less"); };
  m["aten::le"] = [](Translator &t) { compare(t, "LessOrEqual"); };
  m["aten::gt"] = [](Translator &t) { compare(t, "Greater"); };
  m["aten::ge"] = [](Translator &t) { compare(t, "GreaterOrEqual"); };
  auto logical = [](const char *op) {
    return [op](Translator &t) {
      int32_t b = onnx::TensorProto::BOOL;
      t.define(t.cast(t.emit(op, {t.operand(0, b), t.operand(1, b)}), b,
                      t.typeOf(t.out())));
    };
  };
  m["aten::logical_and"] = logical("And");
  m["aten::__and__"] = logical("And");
  m["aten::bitwise_and"] = logical("And");
  m["aten::logical_or"] = logical("Or");
  m["aten::__or__"] = logical("Or");
  m["aten::bitwise_or"] = logical("Or");
  auto negation = [](Translator &t) {
    if (t.typeOf(t.in(0)) != onnx::TensorProto::BOOL &&
        t.node->kind().toQualString() == std::string("aten::bitwise_not"))
      t.fail("bitwise not of a non-bool tensor is not supported");
    t.define(t.emit("Not", {t.operand(0, onnx::TensorProto::BOOL)}));
  };
  m["aten::logical_not"] = negation;
  m["aten::bitwise_not"] = negation;

  m["aten::where"] = [](Translator &t) {
    if (t.numInputs() != 3)
      t.fail("where(condition) with one operand is not supported");
    int32_t type = t.typeOf(t.out());
    t.define(t.emit("Where", {t.operand(0, onnx::TensorProto::BOOL),
                              t.operand(1, type), t.operand(2, type)}));
  };
  m["aten::masked_fill"] = [](Translator &t) {
    int32_t type = t.typeOf(t.out());
    t.define(t.emit("Where", {t.operand(1, onnx::TensorProto::BOOL),
                              t.operand(2, type), t.operand(0, type)}));
  };

  for (auto [aten, op] :
       {std::pair("aten::tanh", "Tanh"), std::pair("aten::sigmoid", "Sigmoid"),
        std::pair("aten::relu", "Relu"), std::pair("aten::exp", "Exp"),
        std::pair("aten::log", "Log"), std::pair("aten::sqrt", "Sqrt"),
        std::pair("aten::neg", "Neg"), std::pair("aten::abs", "Abs"),
        std::pair("aten::cos", "Cos"), std::pair("aten::sin", "Sin"),
        std::pair("aten::erf", "Erf"), std::pair("aten::floor", "Floor"),
        std::pair("aten::ceil", "Ceil"),
        std::pair("aten::reciprocal", "Reciprocal"),
        std::pair("aten::softplus", "Softplus")})
    m[aten] = [op = op](Translator &t) { unary(t, op); };
  m["aten::rsqrt"] = [](Translator &t) {
    t.define(t.emit("Reciprocal",
                    {t.emit("Sqrt", {t.operand(0, t.typeOf(t.out()))})}));
  };
  m["aten::square"] = [](Translator &t) {
    std::string x = t.operand(0, t.typeOf(t.out()));
    t.define(t.emit("Mul", {x, x}));
  };
  m["aten::silu"] = [](Translator &t) {
    std::string x = t.operand(0, t.typeOf(t.out()));
    t.define(t.emit("Mul", {x, t.emit("Sigmoid", {x})}));
  };
  m["aten::gelu"] = [](Translator &t) {
    std::string approximate =
        t.numInputs() > 1 ? t.constant(1).toStringRef() : "none";
    t.define(
        t.emit("Gelu", {t.operand(0)}, {{"approximate", approximate.c_str()}}));
  };
  m["aten::leaky_relu"] = [](Translator &t) {
    float slope = t.numInputs() > 1 ? float(t.doubleArg(1)) : 0.01f;
    t.define(t.emit("LeakyRelu", {t.operand(0)}, {{"alpha", slope}}));
  };
  auto clip = [](Translator &t, size_t low, size_t high) {
    int32_t type = t.typeOf(t.out());
    std::vector<std::string> inputs = {t.operand(0, type)};
    inputs.push_back(t.isNone(low) ? "" : t.operand(low, type));
    inputs.push_back(t.isNone(high) ? "" : t.operand(high, type));
    t.define(t.emit("Clip", inputs));
  };
  m["aten::clamp"] = [clip](Translator &t) { clip(t, 1, 2); };
  m["aten::clip"] = [clip](Translator &t) { clip(t, 1, 2); };
  m["aten::hardtanh"] = [clip](Translator &t) { clip(t, 1, 2); };
  m["aten::relu6"] = [](Translator &t) {
    int32_t type = t.typeOf(t.out());
    t.define(t.emit("Clip", {t.operand(0, type), t.constScalar(0, type),
                             t.constScalar(6, type)}));
  };

  for (const char *name : {"aten::to", "aten::type_as", "aten::float",
                           "aten::double", "aten::long", "aten::int",
                           "aten::bool", "aten::half", "aten::bfloat16"})
    m[name] = castToResult;
}
