//===- ArchiveState.cpp - a .pt file's tensors, mapped, not read ----------===//
//
// A TorchScript archive is a zip whose tensor records (data/<key>) are
// stored uncompressed and 64-byte aligned; shapes, strides and dtypes live
// only in the pickled module state (data.pkl). We unpickle that state with
// every storage pointing into a private mapping of the file, so that a
// tensor's data pointer minus the mapping's base is its file offset, and
// no tensor byte is read until something uses it.
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

/// A private mapping of a whole file, unmapped when the last tensor that
/// views it is gone. Writable copy-on-write, so that nothing written
/// through a tensor can reach the file or fault.
class Mapping {
public:
  explicit Mapping(const std::string &path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0)
      throw ConvertError("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      size = static_cast<size_t>(st.st_size);
      void *p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
                       0);
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

/// Floating-point records at least this large are left unread by
/// torch::jit::load (ArchiveReader): weights, whose values decide no type.
/// Smaller ones (a scale, rotary frequencies) and integer or boolean ones
/// (position ids, masks) are read, in case a value computed from them does.
constexpr uint64_t kUnreadRecordBytes = 1 << 20;

void collect(const std::string &prefix, const c10::IValue &value,
             const Mapping &file, ArchiveState &out) {
  auto join = [&](const std::string &name) {
    return prefix.empty() ? name : prefix + "." + name;
  };
  if (value.isTensor()) {
    const at::Tensor &t = value.toTensor();
    if (!t.has_storage())
      return;
    out.tensors[prefix] = t;
    auto *record = static_cast<const char *>(t.storage().data());
    if (record < file.base || record >= file.base + file.size)
      return;
    if (at::isFloatingType(t.scalar_type()) &&
        t.storage().nbytes() >= kUnreadRecordBytes)
      out.unreadRecords.insert(static_cast<uint64_t>(record - file.base));
    if (!t.is_contiguous())
      return;
    auto *data = static_cast<const char *>(t.data_ptr());
    ArchiveLocation location;
    location.offset = static_cast<uint64_t>(data - file.base);
    location.bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (location.offset + location.bytes <= file.size)
      out.locations[prefix] = location;
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

ArchiveState tp::torchscript::readArchiveState(const std::string &path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  // A zip archive without it is not TorchScript (torch.save's format has
  // data.pkl too); libtorch's message says so, which the caller explains.
  reader.getRecordOffset("constants.pkl");
  auto file = std::make_shared<Mapping>(path);

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
    // A pointer into the mapping that keeps it mapped.
    return at::DataPtr(file->base + reader.getRecordOffset(record),
                       new std::shared_ptr<Mapping>(file),
                       [](void *owner) {
                         delete static_cast<std::shared_ptr<Mapping> *>(owner);
                       },
                       at::kCPU);
  };
  torch::jit::Unpickler unpickler(read, resolveType, loadObject, readRecord,
                                  at::Device(at::kCPU));
  unpickler.set_version(reader.version());
  ArchiveState state;
  collect("", unpickler.parse_ivalue(), *file, state);
  return state;
}
