//===- CudaModel.h - a CUDA model library, seen from the host --*- C++ -*-===//
//
// tp-run links no CUDA library: it dlopens a model built with --target cuda
// and reaches the C ABI of CudaRankContext.h through dlsym. This wraps that
// ABI for C++ callers, with failures as tp::rt::Error.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_CUDAMODEL_H
#define TP_RUNTIME_CUDAMODEL_H

#include "tp/Runtime/CudaRankContext.h"

#include <memory>
#include <string>
#include <vector>

namespace tp::rt {

class CudaModel {
public:
  /// Finds the entry points in `library`, a dlopen handle; throws Error
  /// naming the first that is missing.
  explicit CudaModel(void *library);

  /// CUDA devices the process sees.
  int deviceCount() const;
  /// A fresh id for one world of ranks, to give every createRank.
  std::vector<char> uniqueId() const;

  /// One rank on one GPU.
  class Rank {
  public:
    Rank(const CudaModel &model, void *handle) : model(model), handle(handle) {}
    Rank(const Rank &) = delete;
    Rank &operator=(const Rank &) = delete;
    ~Rank();

    /// Runs stage function `stage` on host buffers: `args` in the stage's
    /// argument order, `results` preallocated.
    void run(const std::string &stage, void *const *args, void *const *results);
    /// Makes peers blocked on this rank fail instead of waiting forever.
    /// Safe to call from another thread while run() is in progress.
    void abort();

  private:
    const CudaModel &model;
    void *handle;
  };

  /// Creates rank `rank` of `worldSize` on `device`. Every rank of the
  /// world must be created concurrently (NCCL's initialisation is
  /// collective).
  std::unique_ptr<Rank> createRank(int rank, int worldSize, int device,
                                   const std::vector<char> &id) const;

private:
  tp_cuda_device_count_fn deviceCountFn;
  tp_cuda_unique_id_fn uniqueIdFn;
  tp_cuda_rank_create_fn createFn;
  tp_cuda_rank_run_fn runFn;
  tp_cuda_last_error_fn lastErrorFn;
  tp_cuda_rank_abort_fn abortFn;
  tp_cuda_rank_destroy_fn destroyFn;
};

} // namespace tp::rt

#endif // TP_RUNTIME_CUDAMODEL_H
