//===- InitializerSource.cpp - bytes of one ONNX initializer --------------===//
//
// External data is read with pread at the requested offsets, so memory stays
// bounded by the caller's chunk; typed fields are converted element by
// element for the same reason. Assumes a little-endian host, as ONNX's
// raw_data and safetensors both are.
//
//===----------------------------------------------------------------------===//

#include "InitializerSource.h"

#include "../ONNX/ModelLoader.h"

#include "tp/Runtime/HalfFloat.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

using namespace mlir;
using namespace mlir::tp::artifact;

ElementKind mlir::tp::artifact::getElementKind(int32_t type) {
  switch (type) {
  case onnx::TensorProto::FLOAT:
    return {"F32", 4};
  case onnx::TensorProto::FLOAT16:
    return {"F16", 2};
  case onnx::TensorProto::BFLOAT16:
    return {"BF16", 2};
  case onnx::TensorProto::DOUBLE:
    return {"F64", 8};
  case onnx::TensorProto::INT8:
    return {"I8", 1};
  case onnx::TensorProto::UINT8:
    return {"U8", 1};
  case onnx::TensorProto::INT16:
    return {"I16", 2};
  case onnx::TensorProto::UINT16:
    return {"U16", 2};
  case onnx::TensorProto::INT32:
    return {"I32", 4};
  case onnx::TensorProto::UINT32:
    return {"U32", 4};
  case onnx::TensorProto::INT64:
    return {"I64", 8};
  case onnx::TensorProto::UINT64:
    return {"U64", 8};
  case onnx::TensorProto::BOOL:
    return {"BOOL", 1};
  default:
    return {};
  }
}

FailureOr<std::unique_ptr<InitializerSource>>
InitializerSource::open(const onnx::TensorProto &tensor, StringRef modelDir,
                        Location loc, ElementKind stored) {
  std::unique_ptr<InitializerSource> source(new InitializerSource(tensor));
  source->kind = getElementKind(tensor.data_type());
  if (!source->kind.bytes)
    return emitError(loc) << "initializer '" << tensor.name()
                          << "' has ONNX data type " << tensor.data_type()
                          << ", which a safetensors file cannot hold";
  if (stored.bytes && stored.safetensorsName != source->kind.safetensorsName) {
    if (source->kind.safetensorsName != "F32" ||
        (stored.safetensorsName != "F16" && stored.safetensorsName != "BF16"))
      return emitError(loc)
             << "initializer '" << tensor.name() << "' is "
             << source->kind.safetensorsName << " and cannot be stored as "
             << stored.safetensorsName;
    source->narrowTo = stored;
  }
  uint64_t elements = 1;
  for (int64_t dim : tensor.dims())
    elements *= static_cast<uint64_t>(dim);
  uint64_t sourceBytes = elements * source->kind.bytes;
  source->numBytes = elements * source->elementBytes();

  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    FailureOr<onnx_import::ExternalLocation> ext =
        onnx_import::checkExternalData(tensor, modelDir, sourceBytes, loc);
    if (failed(ext))
      return failure();
    SmallString<256> path(modelDir);
    llvm::sys::path::append(path, ext->file);
    source->externalPath = std::string(path);
    source->externalOffset = ext->offset;
    source->fd = ::open(source->externalPath.c_str(), O_RDONLY | O_CLOEXEC);
    if (source->fd < 0)
      return emitError(loc)
             << "cannot open external data file '" << path << "' of tensor '"
             << tensor.name() << "': " << std::strerror(errno);
    return source;
  }
  if (tensor.has_raw_data() && tensor.raw_data().size() != sourceBytes)
    return emitError(loc) << "initializer '" << tensor.name() << "' holds "
                          << tensor.raw_data().size()
                          << " bytes of raw data, but its shape needs "
                          << sourceBytes;
  return source;
}

InitializerSource::~InitializerSource() {
  if (fd >= 0)
    ::close(fd);
}

bool InitializerSource::read(uint64_t offset, uint64_t length, char *dst,
                             std::string &error) {
  if (!narrowTo.bytes)
    return readSource(offset, length, dst, error);
  // f32 to f16 or bf16, a block of floats at a time.
  constexpr uint64_t kBlock = 16384;
  float values[kBlock];
  bool bf16 = narrowTo.safetensorsName == "BF16";
  for (uint64_t first = offset / 2, end = (offset + length) / 2; first < end;
       first += kBlock) {
    uint64_t count = std::min(kBlock, end - first);
    if (!readSource(first * 4, count * 4, reinterpret_cast<char *>(values),
                    error))
      return false;
    for (uint64_t i = 0; i < count; ++i) {
      uint16_t bits = bf16 ? ::tp::rt::floatToBF16(values[i])
                           : ::tp::rt::floatToF16(values[i]);
      std::memcpy(dst, &bits, 2);
      dst += 2;
    }
  }
  return true;
}

bool InitializerSource::readSource(uint64_t offset, uint64_t length, char *dst,
                                   std::string &error) {
  if (fd >= 0) {
    while (length) {
      ssize_t got = ::pread(fd, dst, length, externalOffset + offset);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        error = "cannot read external data file '" + externalPath +
                "' of tensor '" + tensor.name() +
                "': " + (got < 0 ? std::strerror(errno) : "file too short");
        return false;
      }
      dst += got;
      offset += got;
      length -= got;
    }
    return true;
  }
  if (tensor.has_raw_data()) {
    std::memcpy(dst, tensor.raw_data().data() + offset, length);
    return true;
  }
  readTypedFields(offset / kind.bytes, length / kind.bytes, dst);
  return true;
}

/// Typed fields hold each element widened (ONNX's rules: float_data,
/// double_data, int64_data, uint64_data, and int32_data for every narrower
/// type, 16-bit floats as their bit pattern); narrow them back.
void InitializerSource::readTypedFields(uint64_t first, uint64_t count,
                                        char *dst) {
  auto put = [&](auto value) {
    std::memcpy(dst, &value, sizeof(value));
    dst += sizeof(value);
  };
  for (uint64_t i = first, e = first + count; i < e; ++i) {
    switch (tensor.data_type()) {
    case onnx::TensorProto::FLOAT:
      put(tensor.float_data(i));
      break;
    case onnx::TensorProto::DOUBLE:
      put(tensor.double_data(i));
      break;
    case onnx::TensorProto::INT64:
      put(tensor.int64_data(i));
      break;
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64:
      if (kind.bytes == 4)
        put(static_cast<uint32_t>(tensor.uint64_data(i)));
      else
        put(tensor.uint64_data(i));
      break;
    default: {
      int32_t v = tensor.int32_data(i);
      if (kind.bytes == 1)
        put(static_cast<uint8_t>(v));
      else if (kind.bytes == 2)
        put(static_cast<uint16_t>(v));
      else
        put(v);
    }
    }
  }
}
