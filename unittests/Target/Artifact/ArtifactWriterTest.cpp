//===- ArtifactWriterTest.cpp - rank files of weight pieces ---------------===//
//
// Layouts that no bundled model produces yet, written by hand: a padded
// piece of a fused weight, a padded vocabulary, replicated pieces. Each
// rank file must hold exactly its share, and tp-export-weights must rebuild
// the initializers bit-exactly.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Artifact/ArtifactWriter.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/Artifact/WeightExport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cstring>
#include <map>

using namespace mlir;

namespace {

/// The tensors of a safetensors file, as floats, by name.
std::map<std::string, std::vector<float>> readSafeTensors(StringRef path) {
  std::map<std::string, std::vector<float>> tensors;
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return tensors;
  StringRef bytes = (*buffer)->getBuffer();
  uint64_t headerBytes;
  std::memcpy(&headerBytes, bytes.data(), 8);
  auto header = llvm::json::parse(bytes.substr(8, headerBytes));
  if (!header)
    return tensors;
  const char *data = bytes.data() + 8 + headerBytes;
  for (const auto &[key, value] : *header->getAsObject()) {
    const llvm::json::Array *offsets =
        value.getAsObject() ? value.getAsObject()->getArray("data_offsets")
                            : nullptr;
    if (!offsets)
      continue;
    int64_t begin = *(*offsets)[0].getAsInteger();
    int64_t end = *(*offsets)[1].getAsInteger();
    std::vector<float> values((end - begin) / 4);
    std::memcpy(values.data(), data + begin, end - begin);
    tensors[key.str()] = std::move(values);
  }
  return tensors;
}

struct ArtifactWriterTest : ::testing::Test {
  ArtifactWriterTest() {
    context.loadDialect<func::FuncDialect, shard::ShardDialect,
                        mlir::tp::TPDialect>();
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("tp-artifact", dir));
  }
  ~ArtifactWriterTest() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(StringRef name) const {
    SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  MLIRContext context;
  SmallString<256> dir;
};

/// w[i][j] = 100 i + j + 1 (4 x 10), b[i] = i + 1 (5), r[i][j] = 10 i + j + 1
/// (3 x 3).
float w(int i, int j) { return 100 * i + j + 1; }
float b(int i) { return i + 1; }
float r(int i, int j) { return 10 * i + j + 1; }

TEST_F(ArtifactWriterTest, PiecesPaddingAndReplicas) {
  std::string model, values;
  llvm::raw_string_ostream os(model);
  auto list = [&](int rows, int cols, float (*f)(int, int)) {
    std::string text;
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        text += (text.empty() ? "" : ", ") + std::to_string(f(i, j));
    return text;
  };
  os << "<ir_version: 8, opset_import: [\"\" : 17]>\n"
     << "m (float[2, 4] x) => (float[2, 4] y)\n"
     << "<float[4, 10] w = {" << list(4, 10, w) << "},\n"
     << " float[5] b = {" << list(1, 5, [](int, int j) { return b(j); })
     << "},\n"
     << " float[3, 3] r = {" << list(3, 3, r) << "}>\n"
     << "{\n  y = Identity(x)\n}\n";
  {
    std::error_code ec;
    llvm::raw_fd_ostream file(path("model.onnxtxt"), ec);
    ASSERT_FALSE(ec);
    file << model;
  }
  // On 2 ranks: columns [0, 6) of w padded to 8 and split, columns [6, 10)
  // split, b padded to 6 and split, r as two replicated pieces of rows.
  std::string text = "module attributes {tp.model = \"" +
                     path("model.onnxtxt") + "\"} {\n" +
                     R"(
  shard.grid @grid(shape = 2)
  func.func @main(
      %x: tensor<2x4xf32> {tp.input = "x"},
      %w0: tensor<4x4xf32> {tp.weight = "w", tp.layout = #tp.layout<role = column, dim = 1, block = 0, slice = [0, 6], padded = [6, 8]>},
      %w1: tensor<4x2xf32> {tp.weight = "w", tp.layout = #tp.layout<role = column, dim = 1, block = 0, slice = [6, 4]>},
      %b: tensor<3xf32> {tp.weight = "b", tp.layout = #tp.layout<role = vocab, dim = 0, block = 1, padded = [5, 6]>},
      %r0: tensor<2x3xf32> {tp.weight = "r", tp.layout = #tp.layout<role = replicated, dim = 0, slice = [0, 2]>},
      %r1: tensor<1x3xf32> {tp.weight = "r", tp.layout = #tp.layout<role = replicated, dim = 0, slice = [2, 1]>})
      -> (tensor<2x4xf32> {tp.output = "y"}) {
    return %x : tensor<2x4xf32>
  }
}
)";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module);
  mlir::tp::ArtifactOptions options;
  options.progress = false;
  options.chunkBytes = 12; // less than a row: runs cross chunk boundaries
  ASSERT_TRUE(
      succeeded(mlir::tp::writeArtifact(*module, path("a.tpa"), options)));

  for (int t = 0; t < 2; ++t) {
    auto rank = readSafeTensors(
        path("a.tpa/rank-" + std::to_string(t) + ".safetensors"));
    std::vector<float> w0, w1, bt, r0, r1;
    for (int i = 0; i < 4; ++i) {
      for (int j = t * 4; j < t * 4 + 4; ++j)
        w0.push_back(j < 6 ? w(i, j) : 0.0f);
      for (int j = 6 + t * 2; j < 8 + t * 2; ++j)
        w1.push_back(w(i, j));
    }
    for (int i = t * 3; i < t * 3 + 3; ++i)
      bt.push_back(i < 5 ? b(i) : 0.0f);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        (i < 2 ? r0 : r1).push_back(r(i, j));
    EXPECT_EQ(rank["w[:, 0:6]"], w0) << "rank " << t;
    EXPECT_EQ(rank["w[:, 6:10]"], w1) << "rank " << t;
    EXPECT_EQ(rank["b"], bt) << "rank " << t;
    EXPECT_EQ(rank["r[0:2, :]"], r0) << "rank " << t;
    EXPECT_EQ(rank["r[2:3, :]"], r1) << "rank " << t;
  }

  std::string error;
  ASSERT_TRUE(mlir::tp::exportWeights(path("a.tpa"), path("full.safetensors"),
                                      /*progress=*/false, error))
      << error;
  auto full = readSafeTensors(path("full.safetensors"));
  std::vector<float> wAll, bAll, rAll;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 10; ++j)
      wAll.push_back(w(i, j));
  for (int i = 0; i < 5; ++i)
    bAll.push_back(b(i));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      rAll.push_back(r(i, j));
  EXPECT_EQ(full.size(), 3u);
  EXPECT_EQ(full["w"], wAll);
  EXPECT_EQ(full["b"], bAll);
  EXPECT_EQ(full["r"], rAll);
}

/// Writes a 4 x 10 initializer `w`, then an artifact for a module whose
/// one weight argument is `arg`; returns the diagnostic, empty on success.
std::string writeWith(ArtifactWriterTest &test, StringRef arg) {
  {
    std::error_code ec;
    llvm::raw_fd_ostream file(test.path("model.onnxtxt"), ec);
    file << "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         << "m (float[2, 4] x) => (float[2, 4] y)\n<float[4, 10] w = {";
    for (int i = 0; i < 40; ++i)
      file << (i ? ", " : "") << i;
    file << "}>\n{\n  y = Identity(x)\n}\n";
  }
  std::string text = "module attributes {tp.model = \"" +
                     test.path("model.onnxtxt") +
                     "\"} {\n  shard.grid @grid(shape = 2)\n"
                     "  func.func @main(%x: tensor<2x4xf32> {tp.input = "
                     "\"x\"}, " +
                     arg.str() + ") {\n    return\n  }\n}\n";
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(text, &test.context);
  if (!module)
    return "parse error";
  std::string message;
  ScopedDiagnosticHandler handler(&test.context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  mlir::tp::ArtifactOptions options;
  options.progress = false;
  if (succeeded(mlir::tp::writeArtifact(*module, test.path("a.tpa"), options)))
    return "";
  return message;
}

TEST_F(ArtifactWriterTest, PieceBeyondItsInitializer) {
  EXPECT_EQ(writeWith(*this, "%w: tensor<4x3xf32> {tp.weight = \"w\", "
                             "tp.layout = #tp.layout<role = column, dim = 1, "
                             "slice = [6, 6]>}"),
            "weight 'w[:, 6:12]' reaches past the 10 rows of dim 1 of its "
            "initializer");
}

TEST_F(ArtifactWriterTest, PaddingOfAnotherSize) {
  EXPECT_EQ(writeWith(*this, "%w: tensor<4x6xf32> {tp.weight = \"w\", "
                             "tp.layout = #tp.layout<role = column, dim = 1, "
                             "padded = [11, 12]>}"),
            "weight 'w' pads 11 rows but holds 10");
}

TEST_F(ArtifactWriterTest, ShapeTheLayoutDoesNotExplain) {
  // Split over 2 ranks, a piece of 6 columns is 3 per rank, not 2.
  EXPECT_EQ(writeWith(*this, "%w: tensor<4x2xf32> {tp.weight = \"w\", "
                             "tp.layout = #tp.layout<role = column, dim = 1, "
                             "slice = [0, 4]>}"),
            "");
  EXPECT_EQ(writeWith(*this, "%w: tensor<4x3xf32> {tp.weight = \"w\", "
                             "tp.layout = #tp.layout<role = column, dim = 1, "
                             "slice = [0, 3]>}"),
            "weight 'w[:, 0:3]' dim 1 is 3 per rank, but its initializer and "
            "tp.layout make it a 1/2 share of 3");
  EXPECT_EQ(writeWith(*this, "%w: tensor<4x5xf32> {tp.weight = \"w\"}"),
            "weight 'w' dim 1 is 5 per rank, but its initializer and "
            "tp.layout make it 10");
}

} // namespace
