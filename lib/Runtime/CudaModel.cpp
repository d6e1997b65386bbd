//===- CudaModel.cpp - the C ABI of a CUDA model library, through dlsym ---===//

#include "tp/Runtime/CudaModel.h"

#include "tp/Runtime/RankContext.h"

#include <dlfcn.h>

using namespace tp::rt;

template <typename Fn> static Fn lookUp(void *library, const char *name) {
  void *symbol = dlsym(library, name);
  if (!symbol)
    throw Error(std::string("the model library has no entry point ") + name +
                "; was it built with --target cuda?");
  return reinterpret_cast<Fn>(symbol);
}

CudaModel::CudaModel(void *library)
    : deviceCountFn(
          lookUp<tp_cuda_device_count_fn>(library, "tp_cuda_device_count")),
      uniqueIdFn(lookUp<tp_cuda_unique_id_fn>(library, "tp_cuda_unique_id")),
      createFn(lookUp<tp_cuda_rank_create_fn>(library, "tp_cuda_rank_create")),
      runFn(lookUp<tp_cuda_rank_run_fn>(library, "tp_cuda_rank_run")),
      lastErrorFn(lookUp<tp_cuda_last_error_fn>(library, "tp_cuda_last_error")),
      abortFn(lookUp<tp_cuda_rank_abort_fn>(library, "tp_cuda_rank_abort")),
      destroyFn(
          lookUp<tp_cuda_rank_destroy_fn>(library, "tp_cuda_rank_destroy")) {}

int CudaModel::deviceCount() const { return deviceCountFn(); }

std::vector<char> CudaModel::uniqueId() const {
  std::vector<char> id(TP_CUDA_UNIQUE_ID_BYTES);
  if (uniqueIdFn(id.data()) != 0)
    throw Error("ncclGetUniqueId failed");
  return id;
}

std::unique_ptr<CudaModel::Rank>
CudaModel::createRank(int rank, int worldSize, int device,
                      const std::vector<char> &id) const {
  void *handle = createFn(rank, worldSize, device, id.data());
  if (!handle)
    throw Error(lastErrorFn(nullptr));
  return std::make_unique<Rank>(*this, handle);
}

CudaModel::Rank::~Rank() { model.destroyFn(handle); }

void CudaModel::Rank::run(const std::string &stage, void *const *args,
                          void *const *results) {
  if (model.runFn(handle, stage.c_str(), args, results) != 0)
    throw Error(model.lastErrorFn(handle));
}

void CudaModel::Rank::abort() { model.abortFn(handle); }
