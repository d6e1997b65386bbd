//===- Constants.cpp - import-time tensors --------------------------------===//
//
// ONNX element types, the ConstTensor that shape arithmetic folds on, and
// the conversions from TensorProto and to arith.constant.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::tp::onnx_import;
using onnx::TensorProto;

bool mlir::tp::onnx_import::isFloatDType(DType t) {
  return t == TensorProto::FLOAT || t == TensorProto::DOUBLE ||
         t == TensorProto::FLOAT16 || t == TensorProto::BFLOAT16;
}

bool mlir::tp::onnx_import::isUnsignedDType(DType t) {
  return t == TensorProto::UINT8 || t == TensorProto::UINT16 ||
         t == TensorProto::UINT32 || t == TensorProto::UINT64;
}

StringRef mlir::tp::onnx_import::dtypeName(DType t) {
  if (TensorProto::DataType_IsValid(t))
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(t));
  return "<invalid>";
}

Type mlir::tp::onnx_import::getElementType(MLIRContext *ctx, DType t) {
  Builder b(ctx);
  switch (t) {
  case TensorProto::FLOAT:
    return b.getF32Type();
  case TensorProto::DOUBLE:
    return b.getF64Type();
  case TensorProto::FLOAT16:
    return b.getF16Type();
  case TensorProto::BFLOAT16:
    return b.getBF16Type();
  case TensorProto::INT64:
  case TensorProto::UINT64:
    return b.getI64Type();
  case TensorProto::INT32:
  case TensorProto::UINT32:
    return b.getI32Type();
  case TensorProto::INT16:
  case TensorProto::UINT16:
    return b.getI16Type();
  case TensorProto::INT8:
  case TensorProto::UINT8:
    return b.getI8Type();
  case TensorProto::BOOL:
    return b.getI1Type();
  default:
    return {};
  }
}

int64_t mlir::tp::onnx_import::getNumElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::optional<int64_t>
mlir::tp::onnx_import::getCheckedNumElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

SmallVector<int64_t>
mlir::tp::onnx_import::getStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::string mlir::tp::onnx_import::formatShape(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

int64_t ConstTensor::numel() const { return getNumElements(shape); }

void ConstTensor::allocate() {
  if (isFloat()) {
    floats.assign(numel(), 0.0);
    ints.clear();
  } else {
    ints.assign(numel(), 0);
    floats.clear();
  }
}

/// Wraps an integer to the width (and signedness) of `t`.
static int64_t wrapInt(int64_t v, DType t) {
  switch (t) {
  case TensorProto::BOOL:
    return v != 0;
  case TensorProto::INT8:
    return static_cast<int8_t>(v);
  case TensorProto::UINT8:
    return static_cast<uint8_t>(v);
  case TensorProto::INT16:
    return static_cast<int16_t>(v);
  case TensorProto::UINT16:
    return static_cast<uint16_t>(v);
  case TensorProto::INT32:
    return static_cast<int32_t>(v);
  case TensorProto::UINT32:
    return static_cast<uint32_t>(v);
  default:
    return v;
  }
}

static double roundFloat(double v, DType t) {
  if (t == TensorProto::FLOAT)
    return static_cast<float>(v);
  return v;
}

ConstTensor ConstTensor::castTo(DType to) const {
  ConstTensor r;
  r.dtype = to;
  r.shape = shape;
  r.allocate();
  for (int64_t i = 0, e = numel(); i < e; ++i) {
    if (r.isFloat())
      r.floats[i] = roundFloat(getAsDouble(i), to);
    else if (to == TensorProto::BOOL)
      r.ints[i] = getAsDouble(i) != 0.0;
    else if (isFloat() && to == TensorProto::INT32 &&
             !(std::abs(floats[i]) < 2147483648.0))
      r.ints[i] = std::numeric_limits<int32_t>::min(); // cvttsd2si, 32-bit
    else if (isFloat())
      r.ints[i] = wrapInt(truncToInt64(floats[i]), to);
    else
      r.ints[i] = wrapInt(ints[i], to);
  }
  return r;
}

static double halfToDouble(uint16_t bits, bool bf16) {
  if (bf16) {
    uint32_t f = static_cast<uint32_t>(bits) << 16;
    float out;
    std::memcpy(&out, &f, 4);
    return out;
  }
  llvm::APFloat v(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits));
  return v.convertToFloat();
}

FailureOr<ConstTensor>
mlir::tp::onnx_import::readTensorProto(const TensorProto &tensor,
                                       std::string &error) {
  ConstTensor c;
  c.dtype = tensor.data_type();
  c.shape.assign(tensor.dims().begin(), tensor.dims().end());
  if (c.dtype == TensorProto::UNDEFINED || c.dtype == TensorProto::STRING ||
      c.dtype == TensorProto::COMPLEX64 || c.dtype == TensorProto::COMPLEX128 ||
      c.dtype > TensorProto::BFLOAT16) {
    error = "unsupported element type " + dtypeName(c.dtype).str();
    return failure();
  }
  std::optional<int64_t> count = getCheckedNumElements(c.shape);
  if (!count) {
    error = "has shape " + formatShape(c.shape) +
            ", whose element count is negative or overflows";
    return failure();
  }
  int64_t n = *count;
  // The buffer is sized only once the data is known to fill it.
  auto check = [&](int64_t have) {
    if (have == n) {
      c.allocate();
      return true;
    }
    error = "holds " + std::to_string(have) + " values but its shape " +
            formatShape(c.shape) + " needs " + std::to_string(n);
    return false;
  };
  if (tensor.has_raw_data()) {
    const std::string &raw = tensor.raw_data();
    const char *p = raw.data();
    size_t width = 0;
    switch (c.dtype) {
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
    case TensorProto::UINT64:
      width = 8;
      break;
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      width = 4;
      break;
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::INT16:
    case TensorProto::UINT16:
      width = 2;
      break;
    default:
      width = 1;
    }
    if (!check(static_cast<int64_t>(raw.size() / width)) ||
        raw.size() % width != 0) {
      if (error.empty())
        error = "raw data size is not a multiple of the element size";
      return failure();
    }
    namespace le = llvm::support::endian;
    for (int64_t i = 0; i < n; ++i) {
      const char *q = p + i * width;
      switch (c.dtype) {
      case TensorProto::FLOAT: {
        uint32_t bits = le::read32le(q);
        float f;
        std::memcpy(&f, &bits, 4);
        c.floats[i] = f;
        break;
      }
      case TensorProto::DOUBLE: {
        uint64_t bits = le::read64le(q);
        double d;
        std::memcpy(&d, &bits, 8);
        c.floats[i] = d;
        break;
      }
      case TensorProto::FLOAT16:
      case TensorProto::BFLOAT16:
        c.floats[i] =
            halfToDouble(le::read16le(q), c.dtype == TensorProto::BFLOAT16);
        break;
      case TensorProto::INT64:
      case TensorProto::UINT64:
        c.ints[i] = static_cast<int64_t>(le::read64le(q));
        break;
      default: {
        uint64_t bits = 0;
        std::memcpy(&bits, q, width);
        c.ints[i] = wrapInt(static_cast<int64_t>(bits), c.dtype);
      }
      }
    }
    return c;
  }
  switch (c.dtype) {
  case TensorProto::FLOAT:
    if (!check(tensor.float_data_size()))
      return failure();
    for (int64_t i = 0; i < n; ++i)
      c.floats[i] = tensor.float_data(i);
    break;
  case TensorProto::DOUBLE:
    if (!check(tensor.double_data_size()))
      return failure();
    for (int64_t i = 0; i < n; ++i)
      c.floats[i] = tensor.double_data(i);
    break;
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16:
    if (!check(tensor.int32_data_size()))
      return failure();
    for (int64_t i = 0; i < n; ++i)
      c.floats[i] =
          halfToDouble(tensor.int32_data(i), c.dtype == TensorProto::BFLOAT16);
    break;
  case TensorProto::INT64:
    if (!check(tensor.int64_data_size()))
      return failure();
    for (int64_t i = 0; i < n; ++i)
      c.ints[i] = tensor.int64_data(i);
    break;
  case TensorProto::UINT64:
  case TensorProto::UINT32:
    if (!check(tensor.uint64_data_size()))
      return failure();
    for (int64_t i = 0; i < n; ++i)
      c.ints[i] = static_cast<int64_t>(tensor.uint64_data(i));
    break;
  default:
    if (!check(tensor.int32_data_size()))
      return failure();
    for (int64_t i = 0; i < n; ++i)
      c.ints[i] = wrapInt(tensor.int32_data(i), c.dtype);
  }
  return c;
}

Value mlir::tp::onnx_import::materializeConstant(OpBuilder &b, Location loc,
                                                 const ConstTensor &c) {
  Type elementType = getElementType(b.getContext(), c.dtype);
  auto type = RankedTensorType::get(c.shape, elementType);
  DenseElementsAttr attr;
  int64_t n = c.numel();
  if (auto floatType = dyn_cast<FloatType>(elementType)) {
    SmallVector<APFloat> values;
    values.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      APFloat v(c.floats[i]);
      bool lost;
      v.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &lost);
      values.push_back(v);
    }
    attr = DenseElementsAttr::get(type, values);
  } else {
    unsigned width = elementType.getIntOrFloatBitWidth();
    SmallVector<APInt> values;
    values.reserve(n);
    for (int64_t i = 0; i < n; ++i)
      values.push_back(APInt(width, static_cast<uint64_t>(c.ints[i]),
                             /*isSigned=*/true, /*implicitTrunc=*/true));
    attr = DenseElementsAttr::get(type, values);
  }
  return arith::ConstantOp::create(b, loc, type, attr);
}
