//===- ArchiveLocations.cpp - where each weight lies in a .pt file --------===//
//
// A TorchScript archive is a zip whose tensor records (data/<key>) are
// stored uncompressed and 64-byte aligned; shapes, strides and dtypes live
// only in the pickled module state (data.pkl). We unpickle that state with
// every storage pointing into a read-only mapping of the file, so that a
// tensor's data pointer minus the mapping's base is its file offset, and
// no tensor byte is read.
//
//===----------------------------------------------------------------------===//

#include "TorchScriptGraph.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

using namespace tp::torchscript;

namespace {

/// A read-only mapping of a whole file, unmapped on destruction.
class Mapping {
public:
  explicit Mapping(const std::string &path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0)
      throw ConvertError("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      size = static_cast<size_t>(st.st_size);
      void *p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      base = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
    }
    ::close(fd);
    if (!base)
      throw ConvertError("cannot map '" + path + "'");
  }
  ~Mapping() { ::munmap(base, size); }
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;

  char *base = nullptr;
  size_t size = 0;
};

void collect(const std::string &prefix, const c10::IValue &value,
             const Mapping &file,
             std::unordered_map<std::string, ArchiveLocation> &out) {
  auto join = [&](const std::string &name) {
    return prefix.empty() ? name : prefix + "." + name;
  };
  if (value.isTensor()) {
    const at::Tensor &t = value.toTensor();
    if (!t.is_contiguous() || !t.has_storage())
      return;
    auto *data = static_cast<const char *>(t.data_ptr());
    if (data < file.base || data >= file.base + file.size)
      return;
    ArchiveLocation location;
    location.offset = static_cast<uint64_t>(data - file.base);
    location.bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (location.offset + location.bytes <= file.size)
      out[prefix] = location;
    return;
  }
  if (value.isObject()) {
    auto object = value.toObject();
    c10::ClassTypePtr type = object->type();
    for (size_t i = 0; i < type->numAttributes(); ++i)
      collect(join(type->getAttributeName(i)), object->getSlot(i), file, out);
  }
}

} // namespace

std::unordered_map<std::string, ArchiveLocation>
tp::torchscript::readArchiveLocations(const std::string &path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  Mapping file(path);

  auto [pickle, pickleSize] = reader.getRecord("data.pkl");
  size_t position = 0;
  auto read = [&, &pickle = pickle, pickleSize = pickleSize](char *buffer,
                                                              size_t n) {
    n = std::min(n, pickleSize - position);
    std::memcpy(buffer, static_cast<char *>(pickle.get()) + position, n);
    position += n;
    return n;
  };
  // Classes resolve to empty types that gain an attribute per state key:
  // only the state is wanted, not the code.
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  auto resolveType = [&](const c10::QualifiedName &name) {
    c10::ClassTypePtr type = unit->get_class(name);
    if (!type) {
      type = c10::ClassType::create(name, unit);
      unit->register_type(type);
    }
    return c10::StrongTypePtr(unit, type);
  };
  auto loadObject = [](const c10::StrongTypePtr &typePtr, c10::IValue state) {
    auto type = typePtr.type_->expect<c10::ClassType>();
    auto object = c10::ivalue::Object::create(typePtr, type->numAttributes());
    if (!state.isGenericDict())
      return object;
    for (const auto &entry : state.toGenericDict()) {
      if (!entry.key().isString())
        continue;
      const std::string &name = entry.key().toStringRef();
      if (!type->hasAttribute(name))
        type->addAttribute(name, entry.value().type());
      object->setAttr(name, entry.value());
    }
    return object;
  };
  auto readRecord = [&](const std::string &key) -> at::DataPtr {
    std::string record = "data/" + key;
    // A non-owning pointer into the mapping.
    return at::DataPtr(file.base + reader.getRecordOffset(record), at::kCPU);
  };
  torch::jit::Unpickler unpickler(read, resolveType, loadObject, readRecord,
                                  at::Device(at::kCPU));
  std::unordered_map<std::string, ArchiveLocation> locations;
  collect("", unpickler.parse_ivalue(), file, locations);
  return locations;
}
