//===- ModelLibrary.cpp - the C ABI of a model library, through dlsym -----===//
//
// The host's collectives cross the ABI as C function pointers over the
// RankContext; an exception they throw becomes a status and a message that
// the library rethrows on its side, so no C++ exception crosses the ABI.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/ModelLibrary.h"

#include <dlfcn.h>

using namespace tp::rt;

namespace {

/// What a tp_host_comm's `self` points at.
struct HostComm {
  RankContext *context;
  std::string lastError;
};

template <typename Call> int guarded(void *self, Call call) {
  auto *host = static_cast<HostComm *>(self);
  try {
    call(*host->context);
    return 0;
  } catch (const std::exception &e) {
    host->lastError = e.what();
  } catch (...) {
    host->lastError = "a collective failed";
  }
  return 1;
}

Group toGroup(tp_group group) { return {group.size, group.stride}; }

std::unique_ptr<tp_host_comm> makeHostComm(HostComm *host) {
  auto comm = std::make_unique<tp_host_comm>();
  comm->self = host;
  comm->all_reduce = [](void *self, tp_group group, void *buffer, int64_t count,
                        int32_t dtype, int32_t op, const char *site) {
    return guarded(self, [&](RankContext &context) {
      context.allReduce(toGroup(group), buffer, count,
                        static_cast<DType>(dtype), static_cast<Reduction>(op),
                        site);
    });
  };
  comm->all_gather = [](void *self, tp_group group, const void *in, void *out,
                        int64_t outer, int64_t chunkBytes, const char *site) {
    return guarded(self, [&](RankContext &context) {
      context.allGather(toGroup(group), in, out, outer, chunkBytes, site);
    });
  };
  comm->reduce_scatter = [](void *self, tp_group group, const void *in,
                            void *out, int64_t outer, int64_t chunk,
                            int32_t dtype, int32_t op, const char *site) {
    return guarded(self, [&](RankContext &context) {
      context.reduceScatter(toGroup(group), in, out, outer, chunk,
                            static_cast<DType>(dtype),
                            static_cast<Reduction>(op), site);
    });
  };
  comm->send = [](void *self, int32_t peer, const void *buffer, int64_t bytes,
                  const char *site) {
    return guarded(self, [&](RankContext &context) {
      context.send(peer, buffer, bytes, site);
    });
  };
  comm->recv = [](void *self, int32_t peer, void *buffer, int64_t bytes,
                  const char *site) {
    return guarded(self, [&](RankContext &context) {
      context.recv(peer, buffer, bytes, site);
    });
  };
  comm->last_error = [](void *self) {
    return static_cast<HostComm *>(self)->lastError.c_str();
  };
  return comm;
}

} // namespace

ModelLibrary::ModelLibrary(void *library, const std::string &path)
    : path(path) {
  auto query = reinterpret_cast<tp_model_query_fn>(
      dlsym(library, TP_MODEL_QUERY_SYMBOL));
  if (!query)
    throw Error(path +
                " exports no " TP_MODEL_QUERY_SYMBOL
                "(): not a model library of this tp-compile (rebuild the "
                "artifact)");
  api = query(TP_MODEL_ABI_VERSION);
  if (!api)
    throw Error(path + " does not speak version " +
                std::to_string(TP_MODEL_ABI_VERSION) +
                " of the model library ABI (tp_model_abi.h): it was built "
                "by another tp-compile; rebuild the artifact");
}

std::string ModelLibrary::target() const {
  return api->target ? api->target : "";
}

std::string ModelLibrary::signature() const {
  const char *text = api->signature();
  return text ? text : "";
}

int ModelLibrary::deviceCount() const { return api->device_count(); }

std::vector<char> ModelLibrary::uniqueId() const {
  std::vector<char> id(TP_MODEL_UNIQUE_ID_BYTES);
  if (api->unique_id(id.data()) != 0)
    throw Error(path + ": creating a world id (ncclGetUniqueId) failed");
  return id;
}

std::unique_ptr<ModelLibrary::Rank>
ModelLibrary::createRank(int32_t rank, int32_t worldSize, RankContext *host,
                         int32_t device, const std::vector<char> &id) const {
  auto state = std::make_shared<HostComm>(HostComm{host, {}});
  std::unique_ptr<tp_host_comm> comm = makeHostComm(state.get());
  std::vector<char> noId(TP_MODEL_UNIQUE_ID_BYTES, 0);
  tp_rank_config config = {rank, worldSize, device,
                           id.empty() ? noId.data() : id.data(),
                           host ? comm.get() : nullptr};
  tp_model_rank *handle = api->rank_create(&config);
  if (!handle)
    throw Error(api->last_error(nullptr));
  return std::make_unique<Rank>(*this, handle, std::move(comm),
                                std::move(state));
}

ModelLibrary::Rank::Rank(const ModelLibrary &model, tp_model_rank *handle,
                         std::unique_ptr<tp_host_comm> comm,
                         std::shared_ptr<void> host)
    : model(model), handle(handle), comm(std::move(comm)),
      host(std::move(host)) {}

ModelLibrary::Rank::~Rank() { model.api->rank_destroy(handle); }

void ModelLibrary::Rank::run(const std::string &stage, void *const *args,
                             void *const *results) {
  if (model.api->rank_run(handle, stage.c_str(), args, results) != 0)
    throw Error(model.api->last_error(handle));
}

void ModelLibrary::Rank::reorderRows(void *cache, int64_t rowBytes,
                                     const std::vector<int64_t> &source) {
  if (model.api->rank_reorder_rows(handle, cache,
                                   static_cast<int64_t>(source.size()),
                                   rowBytes, source.data()) != 0)
    throw Error(model.api->last_error(handle));
}

void ModelLibrary::Rank::abort() { model.api->rank_abort(handle); }
