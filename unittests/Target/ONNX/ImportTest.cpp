//===- ImportTest.cpp - the ONNX importer through its C++ API -------------===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::tp;

namespace {

struct ImportTest : ::testing::Test {
  ImportTest() {
    DialectRegistry registry;
    registerONNXImportDialects(registry);
    context.appendDialectRegistry(registry);
  }
  MLIRContext context;
};

constexpr const char *kLinear = R"(
<ir_version: 8, opset_import: ["" : 17]>
linear (float[N, 4] x) => (float[N, 3] y)
<float[4, 3] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0},
 float[3] b = {0.5, 0.25, 0.125}>
{
  h = MatMul(x, w)
  y = Add(h, b)
}
)";

TEST_F(ImportTest, WeightsBecomeTaggedArguments) {
  ONNXImportOptions options;
  options.inputShapes["x"] = {2, 4};
  auto module = importONNXBuffer(kLinear, "linear.onnxtxt", &context, options);
  ASSERT_TRUE(module);
  auto main = module->lookupSymbol<func::FuncOp>("main");
  ASSERT_TRUE(main);
  // x, then the weight and the bias: float tensors are never inlined.
  ASSERT_EQ(main.getNumArguments(), 3u);
  EXPECT_EQ(main.getArgAttrOfType<StringAttr>(0, TPDialect::kInputAttrName)
                .getValue(),
            "x");
  EXPECT_EQ(main.getArgAttrOfType<StringAttr>(1, TPDialect::kWeightAttrName)
                .getValue(),
            "w");
  EXPECT_EQ(main.getArgAttrOfType<StringAttr>(2, TPDialect::kWeightAttrName)
                .getValue(),
            "b");
  EXPECT_EQ(main.getResultAttrOfType<StringAttr>(0, TPDialect::kOutputAttrName)
                .getValue(),
            "y");
  auto resultType = cast<RankedTensorType>(main.getResultTypes()[0]);
  EXPECT_EQ(resultType.getShape(), (ArrayRef<int64_t>{2, 3}));
}

TEST_F(ImportTest, DynamicDimWithoutShapeIsAnError) {
  std::string messages;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    messages += diag.str() + "\n";
    return success();
  });
  auto module = importONNXBuffer(kLinear, "linear.onnxtxt", &context, {});
  EXPECT_FALSE(module);
  EXPECT_NE(messages.find("input 'x' has dynamic dim 0 ('N')"),
            std::string::npos)
      << messages;
}

TEST_F(ImportTest, CorruptBytesAreAnError) {
  std::string messages;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    messages += diag.str() + "\n";
    return success();
  });
  std::string bytes = "\x08\x07\x12\xff\xff\xff";
  auto module = importONNXBuffer(bytes, "broken.onnx", &context, {});
  EXPECT_FALSE(module);
  EXPECT_NE(messages.find("'broken.onnx' is not a valid ONNX model"),
            std::string::npos)
      << messages;
}

} // namespace
