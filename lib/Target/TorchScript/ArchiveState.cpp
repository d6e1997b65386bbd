//===- ArchiveState.cpp - a .pt file's tensors, mapped, not read ----------===//
//
// A TorchScript archive is a zip whose tensor records (data/<key>) are
// stored uncompressed and 64-byte aligned; shapes, strides and dtypes live
// only in the pickled module state (data.pkl). We unpickle that state with
// every storage pointing into a private mapping of the file, so that a
// tensor's data pointer minus the mapping's base is its file offset, and
// no tensor byte is read until something uses it. The example inputs'
// dtypes, where a trace stored them, are read the same way.
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
#include <functional>

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
      void *p =
          ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
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

/// Unpickles archive record `name` ("data.pkl"), each tensor's storage
/// from `readRecord`. Classes resolve to empty types that gain an
/// attribute per state key: only the state is wanted, not the code.
/// `parseTag`, if given, resolves the names that it knows first.
c10::IValue
unpickle(caffe2::serialize::PyTorchStreamReader &reader,
         const std::string &name,
         const std::function<at::DataPtr(const std::string &)> &readRecord,
         c10::TypePtr (*parseTag)(const std::string &) = nullptr) {
  auto [pickle, pickleSize] = reader.getRecord(name);
  size_t position = 0;
  auto read = [&, &pickle = pickle, pickleSize = pickleSize](char *buffer,
                                                             size_t n) {
    n = std::min(n, pickleSize - position);
    std::memcpy(buffer, static_cast<char *>(pickle.get()) + position, n);
    position += n;
    return n;
  };
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  auto resolveType = [&](const c10::QualifiedName &name) {
    if (parseTag)
      if (c10::TypePtr tag = parseTag(name.qualifiedName()))
        return c10::StrongTypePtr(unit, tag);
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
  torch::jit::Unpickler unpickler(read, resolveType, loadObject, readRecord,
                                  at::Device(at::kCPU));
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

/// The type of a container's tag in traced_inputs.pkl, "Dict[str,
/// List[Any]]" and "List[Any]", which the unpickler asks the class
/// resolver for; only the kind of container matters here.
c10::TypePtr parseContainerTag(const std::string &text) {
  if (text.rfind("Dict[", 0) == 0)
    return c10::DictType::create(c10::StringType::get(), c10::AnyType::get());
  if (text.rfind("List[", 0) == 0)
    return c10::ListType::create(c10::AnyType::get());
  return nullptr;
}

/// The dtypes of the example inputs forward() was traced with. PyTorch 2.0
/// and later store them (torch.jit.trace's _store_inputs, on by default)
/// as traced_inputs.pkl, {method: [inputs]}, each tensor without its data
/// (empty records); earlier traces and scripted modules have none. A
/// record that is not that says nothing, as if absent.
std::vector<c10::ScalarType>
readTracedInputTypes(caffe2::serialize::PyTorchStreamReader &reader) {
  if (!reader.hasRecord("traced_inputs.pkl"))
    return {};
  std::vector<c10::ScalarType> types;
  try {
    // The storages stay empty: only dtypes are read, never data.
    c10::IValue traced = unpickle(
        reader, "traced_inputs.pkl",
        [](const std::string &) { return at::DataPtr(nullptr, at::kCPU); },
        parseContainerTag);
    if (!traced.isGenericDict())
      return {};
    for (const auto &entry : traced.toGenericDict()) {
      if (!entry.key().isString() || entry.key().toStringRef() != "forward" ||
          !entry.value().isList())
        continue;
      for (const c10::IValue &input : entry.value().toListRef()) {
        if (!input.isTensor())
          return {};
        types.push_back(input.toTensor().scalar_type());
      }
    }
  } catch (const c10::Error &) {
    return {};
  }
  return types;
}

} // namespace

ArchiveState tp::torchscript::readArchiveState(const std::string &path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  // A zip archive without it is not TorchScript (torch.save's format has
  // data.pkl too); libtorch's message says so, which the caller explains.
  reader.getRecordOffset("constants.pkl");
  auto file = std::make_shared<Mapping>(path);

  auto readRecord = [&](const std::string &key) -> at::DataPtr {
    std::string record = "data/" + key;
    // A pointer into the mapping that keeps it mapped.
    return at::DataPtr(
        file->base + reader.getRecordOffset(record),
        new std::shared_ptr<Mapping>(file),
        [](void *owner) {
          delete static_cast<std::shared_ptr<Mapping> *>(owner);
        },
        at::kCPU);
  };
  ArchiveState state;
  collect("", unpickle(reader, "data.pkl", readRecord), *file, state);
  state.tracedInputTypes = readTracedInputTypes(reader);
  return state;
}
