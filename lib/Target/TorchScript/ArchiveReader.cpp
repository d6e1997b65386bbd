//===- ArchiveReader.cpp - torch::jit::load without reading the weights ---===//
//
// torch::jit::load reads every tensor record of an archive into memory:
// the whole model, before anything is known about it. The importer needs
// the module's code, its state's structure and every tensor's type, but no
// weight value (ArchiveState maps the file for the bytes the translation
// needs, and the artifact writer streams the records itself). So the
// loader reads the archive through this adapter, which reads every byte
// but those of the records ArchiveState marks unread: a stored record is
// one read at its data offset, into a buffer libtorch has just allocated;
// left unwritten, its pages are never touched, cost no memory, and read as
// zeros (or whatever the allocator left there). libtorch 1.13's zip reader
// checks no CRC of what it extracts.
//
//===----------------------------------------------------------------------===//

#include "TorchScriptGraph.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

using namespace tp::torchscript;

namespace {

class ArchiveReader final : public caffe2::serialize::ReadAdapterInterface {
public:
  ArchiveReader(const std::string &path, std::unordered_set<uint64_t> unread)
      : unread(std::move(unread)) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0)
      throw ConvertError("cannot open '" + path + "': " + std::strerror(errno));
    bytes = static_cast<size_t>(st.st_size);
  }
  ~ArchiveReader() override { ::close(fd); }

  size_t size() const override { return bytes; }

  size_t read(uint64_t pos, void *buf, size_t n,
              const char *what) const override {
    if (unread.count(pos))
      return std::min<uint64_t>(n, bytes - std::min<uint64_t>(pos, bytes));
    size_t done = 0;
    while (done < n) {
      ssize_t got = ::pread(fd, static_cast<char *>(buf) + done, n - done,
                            static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

private:
  int fd = -1;
  size_t bytes = 0;
  std::unordered_set<uint64_t> unread;
};

} // namespace

std::shared_ptr<caffe2::serialize::ReadAdapterInterface>
tp::torchscript::makeArchiveReader(const std::string &path,
                                   const std::unordered_set<uint64_t> &unread) {
  return std::make_shared<ArchiveReader>(path, unread);
}
