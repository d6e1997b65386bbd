//===- EmitScalar.cpp - arith and math ops as C++ expressions -------------===//
//
// Each scalar op becomes `const T vN = <expression>;`. Integers are signless
// in arith, so signed and unsigned ops cast their operands explicitly.
//
//===----------------------------------------------------------------------===//

#include "CppEmitter.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tp::emit;

/// "std::uint32_t" for an integer type of that width (index: 64 bits).
static std::string unsignedType(Type type) {
  unsigned width = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  if (width == 1)
    return "bool";
  return "std::uint" + std::to_string(width) + "_t";
}

static std::string signedType(Type type) {
  unsigned width = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  if (width == 1)
    return "bool";
  return "std::int" + std::to_string(width) + "_t";
}

/// A C++ literal for a floating-point value of type `type`.
static std::string floatLiteral(const APFloat &value, Type type) {
  // f16/bf16 literals are written as float and converted on assignment.
  std::string cType = type.isF64() ? "double" : "float";
  if (value.isNaN())
    return "std::numeric_limits<" + cType + ">::quiet_NaN()";
  if (value.isInfinity())
    return std::string(value.isNegative() ? "-" : "") + "std::numeric_limits<" +
           cType + ">::infinity()";
  double number = value.convertToDouble();
  if (!type.isF64()) {
    bool lost;
    APFloat copy = value;
    copy.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
    number = copy.convertToDouble();
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%a", number);
  return type.isF64() ? std::string(text)
                      : "static_cast<float>(" + std::string(text) + ")";
}

static std::string intLiteral(const APInt &value, Type type) {
  if (type.isInteger(1))
    return value.isZero() ? "false" : "true";
  unsigned width = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  if (width == 64 && value.isMinSignedValue())
    return "std::numeric_limits<std::int64_t>::min()";
  return "static_cast<" + signedType(type) + ">(" +
         std::to_string(value.getSExtValue()) + "LL)";
}

std::string mlir::tp::emit::combineExpr(Operation *combiner, StringRef a,
                                        StringRef b) {
  std::string pair = "(" + a.str() + ", " + b.str() + ")";
  return llvm::TypeSwitch<Operation *, std::string>(combiner)
      .Case([&](arith::AddFOp) { return a.str() + " + " + b.str(); })
      .Case([&](arith::MulFOp) { return a.str() + " * " + b.str(); })
      .Case([&](arith::MaximumFOp) { return "maximumF" + pair; })
      .Case([&](arith::MinimumFOp) { return "minimumF" + pair; })
      .Case([&](arith::MaxNumFOp) { return "std::fmax" + pair; })
      .Case([&](arith::MinNumFOp) { return "std::fmin" + pair; })
      .Default([](Operation *) { return std::string(); });
}

std::string mlir::tp::emit::identityExpr(Operation *combiner, StringRef type) {
  std::string infinity = "std::numeric_limits<" + type.str() + ">::infinity()";
  return llvm::TypeSwitch<Operation *, std::string>(combiner)
      .Case([&](arith::AddFOp) { return type.str() + "(0)"; })
      .Case([&](arith::MulFOp) { return type.str() + "(1)"; })
      .Case<arith::MaximumFOp, arith::MaxNumFOp>(
          [&](Operation *) { return "-" + infinity; })
      .Default([&](Operation *) { return infinity; });
}

std::string mlir::tp::emit::scalarLiteral(Attribute attr) {
  if (auto floatAttr = dyn_cast<FloatAttr>(attr))
    return floatLiteral(floatAttr.getValue(), floatAttr.getType());
  if (auto intAttr = dyn_cast<IntegerAttr>(attr))
    return intLiteral(intAttr.getValue(), intAttr.getType());
  return "";
}

static std::string cmpfExpr(arith::CmpFPredicate predicate, StringRef a,
                            StringRef b) {
  std::string x = a.str(), y = b.str();
  std::string unordered = "(" + x + " != " + x + " || " + y + " != " + y + ")";
  std::string ordered = "!" + unordered;
  using P = arith::CmpFPredicate;
  switch (predicate) {
  case P::AlwaysFalse:
    return "false";
  case P::AlwaysTrue:
    return "true";
  case P::OEQ:
    return x + " == " + y;
  case P::OGT:
    return x + " > " + y;
  case P::OGE:
    return x + " >= " + y;
  case P::OLT:
    return x + " < " + y;
  case P::OLE:
    return x + " <= " + y;
  case P::ONE:
    return "(" + ordered + " && " + x + " != " + y + ")";
  case P::ORD:
    return ordered;
  case P::UEQ:
    return "(" + unordered + " || " + x + " == " + y + ")";
  case P::UGT:
    return "!(" + x + " <= " + y + ")";
  case P::UGE:
    return "!(" + x + " < " + y + ")";
  case P::ULT:
    return "!(" + x + " >= " + y + ")";
  case P::ULE:
    return "!(" + x + " > " + y + ")";
  case P::UNE:
    return x + " != " + y;
  case P::UNO:
    return unordered;
  }
  return "false";
}

static std::string cmpiExpr(arith::CmpIPredicate predicate, Type type,
                            StringRef a, StringRef b) {
  using P = arith::CmpIPredicate;
  bool isUnsigned = predicate == P::ult || predicate == P::ule ||
                    predicate == P::ugt || predicate == P::uge;
  std::string cast = isUnsigned ? unsignedType(type) : signedType(type);
  std::string x = "static_cast<" + cast + ">(" + a.str() + ")";
  std::string y = "static_cast<" + cast + ">(" + b.str() + ")";
  switch (predicate) {
  case P::eq:
    return x + " == " + y;
  case P::ne:
    return x + " != " + y;
  case P::slt:
  case P::ult:
    return x + " < " + y;
  case P::sle:
  case P::ule:
    return x + " <= " + y;
  case P::sgt:
  case P::ugt:
    return x + " > " + y;
  case P::sge:
  case P::uge:
    return x + " >= " + y;
  }
  return "false";
}

std::string CppEmitter::scalarCall(Operation *op, StringRef fn) {
  // <cmath> has no f16/bf16 overloads: those compute in float.
  std::string text = fn.str() + "(";
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    Value operand = op->getOperand(i);
    bool narrow = operand.getType().isF16() || operand.getType().isBF16();
    text +=
        (i ? ", " : "") +
        (narrow ? "static_cast<float>(" + name(operand) + ")" : name(operand));
  }
  return text + ")";
}

std::string CppEmitter::mathExpr(Operation *op, StringRef cType) {
  Type type = op->getResult(0).getType();
  auto arg = [&](unsigned i) { return name(op->getOperand(i)); };
  auto call = [&](StringRef fn) { return scalarCall(op, fn); };
  auto castTo = [&](StringRef to, StringRef inner) {
    return "static_cast<" + to.str() + ">(" + inner.str() + ")";
  };
  std::string cTypeText = cType.str();
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case(
          [&](math::ExpOp) { return call(type.isF32() ? "expF" : "std::exp"); })
      .Case([&](math::Exp2Op) { return call("std::exp2"); })
      .Case([&](math::LogOp) { return call("std::log"); })
      .Case([&](math::Log1pOp) { return call("std::log1p"); })
      .Case([&](math::Log2Op) { return call("std::log2"); })
      .Case([&](math::TanhOp) {
        return call(type.isF32() ? "tanhF" : "std::tanh");
      })
      .Case(
          [&](math::ErfOp) { return call(type.isF32() ? "erfF" : "std::erf"); })
      .Case([&](math::SqrtOp) { return call("std::sqrt"); })
      .Case([&](math::RsqrtOp) {
        return castTo(cTypeText, "1") + " / std::sqrt(" + arg(0) + ")";
      })
      .Case([&](math::PowFOp pow) {
        // Small integral exponents (GELU's x^3, variance's x^2) are
        // products, as onnxruntime computes them.
        APFloat exponent(0.0);
        if (matchPattern(pow.getRhs(), m_ConstantFloat(&exponent))) {
          std::string x = arg(0);
          if (exponent.isExactlyValue(2.0))
            return x + " * " + x;
          if (exponent.isExactlyValue(3.0))
            return x + " * " + x + " * " + x;
          if (exponent.isExactlyValue(1.0))
            return x;
        }
        return call("std::pow");
      })
      .Case([&](math::IPowIOp) { return call("integerPow"); })
      .Case([&](math::SinOp) { return call("std::sin"); })
      .Case([&](math::CosOp) { return call("std::cos"); })
      .Case([&](math::TanOp) { return call("std::tan"); })
      .Case([&](math::AtanOp) { return call("std::atan"); })
      .Case([&](math::FloorOp) { return call("std::floor"); })
      .Case([&](math::CeilOp) { return call("std::ceil"); })
      .Case([&](math::RoundEvenOp) { return call("std::nearbyint"); })
      .Case([&](math::RoundOp) { return call("std::round"); })
      .Case([&](math::TruncOp) { return call("std::trunc"); })
      .Case([&](math::AbsFOp) { return call("std::fabs"); })
      .Case([&](math::AbsIOp) {
        return castTo(cTypeText, arg(0) + " < 0 ? -" + arg(0) + " : " + arg(0));
      })
      .Case([&](math::CopySignOp) { return call("std::copysign"); })
      .Case([&](tensor::ExtractOp extract) {
        auto shape = extract.getTensor().getType().getShape();
        SmallVector<int64_t> strides = stridesOf(shape);
        std::string offset;
        for (auto [i, index] : llvm::enumerate(extract.getIndices()))
          offset += (i ? " + " : "") + name(index) + " * " +
                    std::to_string(strides[i]) + "LL";
        if (offset.empty())
          offset = "0";
        return name(extract.getTensor()) + "[" + offset + "]";
      })
      .Case([&](affine::AffineApplyOp apply) {
        // Linalg's elementwise fusion composes index maps into these.
        AffineMap map = apply.getAffineMap();
        SmallVector<std::string> dims, symbols;
        for (auto [i, operand] : llvm::enumerate(apply.getOperands()))
          (i < map.getNumDims() ? dims : symbols).push_back(name(operand));
        return affineExprToCpp(map.getResult(0), dims, symbols);
      })
      .Default([](Operation *) { return std::string(); });
}

LogicalResult CppEmitter::emitScalarOp(Operation *op) {
  if (op->getNumResults() != 1)
    return op->emitError("code generation does not support ") << op->getName();
  Value result = op->getResult(0);
  Type type = result.getType();
  FailureOr<std::string> cType = scalarTypeFor(type, op);
  if (failed(cType))
    return failure();
  auto arg = [&](unsigned i) { return name(op->getOperand(i)); };
  auto binary = [&](StringRef symbol) {
    return arg(0) + " " + symbol.str() + " " + arg(1);
  };
  auto call = [&](StringRef fn) { return scalarCall(op, fn); };
  auto unsignedBinary = [&](StringRef symbol) {
    std::string u = unsignedType(type);
    return "static_cast<" + u + ">(" + arg(0) + ") " + symbol.str() +
           " static_cast<" + u + ">(" + arg(1) + ")";
  };
  // Wrapping integer arithmetic: computed on unsigned values.
  auto wrapping = [&](StringRef symbol) {
    if (type.isInteger(1))
      return "static_cast<bool>(" + arg(0) + " " + symbol.str() + " " + arg(1) +
             ")";
    return "static_cast<" + *cType + ">(" + unsignedBinary(symbol) + ")";
  };
  auto castTo = [&](StringRef to, StringRef inner) {
    return "static_cast<" + to.str() + ">(" + inner.str() + ")";
  };
  Type inType = op->getNumOperands() ? op->getOperand(0).getType() : type;

  std::string expr =
      llvm::TypeSwitch<Operation *, std::string>(op)
          .Case(
              [&](arith::ConstantOp c) { return scalarLiteral(c.getValue()); })
          .Case([&](arith::AddFOp) { return binary("+"); })
          .Case([&](arith::SubFOp) { return binary("-"); })
          .Case([&](arith::MulFOp) { return binary("*"); })
          .Case([&](arith::DivFOp) { return binary("/"); })
          .Case([&](arith::RemFOp) { return call("std::fmod"); })
          .Case([&](arith::NegFOp) { return "-" + arg(0); })
          .Case([&](arith::MaximumFOp) { return call("maximumF"); })
          .Case([&](arith::MinimumFOp) { return call("minimumF"); })
          .Case([&](arith::MaxNumFOp) { return call("std::fmax"); })
          .Case([&](arith::MinNumFOp) { return call("std::fmin"); })
          .Case([&](arith::AddIOp) { return wrapping("+"); })
          .Case([&](arith::SubIOp) { return wrapping("-"); })
          .Case([&](arith::MulIOp) { return wrapping("*"); })
          .Case([&](arith::AndIOp) { return castTo(*cType, binary("&")); })
          .Case([&](arith::OrIOp) { return castTo(*cType, binary("|")); })
          .Case([&](arith::XOrIOp) { return castTo(*cType, binary("^")); })
          .Case([&](arith::DivSIOp) { return binary("/"); })
          .Case([&](arith::RemSIOp) { return binary("%"); })
          .Case([&](arith::FloorDivSIOp) { return call("floorDiv"); })
          .Case([&](arith::DivUIOp) {
            return castTo(*cType, unsignedBinary("/"));
          })
          .Case([&](arith::RemUIOp) {
            return castTo(*cType, unsignedBinary("%"));
          })
          .Case([&](arith::ShLIOp) { return wrapping("<<"); })
          .Case([&](arith::ShRUIOp) {
            return castTo(*cType, unsignedBinary(">>"));
          })
          .Case([&](arith::ShRSIOp) { return binary(">>"); })
          .Case([&](arith::MaxSIOp) { return call("std::max"); })
          .Case([&](arith::MinSIOp) { return call("std::min"); })
          .Case([&](arith::MaxUIOp) {
            return castTo(*cType,
                          "std::max(" + castTo(unsignedType(type), arg(0)) +
                              ", " + castTo(unsignedType(type), arg(1)) + ")");
          })
          .Case([&](arith::MinUIOp) {
            return castTo(*cType,
                          "std::min(" + castTo(unsignedType(type), arg(0)) +
                              ", " + castTo(unsignedType(type), arg(1)) + ")");
          })
          .Case([&](arith::CmpFOp c) {
            return cmpfExpr(c.getPredicate(), arg(0), arg(1));
          })
          .Case([&](arith::CmpIOp c) {
            return cmpiExpr(c.getPredicate(), inType, arg(0), arg(1));
          })
          .Case([&](arith::SelectOp) {
            return arg(0) + " ? " + arg(1) + " : " + arg(2);
          })
          .Case<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp,
                arith::IndexCastOp, arith::ExtSIOp, arith::TruncIOp>(
              [&](Operation *) { return castTo(*cType, arg(0)); })
          .Case<arith::UIToFPOp, arith::ExtUIOp, arith::IndexCastUIOp>(
              [&](Operation *) {
                return castTo(*cType, castTo(unsignedType(inType), arg(0)));
              })
          .Case([&](arith::FPToSIOp) {
            return "fpToInt<" + *cType + ">(" + arg(0) + ")";
          })
          .Case([&](arith::FPToUIOp) {
            return "fpToInt<" + unsignedType(type) + ">(" + arg(0) + ")";
          })
          .Default([&](Operation *) { return mathExpr(op, *cType); });
  if (expr.empty())
    return op->emitError("code generation does not support ") << op->getName();
  os << "const " << *cType << " " << bind(result) << " = " << expr << ";\n";
  return success();
}
