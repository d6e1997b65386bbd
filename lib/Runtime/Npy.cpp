//===- Npy.cpp - reading and writing NumPy .npy files ---------------------===//
//
// A .npy file is the magic string "\x93NUMPY", a major and a minor version
// byte, the header's length (2 bytes little-endian in version 1, 4 bytes in
// versions 2 and 3), the header, which is a Python dict literal such as
//
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//
// padded with spaces and a newline, and then the raw data.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Npy.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace tp::rt;

namespace {

const char magic[] = "\x93NUMPY";
constexpr size_t magicSize = sizeof(magic) - 1;

[[noreturn]] void fail(const std::string &path, const std::string &what) {
  throw Error(path + ": " + what);
}

/// The system's reason for the last failed file operation.
std::string systemError() {
  return errno ? std::strerror(errno) : "unknown error";
}

/// Reads the dict literal of a .npy header, accepting what NumPy writes:
/// single- or double-quoted strings, True/False, tuples of integers.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &path)
      : text(text), path(path) {}

  /// Fills `array`'s descr and shape.
  void parse(NpyArray &array) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    bool fortranOrder = false;
    expect('{');
    while (!consume('}')) {
      std::string key = parseString();
      expect(':');
      if (key == "descr") {
        skipSpace();
        if (peek() != '\'' && peek() != '"')
          fail(path, "structured dtypes are not supported");
        array.descr = parseString();
        haveDescr = true;
      } else if (key == "fortran_order") {
        fortranOrder = parseBool();
        haveOrder = true;
      } else if (key == "shape") {
        array.shape = parseShape();
        haveShape = true;
      } else {
        malformed("unexpected key '" + key + "'");
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skipSpace();
    if (pos != text.size())
      malformed("unexpected text after the dict");
    if (!haveDescr || !haveOrder || !haveShape)
      malformed("it lacks one of 'descr', 'fortran_order' and 'shape'");
    if (fortranOrder)
      fail(path, "arrays in Fortran order are not supported");
  }

private:
  [[noreturn]] void malformed(const std::string &what) const {
    fail(path, "malformed header (" + what + "): " + text);
  }

  char peek() const { return pos < text.size() ? text[pos] : '\0'; }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool consume(char c) {
    skipSpace();
    if (peek() != c)
      return false;
    ++pos;
    return true;
  }

  void expect(char c) {
    if (!consume(c))
      malformed(std::string("expected '") + c + "' at offset " +
                std::to_string(pos));
  }

  std::string parseString() {
    skipSpace();
    char quote = peek();
    if (quote != '\'' && quote != '"')
      malformed("expected a string at offset " + std::to_string(pos));
    size_t end = text.find(quote, pos + 1);
    if (end == std::string::npos)
      malformed("unterminated string");
    std::string value = text.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    return value;
  }

  bool parseBool() {
    skipSpace();
    for (const char *word : {"True", "False"}) {
      size_t length = std::strlen(word);
      if (text.compare(pos, length, word) == 0) {
        pos += length;
        return word[0] == 'T';
      }
    }
    malformed("expected True or False at offset " + std::to_string(pos));
  }

  int64_t parseDim() {
    skipSpace();
    if (peek() < '0' || peek() > '9')
      malformed("expected a dimension at offset " + std::to_string(pos));
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      int digit = text[pos++] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10)
        malformed("dimension too large");
      value = value * 10 + digit;
    }
    // Python 2 wrote long integers as 3L.
    if (peek() == 'L')
      ++pos;
    return value;
  }

  std::vector<int64_t> parseShape() {
    std::vector<int64_t> shape;
    expect('(');
    while (!consume(')')) {
      shape.push_back(parseDim());
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  const std::string &text;
  const std::string &path;
  size_t pos = 0;
};

/// Bytes of `array`'s data according to its type and shape; throws when the
/// type is unsupported or the size overflows.
int64_t expectedBytes(const NpyArray &array, const std::string &path) {
  bool ok = false;
  DType type = dtypeFromDescr(array.descr, ok);
  if (!ok)
    fail(path, "unsupported dtype '" + array.descr + "'");
  int64_t bytes = dtypeBytes(type);
  for (int64_t dim : array.shape) {
    if (dim < 0)
      fail(path, "negative dimension " + std::to_string(dim));
    if (dim && bytes > std::numeric_limits<int64_t>::max() / dim)
      fail(path, "shape too large");
    bytes *= dim;
  }
  return bytes;
}

} // namespace

DType tp::rt::dtypeFromDescr(const std::string &descr, bool &ok) {
  ok = descr.size() == 3;
  if (!ok)
    return DType::F32;
  char order = descr[0];
  std::string code = descr.substr(1);
  if (order == '<') {
    if (code == "f4")
      return DType::F32;
    if (code == "f8")
      return DType::F64;
    if (code == "i8")
      return DType::I64;
    if (code == "i4")
      return DType::I32;
    if (code == "i2")
      return DType::I16;
    if (code == "f2")
      return DType::F16;
    if (code == "u2")
      return DType::BF16;
  }
  // One-byte types have no byte order; NumPy writes '|'.
  if (order == '|' || order == '<') {
    if (code == "i1")
      return DType::I8;
    if (code == "u1")
      return DType::U8;
    if (code == "b1")
      return DType::Bool;
  }
  ok = false;
  return DType::F32;
}

std::string tp::rt::descrFromDType(DType type) {
  switch (type) {
  case DType::F32:
    return "<f4";
  case DType::F64:
    return "<f8";
  case DType::I64:
    return "<i8";
  case DType::I32:
    return "<i4";
  case DType::I16:
    return "<i2";
  case DType::I8:
    return "|i1";
  case DType::U8:
    return "|u1";
  case DType::Bool:
    return "|b1";
  case DType::F16:
    return "<f2";
  case DType::BF16:
    return "<u2";
  }
  return "<f4";
}

NpyArray tp::rt::parseNpy(std::string_view bytes, const std::string &name) {
  if (bytes.size() < magicSize + 2 || bytes.compare(0, magicSize, magic) != 0)
    fail(name, "not a .npy file");
  auto byteAt = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  unsigned major = byteAt(magicSize), minor = byteAt(magicSize + 1);
  if (major < 1 || major > 3)
    fail(name, "unsupported .npy format version " + std::to_string(major) +
                   "." + std::to_string(minor));
  size_t lengthSize = major == 1 ? 2 : 4;
  size_t headerStart = magicSize + 2 + lengthSize;
  if (bytes.size() < headerStart)
    fail(name, "truncated header");
  uint32_t headerLength = 0;
  for (size_t i = lengthSize; i-- > 0;)
    headerLength = headerLength << 8 | byteAt(magicSize + 2 + i);
  // Sizes come from the bytes: check them against what is there before
  // allocating anything they ask for.
  uint64_t remaining = bytes.size() - headerStart;
  if (headerLength > remaining)
    fail(name, "truncated header: it claims " + std::to_string(headerLength) +
                   " bytes but the file has " + std::to_string(remaining) +
                   " after the prefix");
  remaining -= headerLength;
  std::string header(bytes.substr(headerStart, headerLength));

  NpyArray array;
  HeaderParser(header, name).parse(array);
  int64_t dataBytes = expectedBytes(array, name);
  if (static_cast<uint64_t>(dataBytes) > remaining)
    fail(name, "truncated data: the shape needs " + std::to_string(dataBytes) +
                   " bytes but the file has " + std::to_string(remaining));
  if (static_cast<uint64_t>(dataBytes) < remaining)
    fail(name, "unexpected bytes after the " + std::to_string(dataBytes) +
                   " bytes of data");
  std::string_view data = bytes.substr(headerStart + headerLength);
  array.data.assign(data.begin(), data.end());
  return array;
}

NpyArray tp::rt::readNpy(const std::string &path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(path, "cannot open: " + systemError());
  // The file's own size bounds what is read, whatever its header claims.
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  in.seekg(0);
  if (size < 0)
    fail(path, "cannot read: " + systemError());
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  if (in.gcount() != size)
    fail(path, "cannot read: " + systemError());
  return parseNpy(bytes, path);
}

void tp::rt::writeNpy(const std::string &path, const NpyArray &array) {
  int64_t bytes = expectedBytes(array, path);
  if (bytes != static_cast<int64_t>(array.data.size()))
    fail(path, "cannot write " + std::to_string(array.data.size()) +
                   " bytes of data as an array that needs " +
                   std::to_string(bytes));

  std::string header =
      "{'descr': '" + array.descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    if (i)
      header += ", ";
    header += std::to_string(array.shape[i]);
  }
  if (array.shape.size() == 1)
    header += ",";
  header += "), }";

  // Spaces and a newline up to the next multiple of 64, counting the
  // prefix: magic, two version bytes and the header's length, which takes 2
  // bytes in version 1.0 and 4 in version 2.0.
  auto paddedSize = [&](size_t prefixSize) {
    size_t total = prefixSize + header.size() + 1;
    return header.size() + 1 + (64 - total % 64) % 64;
  };
  bool version1 = paddedSize(magicSize + 4) <= 65535;
  size_t prefixSize = magicSize + (version1 ? 4 : 6);
  size_t length = paddedSize(prefixSize);
  header.append(length - header.size() - 1, ' ');
  header += '\n';

  std::string prefix(magic, magicSize);
  prefix += static_cast<char>(version1 ? 1 : 2);
  prefix += '\0';
  for (size_t i = 0; i < prefixSize - magicSize - 2; ++i)
    prefix += static_cast<char>((length >> (8 * i)) & 0xff);

  // Written to a fresh file beside `path` and renamed over it: a failed
  // write never leaves a truncated file in place of a good one, and a
  // symlink at `path` is replaced, not followed.
  static std::atomic<unsigned> counter{0};
  std::string temp = path + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter++);
  errno = 0;
  int fd = ::open(temp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(path, "cannot create: " + systemError());
  auto writeAll = [&](const char *p, size_t n) {
    while (n) {
      ssize_t done = ::write(fd, p, n);
      if (done < 0 && errno == EINTR)
        continue;
      if (done <= 0)
        return false;
      p += done;
      n -= static_cast<size_t>(done);
    }
    return true;
  };
  bool ok = writeAll(prefix.data(), prefix.size()) &&
            writeAll(header.data(), header.size()) &&
            writeAll(array.data.data(), array.data.size());
  std::string error = ok ? "" : systemError();
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = systemError();
  }
  if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
    ok = false;
    error = systemError();
  }
  if (!ok) {
    ::unlink(temp.c_str());
    fail(path, "cannot write: " + error);
  }
}
