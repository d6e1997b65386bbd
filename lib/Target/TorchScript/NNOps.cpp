//===- NNOps.cpp - aten products, norms, reductions, convolutions ---------===//

#include "Translator.h"

using namespace tp::torchscript;

namespace {

/// x W^T (+ b) with W as stored, [out, in]: an Einsum, so that the weight
/// stays untransposed in its file and reaches the planner as it is.
void linear(Translator &t) {
  int64_t rank = t.rankOf(t.in(0));
  int32_t type = t.typeOf(t.out());
  std::string x = t.operand(0, type), w = t.operand(1, type);
  bool bias = t.numInputs() > 2 && !t.isNone(2);
  if (rank == 2) {
    std::vector<std::string> inputs = {x, w};
    if (bias)
      inputs.push_back(t.operand(2, type));
    t.define(t.emit("Gemm", inputs, {{"transB", int64_t(1)}}));
    return;
  }
  if (rank < 1 || rank > 20)
    t.fail("linear of a rank-" + std::to_string(rank) + " input");
  std::string batch = std::string("abcdefghijklmnopqrs").substr(0, rank - 1);
  std::string equation = batch + "y,zy->" + batch + "z";
  std::string y = t.emit("Einsum", {x, w}, {{"equation", equation.c_str()}});
  t.define(bias ? t.emit("Add", {y, t.operand(2, type)}) : y);
}

void matmul(Translator &t) {
  int32_t type = t.typeOf(t.out());
  t.define(t.emit("MatMul", {t.operand(0, type), t.operand(1, type)}));
}

/// beta * input + alpha * (a @ b), for addmm and baddbmm.
void addProduct(Translator &t) {
  int32_t type = t.typeOf(t.out());
  double beta = t.numInputs() > 3 ? t.doubleArg(3) : 1.0;
  double alpha = t.numInputs() > 4 ? t.doubleArg(4) : 1.0;
  std::string product =
      t.emit("MatMul", {t.operand(1, type), t.operand(2, type)});
  if (alpha != 1.0)
    product = t.emit("Mul", {product, t.constScalar(alpha, type)});
  if (beta == 0.0) {
    t.define(product);
    return;
  }
  std::string input = t.operand(0, type);
  if (beta != 1.0)
    input = t.emit("Mul", {input, t.constScalar(beta, type)});
  t.define(t.emit("Add", {input, product}));
}

/// A reduction over `dims` (all when empty), keeping them when asked.
void reduce(Translator &t, const char *op, bool axesInput) {
  int64_t rank = t.rankOf(t.in(0));
  std::vector<int64_t> axes;
  // The overloads without dims (sum(self, dtype)) reduce everything.
  const c10::FunctionSchema *schema = t.node->maybeSchema();
  bool hasDims = schema && schema->arguments().size() > 1 &&
                 schema->arguments()[1].name() == "dim";
  if (hasDims && !t.isNone(1))
    axes = t.intListArg(1);
  for (int64_t &d : axes)
    d = t.dim(d, rank);
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  int64_t keep = hasDims && t.numInputs() > 2 && t.boolArg(2) ? 1 : 0;
  int32_t type = t.typeOf(t.out());
  std::string x = t.operand(0, type);
  t.define(axesInput ? t.emit(op, {x, t.constInts(axes)}, {{"keepdims", keep}})
                     : t.emit(op, {x}, {{"axes", axes}, {"keepdims", keep}}));
}

std::vector<int64_t> pairs(Translator &t, size_t i, size_t spatial,
                           int64_t fallback) {
  std::vector<int64_t> values = t.numInputs() > i && !t.isNone(i)
                                    ? t.intListArg(i)
                                    : std::vector<int64_t>();
  if (values.empty())
    values.assign(spatial, fallback);
  if (values.size() == 1)
    values.assign(spatial, values[0]);
  if (values.size() != spatial)
    t.fail("expected " + std::to_string(spatial) + " values in input " +
           std::to_string(i));
  return values;
}

std::vector<int64_t> symmetricPads(const std::vector<int64_t> &padding) {
  std::vector<int64_t> pads = padding;
  pads.insert(pads.end(), padding.begin(), padding.end());
  return pads;
}

/// conv1d/2d/3d(input, weight, bias, stride, padding, dilation, groups),
/// and _convolution's first seven inputs.
void convolution(Translator &t) {
  size_t spatial = t.rankOf(t.in(0)) - 2;
  std::vector<int64_t> stride = pairs(t, 3, spatial, 1);
  std::vector<int64_t> dilation = pairs(t, 5, spatial, 1);
  std::vector<int64_t> pads;
  if (t.constant(4).isString()) {
    // padding="valid": none; "same": dilation * (kernel - 1) in all, the
    // odd one at the end, as torch pads (stride 1 only, torch checks).
    std::string mode = t.constant(4).toStringRef();
    std::vector<int64_t> kernel = t.sizesOf(t.in(1));
    pads.assign(2 * spatial, 0);
    if (mode == "same")
      for (size_t d = 0; d < spatial; ++d) {
        int64_t total = dilation[d] * (kernel[2 + d] - 1);
        pads[d] = total / 2;
        pads[spatial + d] = total - total / 2;
      }
    else if (mode != "valid")
      t.fail("padding '" + mode + "'; torch takes 'same' or 'valid'");
  } else {
    pads = symmetricPads(pairs(t, 4, spatial, 0));
  }
  int64_t groups;
  if (t.node->kind().toQualString() == std::string("aten::_convolution")) {
    if (t.boolArg(6))
      t.fail("transposed convolution is not supported");
    groups = t.intArg(8);
  } else {
    groups = t.intArg(6);
  }
  int32_t type = t.typeOf(t.out());
  std::vector<std::string> inputs = {t.operand(0, type), t.operand(1, type)};
  if (!t.isNone(2))
    inputs.push_back(t.operand(2, type));
  t.define(t.emit("Conv", inputs,
                  {{"strides", stride},
                   {"pads", pads},
                   {"dilations", dilation},
                   {"group", groups}}));
}

/// max_poolNd(input, kernel, stride, padding, dilation, ceil_mode) and
/// avg_poolNd(input, kernel, stride, padding, ceil_mode, count_include_pad,
/// divisor_override).
void pool(Translator &t, bool max) {
  size_t spatial = t.rankOf(t.in(0)) - 2;
  std::vector<int64_t> kernel = pairs(t, 1, spatial, 1);
  std::vector<int64_t> stride =
      t.numInputs() > 2 && !t.isNone(2) && !t.intListArg(2).empty()
          ? pairs(t, 2, spatial, 1)
          : kernel;
  std::vector<int64_t> padding = pairs(t, 3, spatial, 0);
  std::string x = t.operand(0);
  if (max) {
    std::vector<int64_t> dilation = pairs(t, 4, spatial, 1);
    int64_t ceil = t.numInputs() > 5 && t.boolArg(5) ? 1 : 0;
    t.define(t.emit("MaxPool", {x},
                    {{"kernel_shape", kernel},
                     {"strides", stride},
                     {"pads", symmetricPads(padding)},
                     {"dilations", dilation},
                     {"ceil_mode", ceil}}));
    return;
  }
  int64_t ceil = t.numInputs() > 4 && t.boolArg(4) ? 1 : 0;
  int64_t includePad = t.numInputs() > 5 && !t.boolArg(5) ? 0 : 1;
  if (t.numInputs() > 6 && !t.isNone(6))
    t.fail("avg_pool with divisor_override is not supported");
  t.define(t.emit("AveragePool", {x},
                  {{"kernel_shape", kernel},
                   {"strides", stride},
                   {"pads", symmetricPads(padding)},
                   {"ceil_mode", ceil},
                   {"count_include_pad", includePad}}));
}

} // namespace

void tp::torchscript::populateNNConverters(ConverterMap &m) {
  m["aten::linear"] = linear;
  m["aten::matmul"] = matmul;
  m["aten::mm"] = matmul;
  m["aten::bmm"] = matmul;
  m["aten::addmm"] = addProduct;
  m["aten::baddbmm"] = addProduct;
  m["aten::einsum"] = [](Translator &t) {
    std::string equation = t.constant(0).toStringRef();
    torch::jit::Node *list = t.in(1)->node();
    if (list->kind() != c10::prim::ListConstruct)
      t.fail("expected the operands as a list built in the graph");
    int32_t type = t.typeOf(t.out());
    std::vector<std::string> operands;
    for (torch::jit::Value *v : list->inputs())
      operands.push_back(t.cast(t.tensorName(v), t.typeOf(v), type));
    t.define(t.emit("Einsum", operands, {{"equation", equation.c_str()}}));
  };

  m["aten::layer_norm"] = [](Translator &t) {
    int32_t type = t.typeOf(t.out());
    std::vector<int64_t> shape = t.intListArg(1);
    std::vector<int64_t> sizes(shape);
    std::vector<std::string> inputs = {t.operand(0, type)};
    inputs.push_back(t.isNone(2) ? t.constTensor(at::ones(sizes, at::kFloat))
                                 : t.operand(2, type));
    if (!t.isNone(3))
      inputs.push_back(t.operand(3, type));
    t.define(t.emit("LayerNormalization", inputs,
                    {{"axis", -int64_t(shape.size())},
                     {"epsilon", float(t.doubleArg(4))}}));
  };
  m["aten::batch_norm"] = [](Translator &t) {
    // (input, weight, bias, running_mean, running_var, training, momentum,
    // eps, cudnn_enabled); loadGraph rejected training=True.
    if (t.isNone(3) || t.isNone(4))
      t.fail("batch_norm without running statistics is not supported");
    int32_t type = t.typeOf(t.out());
    int64_t channels = t.sizesOf(t.in(0)).at(1);
    auto orFill = [&](size_t i, double value) {
      return t.isNone(i) ? t.cast(t.constTensor(at::full({channels}, value)),
                                  onnx::TensorProto::FLOAT, type)
                         : t.operand(i, type);
    };
    t.define(t.emit("BatchNormalization",
                    {t.operand(0, type), orFill(1, 1.0), orFill(2, 0.0),
                     t.operand(3, type), t.operand(4, type)},
                    {{"epsilon", float(t.doubleArg(7))}}));
  };

  auto softmax = [](const char *op) {
    return [op](Translator &t) {
      int32_t type = t.typeOf(t.out());
      int64_t axis = t.dim(t.intArg(1), t.rankOf(t.in(0)));
      t.define(t.emit(op, {t.operand(0, type)}, {{"axis", axis}}));
    };
  };
  m["aten::softmax"] = softmax("Softmax");
  m["aten::_softmax"] = softmax("Softmax");
  m["aten::log_softmax"] = softmax("LogSoftmax");

  m["aten::mean"] = [](Translator &t) { reduce(t, "ReduceMean", false); };
  m["aten::sum"] = [](Translator &t) { reduce(t, "ReduceSum", true); };
  m["aten::amax"] = [](Translator &t) { reduce(t, "ReduceMax", false); };
  m["aten::amin"] = [](Translator &t) { reduce(t, "ReduceMin", false); };

  // F.unfold: [B, C, H, W] -> [B, C * kh * kw, L], the window at each of
  // the L output positions, channel-major (c * kh * kw + i * kw + j): the
  // padded input sliced once per kernel offset, stacked after the channels.
  m["aten::im2col"] = [](Translator &t) {
    std::vector<int64_t> sizes = t.sizesOf(t.in(0));
    std::vector<int64_t> kernel = t.intListArg(1), dilation = t.intListArg(2),
                         padding = t.intListArg(3), stride = t.intListArg(4);
    if (sizes.size() != 4 || kernel.size() != 2 || dilation.size() != 2 ||
        padding.size() != 2 || stride.size() != 2)
      t.fail("im2col of a tensor of rank " + std::to_string(sizes.size()) +
             " (only [batch, channels, height, width] with 2-D windows)");
    int32_t type = t.typeOf(t.out());
    std::string x = t.emit("Pad", {t.operand(0, type),
                                   t.constInts({0, 0, padding[0], padding[1], 0,
                                                0, padding[0], padding[1]}),
                                   t.constScalar(0, type)});
    int64_t out[2];
    for (int d = 0; d < 2; ++d)
      out[d] =
          (sizes[2 + d] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) /
              stride[d] +
          1;
    if (out[0] < 1 || out[1] < 1)
      t.fail("im2col window larger than its padded input");
    std::vector<std::string> windows;
    for (int64_t i = 0; i < kernel[0]; ++i)
      for (int64_t j = 0; j < kernel[1]; ++j) {
        int64_t h = i * dilation[0], w = j * dilation[1];
        std::string window =
            t.emit("Slice", {x, t.constInts({h, w}),
                             t.constInts({h + (out[0] - 1) * stride[0] + 1,
                                          w + (out[1] - 1) * stride[1] + 1}),
                             t.constInts({2, 3}), t.constInts(stride)});
        windows.push_back(t.emit(
            "Reshape",
            {window, t.constInts({sizes[0], sizes[1], 1, out[0], out[1]})}));
      }
    std::string stacked = windows.size() == 1
                              ? windows.front()
                              : t.emit("Concat", windows, {{"axis", 2}});
    t.define(t.emit(
        "Reshape",
        {stacked, t.constInts({sizes[0], sizes[1] * kernel[0] * kernel[1],
                               out[0] * out[1]})}));
  };
  m["aten::conv1d"] = convolution;
  m["aten::conv2d"] = convolution;
  m["aten::conv3d"] = convolution;
  m["aten::_convolution"] = convolution;
  // A trace records string padding ("same", "valid") as this one.
  m["aten::_convolution_mode"] = convolution;
  m["aten::max_pool1d"] = [](Translator &t) { pool(t, true); };
  m["aten::max_pool2d"] = [](Translator &t) { pool(t, true); };
  m["aten::avg_pool1d"] = [](Translator &t) { pool(t, false); };
  m["aten::avg_pool2d"] = [](Translator &t) { pool(t, false); };
  m["aten::adaptive_avg_pool2d"] = [](Translator &t) {
    std::vector<int64_t> in = t.sizesOf(t.in(0));
    std::vector<int64_t> out = t.sizesOf(t.out());
    if (out[2] == 1 && out[3] == 1) {
      t.define(t.emit("GlobalAveragePool", {t.operand(0)}));
      return;
    }
    if (in[2] % out[2] || in[3] % out[3])
      t.fail("adaptive pooling to a size that does not divide the input's");
    std::vector<int64_t> kernel = {in[2] / out[2], in[3] / out[3]};
    t.define(t.emit("AveragePool", {t.operand(0)},
                    {{"kernel_shape", kernel}, {"strides", kernel}}));
  };
}
