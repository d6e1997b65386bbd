//===- ModelLibrary.h - a model library, seen from the host -----*- C++ -*-===//
//
// The runtime's side of the C ABI (tp_model_abi.h) that every model library
// exports, --target cpu and cuda alike: the entry points found through
// tp_model_query, failures turned into tp::rt::Error, and the host's
// collectives (a RankContext: threads or MPI) offered to a CPU library as a
// tp_host_comm.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_MODELLIBRARY_H
#define TP_RUNTIME_MODELLIBRARY_H

#include "tp/Runtime/RankContext.h"

#include <memory>
#include <string>
#include <vector>

namespace tp::rt {

class ModelLibrary {
public:
  /// Queries `library` (a dlopen handle of `path`, which names it in
  /// errors) for the ABI version this runtime speaks; throws Error when it
  /// has no tp_model_query or speaks another version.
  ModelLibrary(void *library, const std::string &path);

  /// "cpu" or "cuda".
  std::string target() const;
  /// The library's tp_model_signature() text.
  std::string signature() const;
  /// Devices a rank may run on; -1 for a library that needs none (CPU).
  int deviceCount() const;
  /// A fresh id for one world of ranks, to give every createRank.
  std::vector<char> uniqueId() const;

  /// One rank inside the library.
  class Rank {
  public:
    Rank(const ModelLibrary &model, tp_model_rank *handle,
         std::unique_ptr<tp_host_comm> comm, std::shared_ptr<void> host);
    Rank(const Rank &) = delete;
    Rank &operator=(const Rank &) = delete;
    ~Rank();

    /// Runs stage function `stage` on host buffers: `args` in the stage's
    /// argument order, `results` preallocated.
    void run(const std::string &stage, void *const *args, void *const *results);
    /// Row i of the KV cache bound at `cache` takes what row source[i] held.
    void reorderRows(void *cache, int64_t rowBytes,
                     const std::vector<int64_t> &source);
    /// Makes peers blocked on this rank fail instead of waiting forever.
    /// Safe to call from another thread while run() is in progress.
    void abort();

  private:
    const ModelLibrary &model;
    tp_model_rank *handle;
    std::unique_ptr<tp_host_comm> comm;
    std::shared_ptr<void> host;
  };

  /// Creates rank `rank` of `worldSize`. A CPU library runs its collectives
  /// through `host` (used by one thread at a time, outliving the rank); a
  /// CUDA library runs on `device` with NCCL, and every rank of the world
  /// must be created concurrently with the same `id`.
  std::unique_ptr<Rank> createRank(int32_t rank, int32_t worldSize,
                                   RankContext *host, int32_t device = 0,
                                   const std::vector<char> &id = {}) const;

private:
  const tp_model_api *api;
  std::string path;
};

} // namespace tp::rt

#endif // TP_RUNTIME_MODELLIBRARY_H
