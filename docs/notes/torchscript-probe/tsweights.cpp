// tsweights.cpp - list/inspect TorchScript weights WITHOUT torch::jit::load:
// PyTorchStreamReader for the zip index + torch::jit::Unpickler for
// data.pkl/constants.pkl, with tensor storages backed by an mmap of the .pt
// file (records are stored uncompressed, 64-byte aligned) -> zero-copy, pages
// are only touched when the data is read. Usage: tsweights FILE.pt
// [data|constants]
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/script.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <string>

static void walk(const std::string &prefix, const c10::IValue &v) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    std::cout << prefix << " : " << t.scalar_type() << " " << t.sizes()
              << " strides=" << t.strides()
              << " storage_offset=" << t.storage_offset()
              << " storage_nbytes=" << t.storage().nbytes()
              << " ptr=" << t.data_ptr() << "\n";
  } else if (v.isObject()) {
    auto obj = v.toObject();
    auto cls = obj->type();
    for (size_t i = 0; i < cls->numAttributes(); ++i)
      walk(prefix.empty() ? cls->getAttributeName(i)
                          : prefix + "." + cls->getAttributeName(i),
           obj->getSlot(i));
  } else if (v.isGenericDict()) {
    for (const auto &kv : v.toGenericDict())
      walk(prefix.empty() ? kv.key().toStringRef()
                          : prefix + "." + kv.key().toStringRef(),
           kv.value());
  } else if (v.isTuple()) {
    const auto &el = v.toTupleRef().elements();
    for (size_t i = 0; i < el.size(); ++i)
      walk(prefix + "[" + std::to_string(i) + "]", el[i]);
  } else if (v.isList()) {
    auto l = v.toListRef();
    for (size_t i = 0; i < l.size(); ++i)
      walk(prefix + "[" + std::to_string(i) + "]", l[i]);
  }
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  std::string path = argv[1];
  std::string which =
      argc > 2 ? argv[2] : "data"; // "data" (params) or "constants" (frozen)
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    int fd = open(path.c_str(), O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    char *base = static_cast<char *>(
        mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0));
    close(fd);

    auto rec = reader.getRecord(which + ".pkl"); // small; copy is fine
    at::DataPtr &pkl = std::get<0>(rec);
    size_t pklSize = std::get<1>(rec);
    size_t pos = 0;
    auto readFn = [&](char *buf, size_t n) {
      n = std::min(n, pklSize - pos);
      std::memcpy(buf, static_cast<char *>(pkl.get()) + pos, n);
      pos += n;
      return n;
    };
    auto cu = std::make_shared<torch::jit::CompilationUnit>();
    // Resolve `__torch__.Foo` GLOBALs to empty class types (we only want the
    // state).
    auto typeResolver = [&](const c10::QualifiedName &qn) {
      auto cls = cu->get_class(qn);
      if (!cls) {
        cls = c10::ClassType::create(qn, cu);
        cu->register_type(cls);
      }
      return c10::StrongTypePtr(cu, cls);
    };
    // BUILD(obj, state): state is a Dict[str, Any]; add each key as an
    // attribute.
    auto objLoader = [](const c10::StrongTypePtr &t, c10::IValue state) {
      auto cls = t.type_->expect<c10::ClassType>();
      auto obj = c10::ivalue::Object::create(t, cls->numAttributes());
      for (const auto &kv : state.toGenericDict()) {
        const std::string &name = kv.key().toStringRef();
        if (!cls->hasAttribute(name))
          cls->addAttribute(name, kv.value().type());
        obj->setAttr(name, kv.value());
      }
      return obj;
    };
    auto readRecord = [&](const std::string &key) -> at::DataPtr {
      std::string rec = which + "/" + key; // data/0, constants/3 ...
      size_t off = reader.getRecordOffset(rec);
      return at::DataPtr(base + off, at::kCPU); // non-owning view into the mmap
    };
    torch::jit::Unpickler up(readFn, typeResolver, objLoader, readRecord,
                             at::Device(at::kCPU));
    c10::IValue root = up.parse_ivalue();
    std::cout << "archive version " << reader.version() << ", root tag "
              << root.tagKind() << "\n";
    walk("", root);
    munmap(base, st.st_size); // tensors above must not outlive this
  } catch (const c10::Error &e) {
    std::cerr << "c10::Error: " << e.what_without_backtrace() << "\n";
    return 1;
  }
  return 0;
}
