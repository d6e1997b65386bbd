//===- NpyTest.cpp - reading and writing .npy files -----------------------===//

#include "tp/Runtime/Npy.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

using namespace tp::rt;

namespace {

/// A file in the test's temporary directory, removed afterwards.
class NpyFile : public ::testing::Test {
protected:
  void SetUp() override {
    const ::testing::TestInfo *info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    path = ::testing::TempDir() + "tp-npy-" + info->name() + "-" +
           std::to_string(getpid()) + ".npy";
  }
  void TearDown() override { std::remove(path.c_str()); }

  void writeBytes(const std::string &bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), bytes.size());
  }
  std::string readBytes() {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  /// The message of the Error readNpy throws, or "" if it does not throw.
  std::string readError() {
    try {
      readNpy(path);
    } catch (const Error &error) {
      return error.what();
    }
    return "";
  }

  std::string path;
};

/// A hand-made .npy file: magic, version, length (2 or 4 bytes) and header.
std::string npyBytes(int major, const std::string &header,
                     const std::string &data) {
  std::string bytes = "\x93NUMPY";
  bytes += static_cast<char>(major);
  bytes += '\0';
  size_t length = header.size();
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i)
    bytes += static_cast<char>((length >> (8 * i)) & 0xff);
  return bytes + header + data;
}

TEST_F(NpyFile, RoundTripMatchesNumPysLayout) {
  NpyArray array;
  array.descr = "<f4";
  array.shape = {2, 3};
  float values[6] = {0.5f, -1, 2, 3.25f, 4, 1e30f};
  array.data.assign(reinterpret_cast<char *>(values),
                    reinterpret_cast<char *>(values) + sizeof values);
  writeNpy(path, array);

  std::string bytes = readBytes();
  std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(bytes.size(), 128u + sizeof values);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]) | bytes[9] << 8, 118);
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);
  EXPECT_EQ(bytes.substr(10 + dict.size(), 118 - dict.size() - 1),
            std::string(118 - dict.size() - 1, ' '));
  EXPECT_EQ(bytes[127], '\n');

  NpyArray read = readNpy(path);
  EXPECT_EQ(read.descr, "<f4");
  EXPECT_EQ(read.shape, array.shape);
  EXPECT_EQ(read.data, array.data);
  EXPECT_EQ(read.elementCount(), 6);
}

TEST_F(NpyFile, RoundTripEveryTypeAndRank) {
  const DType types[] = {DType::F32, DType::F64, DType::I64, DType::I32,
                         DType::I16, DType::I8,  DType::U8,  DType::Bool};
  const std::vector<int64_t> shapes[] = {{}, {5}, {2, 0, 3}, {1, 2, 3, 2}};
  for (DType type : types)
    for (const std::vector<int64_t> &shape : shapes) {
      NpyArray array;
      array.descr = descrFromDType(type);
      array.shape = shape;
      array.data.resize(array.elementCount() * dtypeBytes(type));
      for (size_t i = 0; i < array.data.size(); ++i)
        array.data[i] = static_cast<char>(type == DType::Bool ? i % 2 : i);
      writeNpy(path, array);
      EXPECT_EQ(readBytes().find(std::string("\n")) % 64, 63u);
      NpyArray read = readNpy(path);
      EXPECT_EQ(read.descr, array.descr);
      EXPECT_EQ(read.shape, shape);
      EXPECT_EQ(read.data, array.data);
    }
}

TEST(Npy, Descriptors) {
  const std::pair<const char *, DType> table[] = {
      {"<f4", DType::F32}, {"<f8", DType::F64},  {"<i8", DType::I64},
      {"<i4", DType::I32}, {"<i2", DType::I16},  {"|i1", DType::I8},
      {"|u1", DType::U8},  {"|b1", DType::Bool}, {"<f2", DType::F16},
      {"<u2", DType::BF16}};
  for (const auto &[descr, type] : table) {
    bool ok = false;
    EXPECT_EQ(dtypeFromDescr(descr, ok), type) << descr;
    EXPECT_TRUE(ok) << descr;
    EXPECT_EQ(descrFromDType(type), descr);
  }
  for (const char *descr : {">f4", "<c16", "<c8", "|O", "<U10", "f4", ""}) {
    bool ok = true;
    dtypeFromDescr(descr, ok);
    EXPECT_FALSE(ok) << descr;
  }
}

TEST_F(NpyFile, ReadsVersion2AndDoubleQuotes) {
  int64_t values[2] = {7, -8};
  writeBytes(
      npyBytes(2,
               "{\"shape\": (2L,), \"fortran_order\": False, "
               "\"descr\": \"<i8\"}\n",
               std::string(reinterpret_cast<char *>(values), sizeof values)));
  NpyArray read = readNpy(path);
  EXPECT_EQ(read.descr, "<i8");
  EXPECT_EQ(read.shape, (std::vector<int64_t>{2}));
  int64_t back[2];
  ASSERT_EQ(read.data.size(), sizeof back);
  std::memcpy(back, read.data.data(), sizeof back);
  EXPECT_EQ(back[0], 7);
  EXPECT_EQ(back[1], -8);
}

TEST_F(NpyFile, TruncatedData) {
  NpyArray array;
  array.descr = "<f8";
  array.shape = {4};
  array.data.resize(32);
  writeNpy(path, array);
  std::string bytes = readBytes();
  writeBytes(bytes.substr(0, bytes.size() - 5));
  std::string error = readError();
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("truncated data"), std::string::npos) << error;
  EXPECT_NE(error.find("needs 32 bytes but the file has 27"), std::string::npos)
      << error;
}

TEST_F(NpyFile, TruncatedHeader) {
  std::string bytes = npyBytes(1, "{'descr': '<f4'}", "");
  writeBytes(bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(readError().find("truncated header"), std::string::npos);
}

TEST_F(NpyFile, NotNpy) {
  writeBytes("PK\x03\x04 this is a zip file");
  std::string error = readError();
  EXPECT_EQ(error, path + ": not a .npy file");
}

TEST_F(NpyFile, MissingFile) {
  std::string error = readError();
  EXPECT_NE(error.find(path + ": cannot open"), std::string::npos) << error;
}

TEST_F(NpyFile, FortranOrder) {
  writeBytes(npyBytes(
      1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }\n",
      std::string(8, '\0')));
  EXPECT_EQ(readError(), path + ": arrays in Fortran order are not supported");
}

TEST_F(NpyFile, UnsupportedDType) {
  writeBytes(
      npyBytes(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n",
               std::string(16, '\0')));
  EXPECT_EQ(readError(), path + ": unsupported dtype '<c8'");
}

TEST_F(NpyFile, MalformedHeader) {
  writeBytes(npyBytes(
      1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", ""));
  EXPECT_NE(readError().find("malformed header"), std::string::npos);
  writeBytes(npyBytes(1, "{'descr': '<f4', 'shape': (2,), }\n", ""));
  EXPECT_NE(readError().find("malformed header"), std::string::npos);
}

TEST_F(NpyFile, TrailingBytes) {
  writeBytes(npyBytes(
      1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }\n", "abc"));
  EXPECT_NE(readError().find("unexpected bytes after"), std::string::npos);
}

TEST(Npy, ParsesBytesInMemory) {
  int32_t values[3] = {1, -2, 3};
  std::string data(reinterpret_cast<char *>(values), sizeof values);
  std::string bytes = npyBytes(
      1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }\n", data);
  NpyArray array = parseNpy(bytes, "mem");
  EXPECT_EQ(array.descr, "<i4");
  EXPECT_EQ(array.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(std::string(array.data.begin(), array.data.end()), data);
  for (size_t size : {0, 5, 9, 20}) {
    try {
      parseNpy(std::string_view(bytes).substr(0, size), "mem");
      ADD_FAILURE() << "parseNpy accepted the first " << size << " bytes";
    } catch (const Error &error) {
      EXPECT_EQ(std::string(error.what()).rfind("mem: ", 0), 0u)
          << error.what();
    }
  }
}

TEST_F(NpyFile, WriteChecksTheData) {
  NpyArray array;
  array.descr = "<i4";
  array.shape = {3};
  array.data.resize(8);
  try {
    writeNpy(path, array);
    ADD_FAILURE() << "writeNpy accepted 8 bytes for 3 i32 values";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos);
  }
}

} // namespace
