//===- ElementwiseOps.cpp - ONNX elementwise ops to linalg.generic --------===//
//
// Arithmetic, math functions, comparisons, logic, Where, Clip and Cast:
// each becomes one broadcasting `linalg.generic`, or folds when all of its
// inputs are known at import (shape arithmetic).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tp::onnx_import;
using onnx::TensorProto;

namespace {

/// Computes one scalar of the op from its (already common-typed) inputs.
using BuildFn =
    std::function<Value(OpBuilder &, Location, ValueRange, NodeContext &)>;
/// Folds one scalar; inputs and result as doubles.
using FoldFn = double (*)(ArrayRef<double>);

enum class ResultType { SameAsInput, Bool, FromCastAttr, SameAsSecond };

struct ElementwiseSpec {
  ResultType result = ResultType::SameAsInput;
  BuildFn build;
  FoldFn fold = nullptr;
};

bool isFloat(Value v) { return isa<FloatType>(v.getType()); }

Value cst(OpBuilder &b, Location loc, Value like, double v) {
  return createScalar(b, loc, like.getType(), v);
}

/// The single element of `c` as an arith.constant scalar, exact for int64.
Value createConstScalar(OpBuilder &b, Location loc, MLIRContext *ctx,
                        const ConstTensor &c) {
  Type type = getElementType(ctx, c.dtype);
  if (c.isFloat())
    return createScalar(b, loc, type, c.floats[0]);
  auto intType = cast<IntegerType>(type);
  return arith::ConstantOp::create(
      b, loc, intType,
      b.getIntegerAttr(intType, APInt(intType.getWidth(),
                                      static_cast<uint64_t>(c.ints[0]),
                                      /*isSigned=*/true,
                                      /*implicitTrunc=*/true)));
}

/// Folds the node when every input is a small constant.
LogicalResult foldElementwise(NodeContext &ctx, const ElementwiseSpec &spec,
                              ArrayRef<int64_t> shape, DType resultDType) {
  SmallVector<const ConstTensor *> inputs;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i)
    if (ctx.hasInput(i))
      inputs.push_back(ctx.constInput(i));
  ConstTensor r;
  r.dtype =
      isFloatDType(resultDType) ? TensorProto::DOUBLE : TensorProto::INT64;
  r.shape.assign(shape.begin(), shape.end());
  r.allocate();
  SmallVector<int64_t> strides = getStrides(shape);
  SmallVector<double> args(inputs.size());
  for (int64_t flat = 0, e = r.numel(); flat < e; ++flat) {
    for (auto [k, in] : llvm::enumerate(inputs)) {
      // Broadcast: align right, dims of size 1 read index 0.
      int64_t offset = shape.size() - in->shape.size(), index = 0, stride = 1;
      for (int64_t d = in->shape.size() - 1; d >= 0; --d) {
        int64_t pos = (flat / strides[offset + d]) % shape[offset + d];
        index += (in->shape[d] == 1 ? 0 : pos) * stride;
        stride *= in->shape[d];
      }
      args[k] = in->getAsDouble(index);
    }
    double v = spec.fold(args);
    if (r.isFloat())
      r.floats[flat] = v;
    else
      r.ints[flat] = truncToInt64(v);
  }
  ctx.setConstResult(0, r.castTo(resultDType));
  return success();
}

/// Integers beyond 2^53 do not survive folding through doubles.
bool foldsExactly(const ConstTensor &c) {
  if (c.isFloat())
    return true;
  return llvm::all_of(c.ints, [](int64_t v) {
    return v > -(int64_t(1) << 53) && v < (int64_t(1) << 53);
  });
}

LogicalResult convertElementwise(NodeContext &ctx,
                                 const ElementwiseSpec &spec) {
  SmallVector<SmallVector<int64_t>> shapes;
  SmallVector<unsigned> present;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
    if (!ctx.hasInput(i))
      continue;
    present.push_back(i);
    shapes.push_back(ctx.input(i).shape);
  }
  if (present.empty())
    return ctx.emitError() << "expects at least one input";
  std::optional<SmallVector<int64_t>> shape = broadcastShapes(shapes);
  if (!shape) {
    InFlightDiagnostic diag = ctx.emitError() << "input shapes ";
    llvm::interleaveComma(shapes, diag, [&](const SmallVector<int64_t> &s) {
      diag << formatShape(s);
    });
    return diag << " do not broadcast";
  }
  DType inputDType = ctx.input(present.front()).dtype;
  DType resultDType = inputDType;
  switch (spec.result) {
  case ResultType::Bool:
    resultDType = TensorProto::BOOL;
    break;
  case ResultType::FromCastAttr:
    resultDType = ctx.attrInt("to", 0);
    break;
  case ResultType::SameAsSecond:
    resultDType = ctx.input(present[1]).dtype;
    break;
  case ResultType::SameAsInput:
    break;
  }
  Type resultElementType = getElementType(ctx.b.getContext(), resultDType);
  if (!resultElementType)
    return ctx.emitError() << "unsupported result element type "
                           << dtypeName(resultDType);

  if (ctx.allInputsConstant()) {
    bool exact = llvm::all_of(
        present, [&](unsigned i) { return foldsExactly(*ctx.constInput(i)); });
    if (spec.result == ResultType::FromCastAttr) {
      ctx.setConstResult(0, ctx.constInput(0)->castTo(resultDType));
      return success();
    }
    if (spec.fold && exact)
      return foldElementwise(ctx, spec, *shape, resultDType);
  }

  // Known single-element inputs (epsilons, exponents, mask fill values)
  // become scalar constants in the body rather than 0-d tensor operands.
  SmallVector<Value> operands;
  SmallVector<const ConstTensor *> scalarConsts;
  for (unsigned i : present) {
    const ConstTensor *c = ctx.constInput(i);
    if (c && c->numel() == 1) {
      scalarConsts.push_back(c);
      continue;
    }
    scalarConsts.push_back(nullptr);
    operands.push_back(ctx.operand(i));
  }
  bool srcUnsigned = isUnsignedDType(inputDType);
  MLIRContext *mctx = ctx.b.getContext();
  Value result = buildElementwise(
      ctx.b, ctx.loc, operands, *shape, resultElementType,
      [&](OpBuilder &b, Location loc, ValueRange tensorScalars) {
        SmallVector<Value> scalars;
        unsigned next = 0;
        for (const ConstTensor *c : scalarConsts) {
          if (!c) {
            scalars.push_back(tensorScalars[next++]);
            continue;
          }
          scalars.push_back(createConstScalar(b, loc, mctx, *c));
        }
        if (spec.result == ResultType::FromCastAttr)
          return castScalar(b, loc, scalars[0], resultElementType, srcUnsigned,
                            isUnsignedDType(resultDType));
        return spec.build(b, loc, scalars, ctx);
      });
  ctx.setResult(0, result, resultDType);
  return success();
}

//===--- scalar bodies ---===//

Value buildDiv(OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
  if (isFloat(s[0]))
    return arith::DivFOp::create(b, loc, s[0], s[1]);
  if (isUnsignedDType(ctx.input(0).dtype))
    return arith::DivUIOp::create(b, loc, s[0], s[1]);
  return arith::DivSIOp::create(b, loc, s[0], s[1]);
}

Value buildPow(OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
  Value base = s[0], exponent = s[1];
  if (isFloat(base)) {
    if (!isFloat(exponent))
      exponent = arith::SIToFPOp::create(b, loc, base.getType(), exponent);
    else if (exponent.getType() != base.getType())
      exponent = castScalar(b, loc, exponent, base.getType(), false);
    return math::PowFOp::create(b, loc, base, exponent);
  }
  if (isFloat(exponent))
    exponent = arith::FPToSIOp::create(b, loc, base.getType(), exponent);
  else if (exponent.getType() != base.getType())
    exponent = castScalar(b, loc, exponent, base.getType(), false);
  return math::IPowIOp::create(b, loc, base, exponent);
}

Value buildMinMax(OpBuilder &b, Location loc, ValueRange s, bool isMax,
                  bool isUnsigned) {
  Value acc = s[0];
  for (Value v : s.drop_front()) {
    if (isFloat(acc))
      acc = isMax ? Value(arith::MaximumFOp::create(b, loc, acc, v))
                  : Value(arith::MinimumFOp::create(b, loc, acc, v));
    else if (isUnsigned)
      acc = isMax ? Value(arith::MaxUIOp::create(b, loc, acc, v))
                  : Value(arith::MinUIOp::create(b, loc, acc, v));
    else
      acc = isMax ? Value(arith::MaxSIOp::create(b, loc, acc, v))
                  : Value(arith::MinSIOp::create(b, loc, acc, v));
  }
  return acc;
}

Value buildCompare(OpBuilder &b, Location loc, ValueRange s,
                   arith::CmpFPredicate fpred, arith::CmpIPredicate ipred,
                   arith::CmpIPredicate upred, bool isUnsigned) {
  if (isFloat(s[0]))
    return arith::CmpFOp::create(b, loc, fpred, s[0], s[1]);
  return arith::CmpIOp::create(b, loc, isUnsigned ? upred : ipred, s[0], s[1]);
}

Value buildSigmoid(OpBuilder &b, Location loc, Value x) {
  Value one = cst(b, loc, x, 1.0);
  Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x));
  return arith::DivFOp::create(b, loc, one,
                               arith::AddFOp::create(b, loc, one, e));
}

/// GELU, exact (erf) or tanh approximation.
Value buildGelu(OpBuilder &b, Location loc, Value x, bool tanhApprox) {
  Value half = cst(b, loc, x, 0.5), one = cst(b, loc, x, 1.0);
  Value inner;
  if (tanhApprox) {
    Value x3 =
        arith::MulFOp::create(b, loc, x, arith::MulFOp::create(b, loc, x, x));
    Value poly = arith::AddFOp::create(
        b, loc, x, arith::MulFOp::create(b, loc, cst(b, loc, x, 0.044715), x3));
    inner = math::TanhOp::create(
        b, loc,
        arith::MulFOp::create(b, loc, cst(b, loc, x, std::sqrt(2.0 / M_PI)),
                              poly));
  } else {
    inner = math::ErfOp::create(
        b, loc, arith::MulFOp::create(b, loc, x, cst(b, loc, x, M_SQRT1_2)));
  }
  return arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, half, x),
                               arith::AddFOp::create(b, loc, one, inner));
}

/// -1, 0 or 1; a float NaN (or -0) is returned as it is.
Value buildSign(OpBuilder &b, Location loc, Value x, bool isUnsigned) {
  Value zero = cst(b, loc, x, 0), one = cst(b, loc, x, 1);
  if (isUnsigned) {
    Value nonZero =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, x, zero);
    return arith::SelectOp::create(b, loc, nonZero, one, zero);
  }
  Value minusOne = cst(b, loc, x, -1);
  Value positive, negative, otherwise = zero;
  if (isFloat(x)) {
    positive =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x, zero);
    negative =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, zero);
    otherwise = x;
  } else {
    positive =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, x, zero);
    negative =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, zero);
  }
  Value sign = arith::SelectOp::create(b, loc, negative, minusOne, otherwise);
  return arith::SelectOp::create(b, loc, positive, one, sign);
}

/// Mod: with fmod = 1 the C remainder (sign of the dividend), else the
/// Python one (sign of the divisor), which only integers may ask for.
Value buildMod(OpBuilder &b, Location loc, Value x, Value y, bool fmod,
               bool isUnsigned) {
  if (isFloat(x))
    return arith::RemFOp::create(b, loc, x, y);
  if (isUnsigned)
    return arith::RemUIOp::create(b, loc, x, y);
  Value r = arith::RemSIOp::create(b, loc, x, y);
  if (fmod)
    return r;
  // A non-zero remainder whose sign differs from the divisor's moves by
  // one divisor: -7 mod 3 = -1 + 3 = 2.
  Value zero = cst(b, loc, x, 0);
  Value nonZero =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, r, zero);
  Value signsDiffer =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                            arith::XOrIOp::create(b, loc, r, y), zero);
  Value adjust = arith::AndIOp::create(b, loc, nonZero, signsDiffer);
  return arith::SelectOp::create(b, loc, adjust,
                                 arith::AddIOp::create(b, loc, r, y), r);
}

double foldFMod(ArrayRef<double> a) { return std::fmod(a[0], a[1]); }

double foldIntegerMod(ArrayRef<double> a) {
  double r = std::fmod(a[0], a[1]);
  return r != 0 && (r < 0) != (a[1] < 0) ? r + a[1] : r;
}

template <typename OpTy> ElementwiseSpec unaryMath(FoldFn fold = nullptr) {
  return {ResultType::SameAsInput,
          [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
            return Value(OpTy::create(b, loc, s[0]));
          },
          fold};
}

ElementwiseSpec binary(Value (*build)(OpBuilder &, Location, Value, Value),
                       FoldFn fold) {
  return {ResultType::SameAsInput,
          [build](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
            return build(b, loc, s[0], s[1]);
          },
          fold};
}

ElementwiseSpec compare(arith::CmpFPredicate f, arith::CmpIPredicate i,
                        arith::CmpIPredicate u, FoldFn fold) {
  return {ResultType::Bool,
          [=](OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
            return buildCompare(b, loc, s, f, i, u,
                                isUnsignedDType(ctx.input(0).dtype));
          },
          fold};
}

llvm::StringMap<ElementwiseSpec> makeSpecs() {
  using P = arith::CmpFPredicate;
  using I = arith::CmpIPredicate;
  llvm::StringMap<ElementwiseSpec> m;
  m["Add"] = binary(createAdd, [](ArrayRef<double> a) { return a[0] + a[1]; });
  m["Sub"] = binary(createSub, [](ArrayRef<double> a) { return a[0] - a[1]; });
  m["Mul"] = binary(createMul, [](ArrayRef<double> a) { return a[0] * a[1]; });
  m["Div"] = {ResultType::SameAsInput, buildDiv,
              [](ArrayRef<double> a) { return a[0] / a[1]; }};
  m["Pow"] = {ResultType::SameAsInput, buildPow,
              [](ArrayRef<double> a) { return std::pow(a[0], a[1]); }};
  m["Max"] = {ResultType::SameAsInput,
              [](OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
                return buildMinMax(b, loc, s, true,
                                   isUnsignedDType(ctx.input(0).dtype));
              },
              [](ArrayRef<double> a) { return *llvm::max_element(a); }};
  m["Min"] = {ResultType::SameAsInput,
              [](OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
                return buildMinMax(b, loc, s, false,
                                   isUnsignedDType(ctx.input(0).dtype));
              },
              [](ArrayRef<double> a) { return *llvm::min_element(a); }};
  m["Sum"] = {ResultType::SameAsInput,
              [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                Value acc = s[0];
                for (Value v : s.drop_front())
                  acc = createAdd(b, loc, acc, v);
                return acc;
              },
              [](ArrayRef<double> a) {
                double r = 0;
                for (double v : a)
                  r += v;
                return r;
              }};
  m["Equal"] = compare(P::OEQ, I::eq, I::eq,
                       [](ArrayRef<double> a) { return double(a[0] == a[1]); });
  m["Less"] = compare(P::OLT, I::slt, I::ult,
                      [](ArrayRef<double> a) { return double(a[0] < a[1]); });
  m["LessOrEqual"] = compare(P::OLE, I::sle, I::ule, [](ArrayRef<double> a) {
    return double(a[0] <= a[1]);
  });
  m["Greater"] = compare(P::OGT, I::sgt, I::ugt, [](ArrayRef<double> a) {
    return double(a[0] > a[1]);
  });
  m["GreaterOrEqual"] = compare(P::OGE, I::sge, I::uge, [](ArrayRef<double> a) {
    return double(a[0] >= a[1]);
  });
  auto logic = [](Value (*build)(OpBuilder &, Location, Value, Value),
                  FoldFn fold) {
    return ElementwiseSpec{
        ResultType::Bool,
        [build](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
          return build(b, loc, s[0], s[1]);
        },
        fold};
  };
  m["And"] = logic(
      [](OpBuilder &b, Location loc, Value x, Value y) -> Value {
        return arith::AndIOp::create(b, loc, x, y);
      },
      [](ArrayRef<double> a) { return double(a[0] != 0 && a[1] != 0); });
  m["Or"] =
      logic([](OpBuilder &b, Location loc, Value x,
               Value y) -> Value { return arith::OrIOp::create(b, loc, x, y); },
            [](ArrayRef<double> a) { return double(a[0] != 0 || a[1] != 0); });
  m["Xor"] = logic(
      [](OpBuilder &b, Location loc, Value x, Value y) -> Value {
        return arith::XOrIOp::create(b, loc, x, y);
      },
      [](ArrayRef<double> a) { return double((a[0] != 0) != (a[1] != 0)); });
  m["Not"] = {ResultType::Bool,
              [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                return Value(
                    arith::XOrIOp::create(b, loc, s[0], cst(b, loc, s[0], 1)));
              },
              [](ArrayRef<double> a) { return double(a[0] == 0); }};
  m["Where"] = {ResultType::SameAsSecond,
                [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                  return Value(
                      arith::SelectOp::create(b, loc, s[0], s[1], s[2]));
                },
                [](ArrayRef<double> a) { return a[0] != 0 ? a[1] : a[2]; }};
  m["Cast"] = {ResultType::FromCastAttr, nullptr, nullptr};

  m["Neg"] = {ResultType::SameAsInput,
              [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                if (isFloat(s[0]))
                  return Value(arith::NegFOp::create(b, loc, s[0]));
                return createSub(b, loc, cst(b, loc, s[0], 0), s[0]);
              },
              [](ArrayRef<double> a) { return -a[0]; }};
  m["Abs"] = {ResultType::SameAsInput,
              [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                if (isFloat(s[0]))
                  return Value(math::AbsFOp::create(b, loc, s[0]));
                return Value(math::AbsIOp::create(b, loc, s[0]));
              },
              [](ArrayRef<double> a) { return std::fabs(a[0]); }};
  m["Sqrt"] = unaryMath<math::SqrtOp>(
      [](ArrayRef<double> a) { return std::sqrt(a[0]); });
  m["Exp"] =
      unaryMath<math::ExpOp>([](ArrayRef<double> a) { return std::exp(a[0]); });
  m["Log"] =
      unaryMath<math::LogOp>([](ArrayRef<double> a) { return std::log(a[0]); });
  m["Tanh"] = unaryMath<math::TanhOp>();
  m["Erf"] = unaryMath<math::ErfOp>();
  m["Sin"] =
      unaryMath<math::SinOp>([](ArrayRef<double> a) { return std::sin(a[0]); });
  m["Cos"] =
      unaryMath<math::CosOp>([](ArrayRef<double> a) { return std::cos(a[0]); });
  m["Floor"] = unaryMath<math::FloorOp>(
      [](ArrayRef<double> a) { return std::floor(a[0]); });
  m["Ceil"] = unaryMath<math::CeilOp>(
      [](ArrayRef<double> a) { return std::ceil(a[0]); });
  m["Sign"] = {ResultType::SameAsInput,
               [](OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
                 return buildSign(b, loc, s[0],
                                  isUnsignedDType(ctx.input(0).dtype));
               },
               [](ArrayRef<double> a) {
                 // NaN stays NaN, as in numpy.
                 return a[0] > 0 ? 1.0 : a[0] < 0 ? -1.0 : a[0];
               }};
  m["Reciprocal"] = {
      ResultType::SameAsInput,
      [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
        return Value(
            arith::DivFOp::create(b, loc, cst(b, loc, s[0], 1.0), s[0]));
      },
      [](ArrayRef<double> a) { return 1.0 / a[0]; }};
  m["Sigmoid"] = {ResultType::SameAsInput,
                  [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                    return buildSigmoid(b, loc, s[0]);
                  }};
  m["Relu"] = {ResultType::SameAsInput,
               [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
                 return createMax(b, loc, s[0], cst(b, loc, s[0], 0.0));
               },
               [](ArrayRef<double> a) { return std::max(a[0], 0.0); }};
  m["LeakyRelu"] = {
      ResultType::SameAsInput,
      [](OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
        Value x = s[0];
        Value scaled = arith::MulFOp::create(
            b, loc, x, cst(b, loc, x, ctx.attrFloat("alpha", 0.01f)));
        Value positive = arith::CmpFOp::create(
            b, loc, arith::CmpFPredicate::OGT, x, cst(b, loc, x, 0.0));
        return Value(arith::SelectOp::create(b, loc, positive, x, scaled));
      }};
  m["Softplus"] = {
      ResultType::SameAsInput,
      [](OpBuilder &b, Location loc, ValueRange s, NodeContext &) {
        // log(1 + exp(x)) without overflow for large x.
        Value x = s[0];
        Value e = math::ExpOp::create(b, loc, x);
        Value soft = math::Log1pOp::create(b, loc, e);
        Value big = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x,
                                          cst(b, loc, x, 20.0));
        return Value(arith::SelectOp::create(b, loc, big, x, soft));
      }};
  m["Gelu"] = {ResultType::SameAsInput,
               [](OpBuilder &b, Location loc, ValueRange s, NodeContext &ctx) {
                 return buildGelu(b, loc, s[0],
                                  ctx.attrString("approximate", "none") ==
                                      "tanh");
               }};
  return m;
}

const llvm::StringMap<ElementwiseSpec> &getSpecs() {
  static const llvm::StringMap<ElementwiseSpec> specs = makeSpecs();
  return specs;
}

/// Clip: min and max are optional inputs (attributes before opset 11).
LogicalResult convertClip(NodeContext &ctx) {
  const ImportedValue &x = ctx.input(0);
  Type elementType = getElementType(ctx.b.getContext(), x.dtype);
  std::optional<double> lo, hi;
  if (ctx.opset < 11) {
    lo = ctx.attrFloat("min", -std::numeric_limits<float>::max());
    hi = ctx.attrFloat("max", std::numeric_limits<float>::max());
  }
  SmallVector<Value> operands = {ctx.operand(0)};
  // A bound is a scalar constant in the body when known, else an operand.
  std::optional<unsigned> minOperand, maxOperand;
  const ConstTensor *constBound[3] = {nullptr, nullptr, nullptr};
  for (unsigned i : {1u, 2u}) {
    if (!ctx.hasInput(i))
      continue;
    if (!ctx.input(i).shape.empty())
      return ctx.emitError()
             << (i == 1 ? "min" : "max") << " must be a scalar, got "
             << formatShape(ctx.input(i).shape);
    if ((constBound[i] = ctx.constInput(i)))
      continue;
    (i == 1 ? minOperand : maxOperand) = operands.size();
    operands.push_back(ctx.operand(i));
  }
  MLIRContext *mctx = ctx.b.getContext();
  Value result = buildElementwise(
      ctx.b, ctx.loc, operands, x.shape, elementType,
      [&](OpBuilder &b, Location loc, ValueRange s) {
        bool isUnsigned = isUnsignedDType(x.dtype);
        auto bound = [&](unsigned i, std::optional<unsigned> operand,
                         std::optional<double> attr) -> Value {
          if (constBound[i])
            return createConstScalar(b, loc, mctx, *constBound[i]);
          if (operand)
            return s[*operand];
          if (attr)
            return cst(b, loc, s[0], *attr);
          return {};
        };
        Value v = s[0];
        if (Value lo_ = bound(1, minOperand, lo))
          v = buildMinMax(b, loc, {v, lo_}, true, isUnsigned);
        if (Value hi_ = bound(2, maxOperand, hi))
          v = buildMinMax(b, loc, {v, hi_}, false, isUnsigned);
        return v;
      });
  ctx.setResult(0, result, x.dtype);
  return success();
}

/// Mod: checks the fmod attribute against the element type and refuses a
/// known integer divisor of zero (undefined), then converts (or folds, for
/// shape and index arithmetic) like the other binary ops.
LogicalResult convertMod(NodeContext &ctx) {
  int64_t fmod = ctx.attrInt("fmod", 0);
  if (fmod != 0 && fmod != 1)
    return ctx.emitError() << "fmod must be 0 or 1, got " << fmod;
  DType dtype = ctx.input(0).dtype;
  if (isFloatDType(dtype) && fmod == 0)
    return ctx.emitError() << "fmod = 0 (integer modulo) needs integer inputs; "
                           << dtypeName(dtype)
                           << " inputs need fmod = 1, as the spec says";
  if (!isFloatDType(dtype))
    if (const ConstTensor *divisor = ctx.constInput(1))
      if (llvm::is_contained(divisor->ints, 0))
        return ctx.emitError() << "integer modulo by zero (the divisor is a "
                                  "constant with a zero element)";
  bool isUnsigned = isUnsignedDType(dtype);
  ElementwiseSpec spec{ResultType::SameAsInput,
                       [fmod, isUnsigned](OpBuilder &b, Location loc,
                                          ValueRange s, NodeContext &) {
                         return buildMod(b, loc, s[0], s[1], fmod, isUnsigned);
                       },
                       fmod || isUnsigned ? foldFMod : foldIntegerMod};
  return convertElementwise(ctx, spec);
}

} // namespace

void mlir::tp::onnx_import::populateElementwiseConverters(ConverterMap &map) {
  for (const auto &entry : getSpecs()) {
    const ElementwiseSpec *spec = &entry.getValue();
    map[entry.getKey()] = [spec](NodeContext &ctx) {
      return convertElementwise(ctx, *spec);
    };
  }
  map["Clip"] = convertClip;
  map["Mod"] = convertMod;
}
