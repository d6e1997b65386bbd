//===- ResizeOps.cpp - ONNX Resize and Upsample on static shapes ----------===//
//
// On static shapes every resized axis is a fixed map from input to output
// positions, computed here as onnxruntime computes it. Nearest becomes a
// gather at constant indices; linear and cubic become, per resized axis, a
// contraction with a constant [in, out] weight matrix: exact, and split by
// the planner like any other linear op.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <array>
#include <cmath>

using namespace mlir;
using namespace mlir::tp::onnx_import;

namespace {

enum class Mode { Nearest, Linear, Cubic };

enum class Transform {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNN,
  TfCropAndResize,
};

/// How nearest rounds a source coordinate; Simple is Resize-10's and
/// Upsample's (ceil when downsampling, truncation otherwise).
enum class Rounding { Simple, RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct ResizeAttrs {
  Mode mode = Mode::Nearest;
  Transform transform = Transform::HalfPixel;
  Rounding rounding = Rounding::RoundPreferFloor;
  float cubicA = -0.75f;
  bool excludeOutside = false;
};

/// One axis that changes: its sizes and the scale its coordinates use.
struct AxisResize {
  int64_t axis, in, out;
  float scale;
};

/// The source coordinate of output position `x`, in float as onnxruntime
/// computes it (nearest's rounding depends on the last bit).
float getSourceCoordinate(Transform t, const AxisResize &r, float x) {
  float scale = r.scale, outLen = r.out, inLen = r.in;
  switch (t) {
  case Transform::Asymmetric:
    return x / scale;
  case Transform::PytorchHalfPixel:
    return outLen > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
  case Transform::TfHalfPixelForNN:
    return (x + 0.5f) / scale;
  case Transform::AlignCorners:
    return outLen == 1 ? 0.0f : x * (inLen - 1) / (outLen - 1);
  case Transform::HalfPixelSymmetric: {
    float adjustment = outLen / (scale * inLen);
    float offset = inLen / 2 * (1 - adjustment);
    return static_cast<float>(offset + (x + 0.5) / scale - 0.5);
  }
  case Transform::HalfPixel:
  case Transform::TfCropAndResize:
    break;
  }
  return (x + 0.5f) / scale - 0.5f;
}

int64_t roundToNearest(Rounding rounding, float x, bool downsample) {
  switch (rounding) {
  case Rounding::Simple:
    return downsample ? static_cast<int64_t>(std::ceil(x))
                      : static_cast<int64_t>(x);
  case Rounding::Floor:
    return static_cast<int64_t>(std::floor(x));
  case Rounding::Ceil:
    return static_cast<int64_t>(std::ceil(x));
  case Rounding::RoundPreferFloor:
  case Rounding::RoundPreferCeil:
    break;
  }
  // A coordinate within 1e-6 of a half is a tie, as onnxruntime (1.23)
  // decides: 1 / float(2 / 7) is 3.4999998, which the scale meant as 3.5.
  float below = std::floor(x);
  if (std::fabs(x - below - 0.5f) <= 1e-6f)
    return static_cast<int64_t>(below) +
           (rounding == Rounding::RoundPreferCeil ? 1 : 0);
  return static_cast<int64_t>(std::round(x));
}

/// The input index each output position of `r` reads, clamped to the axis.
SmallVector<int64_t> getNearestIndices(const ResizeAttrs &a,
                                       const AxisResize &r) {
  SmallVector<int64_t> indices;
  for (int64_t o = 0; o < r.out; ++o) {
    float x = getSourceCoordinate(a.transform, r, static_cast<float>(o));
    int64_t i = roundToNearest(a.rounding, x, r.scale < 1);
    indices.push_back(std::clamp<int64_t>(i, 0, r.in - 1));
  }
  return indices;
}

/// Keys' cubic convolution weights of the taps floor(x) - 1 .. floor(x) + 2
/// for s = x - floor(x).
std::array<float, 4> getCubicCoeffs(float s, float a) {
  // |t| in [1, 2) and in [0, 1).
  auto outer = [a](float t) {
    return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  };
  auto inner = [a](float t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };
  return {outer(s + 1), inner(s), inner(1 - s), outer(2 - s)};
}

/// The [out, in] weights of one linear or cubic axis, row-major: each row
/// the taps onnxruntime reads for that output position (linear: the source
/// coordinate clamped to the axis; cubic: taps clamped to the edge, or with
/// exclude_outside dropped and the rest renormalized).
std::vector<double> getInterpolationWeights(const ResizeAttrs &a,
                                            const AxisResize &r) {
  std::vector<double> w(r.out * r.in, 0.0);
  for (int64_t o = 0; o < r.out; ++o) {
    float x = getSourceCoordinate(a.transform, r, static_cast<float>(o));
    double *row = &w[o * r.in];
    if (a.mode == Mode::Linear) {
      x = std::max(0.0f, std::min(x, static_cast<float>(r.in - 1)));
      int64_t x1 = std::min(static_cast<int64_t>(x), r.in - 1);
      int64_t x2 = std::min(x1 + 1, r.in - 1);
      float d1 = std::fabs(x - x1), d2 = std::fabs(x - x2);
      if (x1 == x2)
        d1 = d2 = 0.5f;
      row[x1] += d2;
      row[x2] += d1;
      continue;
    }
    int64_t base = static_cast<int64_t>(std::floor(x));
    std::array<float, 4> coeffs =
        getCubicCoeffs(x - static_cast<float>(base), a.cubicA);
    float sum = 1.0f;
    if (a.excludeOutside) {
      sum = 0.0f;
      for (int64_t t = 0; t < 4; ++t) {
        int64_t i = base - 1 + t;
        if (i < 0 || i >= r.in)
          coeffs[t] = 0.0f;
        sum += coeffs[t];
      }
    }
    for (int64_t t = 0; t < 4; ++t)
      row[std::clamp<int64_t>(base - 1 + t, 0, r.in - 1)] += coeffs[t] / sum;
  }
  return w;
}

FailureOr<ResizeAttrs> readAttrs(NodeContext &ctx, bool isUpsample) {
  ResizeAttrs a;
  std::string mode = ctx.attrString("mode", "nearest");
  std::optional<Mode> m =
      llvm::StringSwitch<std::optional<Mode>>(mode)
          .Case("nearest", Mode::Nearest)
          .Case("linear", Mode::Linear)
          .Case("bilinear",
                isUpsample ? std::optional(Mode::Linear) : std::nullopt)
          .Case("cubic", isUpsample ? std::nullopt : std::optional(Mode::Cubic))
          .Default(std::nullopt);
  if (!m)
    return ctx.emitError() << "mode '" << mode << "' is not supported "
                           << "(nearest, linear"
                           << (isUpsample ? "" : ", cubic") << ")";
  a.mode = *m;
  // Before Resize-11 the only transform is asymmetric and nearest rounds
  // the old way.
  if (isUpsample || ctx.opset < 11) {
    a.transform = Transform::Asymmetric;
    a.rounding = Rounding::Simple;
    return a;
  }
  std::string transform =
      ctx.attrString("coordinate_transformation_mode", "half_pixel");
  std::optional<Transform> t =
      llvm::StringSwitch<std::optional<Transform>>(transform)
          .Case("half_pixel", Transform::HalfPixel)
          .Case("half_pixel_symmetric", Transform::HalfPixelSymmetric)
          .Case("pytorch_half_pixel", Transform::PytorchHalfPixel)
          .Case("align_corners", Transform::AlignCorners)
          .Case("asymmetric", Transform::Asymmetric)
          .Case("tf_half_pixel_for_nn", Transform::TfHalfPixelForNN)
          .Case("tf_crop_and_resize", Transform::TfCropAndResize)
          .Default(std::nullopt);
  if (!t)
    return ctx.emitError() << "unknown coordinate_transformation_mode '"
                           << transform << "'";
  if (*t == Transform::TfCropAndResize)
    return ctx.emitError()
           << "coordinate_transformation_mode 'tf_crop_and_resize' is not "
              "supported (it crops to roi and fills with "
              "extrapolation_value); use half_pixel, pytorch_half_pixel, "
              "align_corners, asymmetric or half_pixel_symmetric";
  a.transform = *t;
  std::string rounding = ctx.attrString("nearest_mode", "round_prefer_floor");
  std::optional<Rounding> r =
      llvm::StringSwitch<std::optional<Rounding>>(rounding)
          .Case("round_prefer_floor", Rounding::RoundPreferFloor)
          .Case("round_prefer_ceil", Rounding::RoundPreferCeil)
          .Case("floor", Rounding::Floor)
          .Case("ceil", Rounding::Ceil)
          .Default(std::nullopt);
  if (!r)
    return ctx.emitError() << "unknown nearest_mode '" << rounding << "'";
  a.rounding = *r;
  a.cubicA = ctx.attrFloat("cubic_coeff_a", -0.75f);
  a.excludeOutside = ctx.attrInt("exclude_outside", 0) != 0;
  if (int64_t antialias = ctx.attrInt("antialias", 0))
    return ctx.emitError() << "antialias = " << antialias
                           << " is not supported (only 0)";
  return a;
}

/// A float input that must be known at import (scales), or null when it
/// is absent or empty (Resize-11 passes an empty scales next to sizes).
FailureOr<const ConstTensor *> readConstFloats(NodeContext &ctx, unsigned i,
                                               StringRef what) {
  if (!ctx.hasInput(i) || ctx.getNumElements(i) == 0)
    return static_cast<const ConstTensor *>(nullptr);
  const ConstTensor *c = ctx.constInput(i);
  if (!c)
    return ctx.emitError() << "the " << what << " (input " << i
                           << ") must be known at import time (the importer "
                              "works on static shapes); it depends on a model "
                              "input or weight";
  return c;
}

/// The axes the scales or sizes list (Resize-18's axes attribute, else all).
FailureOr<SmallVector<int64_t>> readAxes(NodeContext &ctx, int64_t rank) {
  SmallVector<int64_t> axes;
  std::optional<SmallVector<int64_t>> attr;
  if (ctx.opset >= 18)
    attr = ctx.attrInts("axes");
  if (!attr) {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
    return axes;
  }
  for (int64_t a : *attr) {
    std::optional<int64_t> axis = ctx.normalizeAxis(a, rank);
    if (!axis)
      return failure();
    if (llvm::is_contained(axes, *axis))
      return ctx.emitError() << "axis " << a << " is listed twice in axes";
    axes.push_back(*axis);
  }
  return axes;
}

/// The output shape and per-axis scales, from scales or sizes (the latter
/// adjusted by keep_aspect_ratio_policy), as onnxruntime derives them.
LogicalResult getOutputShape(NodeContext &ctx, bool isUpsample,
                             ArrayRef<int64_t> inShape,
                             SmallVectorImpl<int64_t> &outShape,
                             SmallVectorImpl<float> &scales) {
  int64_t rank = inShape.size();
  outShape.assign(inShape.begin(), inShape.end());
  scales.assign(rank, 1.0f);
  FailureOr<SmallVector<int64_t>> axes = readAxes(ctx, rank);
  if (failed(axes))
    return failure();

  // Upsample-7 keeps its scales in an attribute.
  SmallVector<float> givenScales;
  if (isUpsample && ctx.getNumInputs() < 2) {
    const onnx::AttributeProto *attr = ctx.attr("scales");
    if (!attr)
      return ctx.emitError() << "needs the scales attribute";
    givenScales.assign(attr->floats().begin(), attr->floats().end());
  } else {
    unsigned scalesInput = ctx.opset >= 11 && !isUpsample ? 2 : 1;
    FailureOr<const ConstTensor *> c =
        readConstFloats(ctx, scalesInput, "scales");
    if (failed(c))
      return failure();
    if (*c)
      for (int64_t i = 0, e = (*c)->numel(); i < e; ++i)
        givenScales.push_back(static_cast<float>((*c)->getAsDouble(i)));
  }
  bool hasSizes = !isUpsample && ctx.opset >= 11 && ctx.hasInput(3) &&
                  ctx.getNumElements(3) != 0;
  if (hasSizes && !givenScales.empty())
    return ctx.emitError() << "has both scales and sizes; only one may be "
                              "given";
  if (!hasSizes && givenScales.empty())
    return ctx.emitError() << "needs scales or sizes";
  size_t expected = axes->size();

  if (!hasSizes) {
    if (givenScales.size() != expected)
      return ctx.emitError() << "has " << givenScales.size() << " scales for "
                             << expected << " axes";
    for (auto [axis, scale] : llvm::zip(*axes, givenScales)) {
      std::string text;
      llvm::raw_string_ostream(text) << llvm::format("%g", scale);
      if (!(scale > 0) || !std::isfinite(scale))
        return ctx.emitError() << "scale " << text << " of axis " << axis
                               << " must be a positive number";
      scales[axis] = scale;
      float size = scale * static_cast<float>(inShape[axis]);
      if (size >= 9.0e18f)
        return ctx.emitError() << "scale " << text << " of axis " << axis
                               << " gives a size that overflows";
      outShape[axis] = static_cast<int64_t>(size);
    }
    return success();
  }

  std::optional<SmallVector<int64_t>> sizes = ctx.constInts(3, "sizes");
  if (!sizes)
    return failure();
  if (sizes->size() != expected)
    return ctx.emitError() << "has " << sizes->size() << " sizes for "
                           << expected << " axes";
  for (auto [axis, size] : llvm::zip(*axes, *sizes)) {
    if (size < 0)
      return ctx.emitError()
             << "size " << size << " of axis " << axis << " is negative";
    if (inShape[axis] == 0 && size != 0)
      return ctx.emitError()
             << "cannot resize the empty axis " << axis << " to " << size;
    outShape[axis] = size;
    if (inShape[axis] != 0)
      scales[axis] =
          static_cast<float>(size) / static_cast<float>(inShape[axis]);
  }
  std::string policy =
      ctx.opset >= 18 ? ctx.attrString("keep_aspect_ratio_policy", "stretch")
                      : "stretch";
  if (policy == "stretch")
    return success();
  if (policy != "not_larger" && policy != "not_smaller")
    return ctx.emitError() << "unknown keep_aspect_ratio_policy '" << policy
                           << "'";
  // One scale for all listed axes: the largest that fits inside sizes
  // (not_larger) or the smallest that covers them (not_smaller).
  bool notLarger = policy == "not_larger";
  float common = scales[axes->front()];
  for (int64_t axis : *axes)
    common = notLarger ? std::min(common, scales[axis])
                       : std::max(common, scales[axis]);
  for (int64_t axis : *axes) {
    scales[axis] = common;
    outShape[axis] = static_cast<int64_t>(std::round(common * inShape[axis]));
  }
  return success();
}

/// Nearest: one generic reading the input at constant per-axis indices
/// (as Gather with known indices does), or folded for a known input.
void convertNearest(NodeContext &ctx, const ResizeAttrs &attrs,
                    ArrayRef<AxisResize> resized, ArrayRef<int64_t> outShape) {
  const ImportedValue &x = ctx.input(0);
  SmallVector<SmallVector<int64_t>> indices;
  for (const AxisResize &r : resized)
    indices.push_back(getNearestIndices(attrs, r));
  if (x.constant && getNumElements(outShape) <= maxFoldedElements()) {
    SmallVector<int64_t> strides = getStrides(x.shape);
    ctx.setConstResult(
        0, foldByIndex(*x.constant, outShape, [&](ArrayRef<int64_t> index) {
          SmallVector<int64_t> src(index);
          for (auto [r, idx] : llvm::zip(resized, indices))
            src[r.axis] = idx[index[r.axis]];
          int64_t flat = 0;
          for (auto [i, s] : llvm::zip(src, strides))
            flat += i * s;
          return flat;
        }));
    return;
  }
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  SmallVector<Value> operands;
  SmallVector<AffineMap> maps;
  for (auto [r, idx] : llvm::zip(resized, indices)) {
    ConstTensor c;
    c.shape = {r.out};
    c.ints.assign(idx.begin(), idx.end());
    operands.push_back(materializeConstant(b, loc, c));
    maps.push_back(AffineMap::get(outShape.size(), 0,
                                  b.getAffineDimExpr(r.axis), b.getContext()));
  }
  Value result = buildIndexedRead(
      b, loc, ctx.operand(0), operands, maps, outShape,
      [&](OpBuilder &nb, Location nloc, ValueRange loops, ValueRange scalars) {
        SmallVector<Value> index(loops);
        for (auto [r, scalar] : llvm::zip(resized, scalars))
          index[r.axis] =
              arith::IndexCastOp::create(nb, nloc, nb.getIndexType(), scalar);
        return index;
      });
  ctx.setResult(0, result, x.dtype);
}

/// Linear and cubic: per resized axis, x <- contract(x, W^T) over that
/// axis, W^T a constant [in, out] of the input's element type.
LogicalResult convertInterpolation(NodeContext &ctx, const ResizeAttrs &attrs,
                                   ArrayRef<AxisResize> resized) {
  const ImportedValue &x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.emitError() << "mode '" << ctx.attrString("mode", "")
                           << "' needs a floating-point input, got "
                           << dtypeName(x.dtype);
  int64_t rank = x.shape.size();
  // One letter per dim and one for the new size, as einsum names them.
  if (rank >= 26)
    return ctx.emitError() << "rank " << rank << " is beyond 25";
  OpBuilder &b = ctx.b;
  Location loc = ctx.loc;
  Value result = ctx.operand(0);
  std::string dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.push_back(static_cast<char>('a' + d));
  char newDim = static_cast<char>('a' + rank);
  for (const AxisResize &r : resized) {
    std::vector<double> w = getInterpolationWeights(attrs, r);
    ConstTensor wT;
    wT.dtype = x.dtype;
    wT.shape = {r.in, r.out};
    wT.allocate();
    for (int64_t o = 0; o < r.out; ++o)
      for (int64_t i = 0; i < r.in; ++i)
        wT.floats[i * r.out + o] = w[o * r.in + i];
    std::string outDims = dims;
    outDims[r.axis] = newDim;
    std::string wDims = {dims[r.axis], newDim};
    result = buildContraction(b, loc, result, materializeConstant(b, loc, wT),
                              dims, wDims, outDims);
  }
  ctx.setResult(0, result, x.dtype);
  return success();
}

LogicalResult convertResize(NodeContext &ctx, bool isUpsample) {
  const ImportedValue &x = ctx.input(0);
  if (x.shape.empty())
    return ctx.emitError() << "input must have rank >= 1";
  FailureOr<ResizeAttrs> attrs = readAttrs(ctx, isUpsample);
  if (failed(attrs))
    return failure();
  SmallVector<int64_t> outShape;
  SmallVector<float> scales;
  if (failed(getOutputShape(ctx, isUpsample, x.shape, outShape, scales)))
    return failure();
  if (!getCheckedNumElements(outShape))
    return ctx.emitError() << "output shape " << formatShape(outShape)
                           << " has more elements than fit in 64 bits";
  // Same shape: onnxruntime copies the input, whatever the scales.
  if (ArrayRef<int64_t>(outShape) == ArrayRef<int64_t>(x.shape)) {
    ctx.setValue(0, x);
    return success();
  }
  if (getNumElements(outShape) == 0) {
    Type elementType = getElementType(ctx.b.getContext(), x.dtype);
    ctx.setResult(0, createEmpty(ctx.b, ctx.loc, outShape, elementType),
                  x.dtype);
    return success();
  }
  // An axis of scale 1 is read as it is, as onnxruntime reads it.
  SmallVector<AxisResize> resized;
  for (int64_t d = 0, e = x.shape.size(); d < e; ++d) {
    if (scales[d] == 1.0f)
      continue;
    // Each resized axis gets an index vector or a weight matrix at import;
    // a hostile size must not become an allocation that aborts.
    int64_t elements;
    if (attrs->mode == Mode::Nearest
            ? outShape[d] > kMaxConstantElements
            : llvm::MulOverflow(x.shape[d], outShape[d], elements) ||
                  elements > kMaxConstantElements)
      return ctx.emitError()
             << "resizing axis " << d << " from " << x.shape[d] << " to "
             << outShape[d] << " needs more constant data than this "
             << "importer builds";
    resized.push_back({d, x.shape[d], outShape[d], scales[d]});
  }
  if (attrs->mode == Mode::Nearest) {
    convertNearest(ctx, *attrs, resized, outShape);
    return success();
  }
  return convertInterpolation(ctx, *attrs, resized);
}

} // namespace

void mlir::tp::onnx_import::populateResizeConverters(ConverterMap &map) {
  map["Resize"] = [](NodeContext &ctx) { return convertResize(ctx, false); };
  map["Upsample"] = [](NodeContext &ctx) { return convertResize(ctx, true); };
}
