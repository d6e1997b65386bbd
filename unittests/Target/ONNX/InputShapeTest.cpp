//===- InputShapeTest.cpp - parsing --input-shape -------------------------===//

#include "tp/Target/ONNX/ImportONNX.h"

#include "gtest/gtest.h"

using namespace mlir::tp;

TEST(InputShape, ParsesDims) {
  ONNXImportOptions options;
  std::string error;
  ASSERT_TRUE(parseInputShape("input_ids=2x128", options, error)) << error;
  ASSERT_TRUE(parseInputShape("scale=", options, error)) << error;
  EXPECT_EQ(options.inputShapes.lookup("input_ids"),
            (llvm::SmallVector<int64_t>{2, 128}));
  EXPECT_TRUE(options.inputShapes.lookup("scale").empty());
  EXPECT_TRUE(options.inputShapes.count("scale"));
}

TEST(InputShape, NameMayContainEquals) {
  ONNXImportOptions options;
  std::string error;
  ASSERT_TRUE(parseInputShape("a=b=3", options, error)) << error;
  EXPECT_EQ(options.inputShapes.lookup("a=b"), (llvm::SmallVector<int64_t>{3}));
}

TEST(InputShape, RejectsBadText) {
  ONNXImportOptions options;
  std::string error;
  EXPECT_FALSE(parseInputShape("input_ids", options, error));
  EXPECT_NE(error.find("name=DIMS"), std::string::npos);
  EXPECT_FALSE(parseInputShape("x=2xN", options, error));
  EXPECT_NE(error.find("bad dim 'N'"), std::string::npos);
  EXPECT_FALSE(parseInputShape("x=-1x4", options, error));
  EXPECT_FALSE(parseInputShape("=4", options, error));
}
