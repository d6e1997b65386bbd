//===- CudaRankContext.h - what generated CUDA code calls -----*- C++ -*-===//
//
// The interface between code emitted by tp-compile --target cuda and whoever
// runs it. tp-compile copies this header into the artifact as
// tp_cuda_runtime.h. It has two parts:
//
//  - The C ABI every model library exports (tp_model_abi.h): tp-run links
//    no CUDA library; it dlopens the model and calls tp_model_query, so
//    this part needs nothing but the C++ standard library.
//  - With TP_CUDA_MODEL_LIBRARY defined (model.cu defines it; nvcc compiles
//    it): one rank's state (device, stream, cuBLAS handle, NCCL
//    communicators), the checks that turn a failed CUDA, cuBLAS or NCCL call
//    into an Error naming the call and the op it came from, the few generic
//    kernels generated code launches (fill, copies between layouts), and the
//    library's side of the C ABI. Errors are C++ exceptions inside the library
//    and a status plus a message at the C ABI.
//
// Ranks are numbered as in RankContext.h: rank = stage * tp + tpIndex. A
// collective runs over a Group, `size` ranks spaced `stride` apart; each group
// has its own NCCL communicator, split from the world's when the rank is
// created. Everything a rank does is ordered on its one stream; the host
// waits only where it needs a value (a scalar read from a tensor, results).
// From its second call on, a stage runs as a CUDA graph: captured once
// (kernels, cuBLAS and NCCL calls) with its inputs and results in buffers
// that stay put, then replayed per call (a decode step per token). A stage
// that cannot be captured (it reads a value on the host) runs as before;
// TP_CUDA_GRAPHS=0 in the environment turns graphs off.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_CUDARANKCONTEXT_H
#define TP_RUNTIME_CUDARANKCONTEXT_H

#include "tp_model_abi.h"

#ifdef TP_CUDA_MODEL_LIBRARY

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tp::cuda {

/// `size` ranks spaced `stride` apart in global rank numbering.
struct Group {
  int32_t size;
  int32_t stride;
};

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const char *site, const char *call,
                              const std::string &reason) {
  throw Error(std::string(site) + ": " + call + " failed: " + reason);
}

inline void check(cudaError_t status, const char *call, const char *site) {
  if (status != cudaSuccess)
    fail(site, call, cudaGetErrorString(status));
}

inline void check(cublasStatus_t status, const char *call, const char *site) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(site, call, cublasGetStatusString(status));
}

inline void check(ncclResult_t status, const char *call, const char *site) {
  if (status == ncclSuccess || status == ncclInProgress)
    return;
  std::string reason = ncclGetErrorString(status);
  if (const char *detail = ncclGetLastError(nullptr))
    if (*detail)
      reason += std::string(" (") + detail + ")";
  fail(site, call, reason);
}

/// Checks `call` (a CUDA, cuBLAS or NCCL call); `site` names the op.
#define TP_CUDA_CHECK(call, site) ::tp::cuda::check((call), #call, (site))
/// Checks the kernel launch just issued (a launch reports no status).
#define TP_CUDA_CHECK_LAUNCH(site)                                             \
  ::tp::cuda::check(cudaGetLastError(), "kernel launch", (site))

struct Rank;
/// A stage function of the generated code: `args` and `results` are device
/// buffers in the order of manifest.json's args and results.
using StageFn = void (*)(Rank *context, void *const *args,
                         void *const *results);

struct StageInfo {
  const char *name;
  StageFn function;
  int32_t numArgs, numResults;
  const int64_t *argBytes;
  /// Weights and KV caches are uploaded once and kept on the device.
  const bool *argIsWeight;
  const int64_t *resultBytes;
};

struct ModelInfo {
  const StageInfo *stages;
  int32_t numStages;
  /// Every group some collective spans: each gets a communicator.
  const Group *groups;
  int32_t numGroups;
};

/// Defined by the generated model.cu.
const ModelInfo &model();

/// One rank: everything its generated code runs on.
struct Rank {
  int32_t rank = 0, worldSize = 1, device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  /// All ranks: send/recv between pipeline stages use global ranks.
  ncclComm_t world = nullptr;
  std::vector<std::pair<Group, ncclComm_t>> groupComms;
  std::string lastError;
  /// Device copies of weights and KV caches by the host buffer they were
  /// uploaded from: its bytes, and the device buffer. Keyed by host buffer,
  /// a generation artifact's prefill and decode step share them.
  std::map<const void *, std::pair<int64_t, void *>> resident;

  /// A stage captured as a CUDA graph, by stage name.
  struct Captured {
    /// Device arguments and results as captured: inputs and results in
    /// `owned` buffers (the same at every replay), weights resident.
    std::vector<void *> args, results, owned;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    int64_t calls = 0;
    /// The capture failed: the stage runs without a graph.
    bool eager = false;
  };
  std::map<std::string, Captured> captured;

  /// The caller's position in `group`.
  int32_t groupIndex(Group group) const {
    return (rank / group.stride) % group.size;
  }
  /// Global rank of position `index` in the caller's `group`.
  int32_t groupPeer(Group group, int32_t index) const {
    return rank - groupIndex(group) * group.stride + index * group.stride;
  }
  /// The communicator of the caller's `group`.
  ncclComm_t comm(Group group) const {
    for (const auto &[known, comm] : groupComms)
      if (known.size == group.size && known.stride == group.stride)
        return comm;
    throw Error("no communicator for the group of " +
                std::to_string(group.size) + " ranks " +
                std::to_string(group.stride) + " apart");
  }
};

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

/// `count` elements of T, stream-ordered: the memory is usable by any work
/// queued after this call on `context`'s stream.
template <typename T>
T *allocate(Rank *context, int64_t count, const char *site) {
  void *pointer = nullptr;
  size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
  check(cudaMallocAsync(&pointer, bytes, context->stream), "cudaMallocAsync",
        site);
  return static_cast<T *>(pointer);
}

/// Frees after the work queued so far; an error shows at the next check.
inline void release(Rank *context, void *pointer) {
  (void)cudaFreeAsync(pointer, context->stream);
}

/// The device address of a file-scope __device__ array.
template <typename T, size_t N>
T *deviceAddress(T (&symbol)[N], const char *site) {
  void *pointer = nullptr;
  check(cudaGetSymbolAddress(&pointer, symbol), "cudaGetSymbolAddress", site);
  return static_cast<T *>(pointer);
}

/// Reads one element for host code (a branch condition, an index): the only
/// place a forward waits for its stream.
template <typename T>
T load(Rank *context, const T *pointer, const char *site) {
  T value;
  check(cudaMemcpyAsync(&value, pointer, sizeof(T), cudaMemcpyDeviceToHost,
                        context->stream),
        "cudaMemcpyAsync", site);
  check(cudaStreamSynchronize(context->stream), "cudaStreamSynchronize", site);
  return value;
}

//===----------------------------------------------------------------------===//
// Kernels every model uses
//===----------------------------------------------------------------------===//

constexpr int kThreads = 256;

/// Blocks for one thread per point; kernels loop (grid-stride) past that.
inline unsigned blocksFor(int64_t points) {
  int64_t blocks = (points + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535));
}

/// A reduction's points each take one warp, whose lanes share the reduced
/// elements and combine their partial results with warp shuffles.
constexpr int kWarpSize = 32;

/// Threads per block for one warp per point: blocks of kThreads where the
/// points fill that many blocks of them, fewer warps per block where they
/// do not, down to one, so that few points still spread over the
/// multiprocessors. A decode step's attention has a query row per head and
/// sequence: 96 rows in blocks of 8 warps were 12 blocks, which kept 12 of
/// an H200's 132 multiprocessors busy (bench/cuda_device.py profile).
inline int threadsForWarps(int64_t points) {
  constexpr int64_t kBlocksWanted = 128;
  int64_t warps = kThreads / kWarpSize;
  while (warps > 1 && (points + warps - 1) / warps < kBlocksWanted)
    warps /= 2;
  return static_cast<int>(warps * kWarpSize);
}

/// Blocks of threadsForWarps(points) threads for one warp per point;
/// kernels loop (grid-stride) past that.
inline unsigned blocksForWarps(int64_t points) {
  int64_t warpsPerBlock = threadsForWarps(points) / kWarpSize;
  int64_t blocks = (points + warpsPerBlock - 1) / warpsPerBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535));
}

template <typename T>
__global__ void fillKernel(T *out, int64_t count, T value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <typename T>
void fill(Rank *context, T *out, int64_t count, T value, const char *site) {
  fillKernel<T>
      <<<blocksFor(count), kThreads, 0, context->stream>>>(out, count, value);
  TP_CUDA_CHECK_LAUNCH(site);
}

/// [outer, middle, chunk] -> [middle, outer, chunk], in units of U.
template <typename U>
__global__ void swapOuterKernel(U *out, const U *in, int64_t outer,
                                int64_t middle, int64_t chunk) {
  int64_t count = outer * middle * chunk;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = i % chunk, m = i / chunk % middle, o = i / (chunk * middle);
    out[(m * outer + o) * chunk + c] = in[i];
  }
}

/// Exchanges the two outer dims of a row-major [outer, middle, chunkBytes]
/// buffer: how NCCL's rank-major layout meets a gather or scatter on an
/// inner axis. Both buffers start where an allocation does.
inline void swapOuter(Rank *context, void *out, const void *in, int64_t outer,
                      int64_t middle, int64_t chunkBytes, const char *site) {
  auto launch = [&](auto unit) {
    using U = decltype(unit);
    int64_t chunk = chunkBytes / int64_t(sizeof(U));
    swapOuterKernel<U>
        <<<blocksFor(outer * middle * chunk), kThreads, 0, context->stream>>>(
            static_cast<U *>(out), static_cast<const U *>(in), outer, middle,
            chunk);
  };
  // The widest unit that divides a chunk moves the fewest elements.
  if (chunkBytes % 8 == 0)
    launch(uint64_t());
  else if (chunkBytes % 4 == 0)
    launch(uint32_t());
  else if (chunkBytes % 2 == 0)
    launch(uint16_t());
  else
    launch(uint8_t());
  TP_CUDA_CHECK_LAUNCH(site);
}

constexpr int kMaxBoxRank = 8;

/// A box of `sizes` elements, walked with per-dim strides in the source and
/// the destination (both in elements).
struct Box {
  int32_t rank;
  int64_t sizes[kMaxBoxRank];
  int64_t dstStrides[kMaxBoxRank];
  int64_t srcStrides[kMaxBoxRank];
};

template <typename T>
__global__ void copyBoxKernel(T *dst, const T *src, Box box, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, dstOffset = 0, srcOffset = 0;
    for (int d = box.rank - 1; d >= 0; --d) {
      int64_t index = rest % box.sizes[d];
      rest /= box.sizes[d];
      dstOffset += index * box.dstStrides[d];
      srcOffset += index * box.srcStrides[d];
    }
    dst[dstOffset] = src[srcOffset];
  }
}

/// Copies `box` from `src` to `dst` (slices, inserts, concats, pads).
template <typename T>
void copyBox(Rank *context, T *dst, const T *src, const Box &box,
             const char *site) {
  int64_t count = 1;
  for (int d = 0; d < box.rank; ++d)
    count *= box.sizes[d];
  if (count == 0)
    return;
  copyBoxKernel<T><<<blocksFor(count), kThreads, 0, context->stream>>>(
      dst, src, box, count);
  TP_CUDA_CHECK_LAUNCH(site);
}

template <typename T>
__global__ void writeCacheKernel(T *cache, const T *update,
                                 const int64_t *position, int64_t slots,
                                 int64_t count, int64_t inner, int64_t total) {
  int64_t at = *position;
  // The runtime checks the position before every step; a bad one writes
  // nothing rather than outside the cache.
  if (at < 0 || at > slots - count)
    return;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = i / (count * inner), rest = i % (count * inner);
    cache[(o * slots + at) * inner + rest] = update[i];
  }
}

/// tp.cache_update: writes `update`, [outer, count, inner], at positions
/// [*position, *position + count) of `cache`, [outer, slots, inner]. The
/// position is read on the device, so a captured step can be replayed.
template <typename T>
void writeCache(Rank *context, T *cache, const T *update,
                const int64_t *position, int64_t outer, int64_t slots,
                int64_t count, int64_t inner, const char *site) {
  int64_t total = outer * count * inner;
  if (total == 0)
    return;
  writeCacheKernel<T><<<blocksFor(total), kThreads, 0, context->stream>>>(
      cache, update, position, slots, count, inner, total);
  TP_CUDA_CHECK_LAUNCH(site);
}

namespace detail {
/// Why the calling thread's last rank_create failed.
inline thread_local std::string createError;

/// Releases a stage's graph and its buffers.
inline void dropCapture(Rank::Captured &captured) {
  if (captured.exec)
    (void)cudaGraphExecDestroy(captured.exec);
  if (captured.graph)
    (void)cudaGraphDestroy(captured.graph);
  for (void *buffer : captured.owned)
    (void)cudaFree(buffer);
  captured.exec = nullptr;
  captured.graph = nullptr;
  captured.owned.clear();
  captured.args.clear();
  captured.results.clear();
}

/// Whether stages may run as CUDA graphs (TP_CUDA_GRAPHS=0: never).
inline bool graphsEnabled() {
  const char *value = std::getenv("TP_CUDA_GRAPHS");
  return !value || std::strcmp(value, "0") != 0;
}

inline void destroy(Rank *rank) {
  if (!rank)
    return;
  (void)cudaSetDevice(rank->device);
  if (rank->stream)
    (void)cudaStreamSynchronize(rank->stream);
  for (auto &[name, captured] : rank->captured)
    dropCapture(captured);
  for (auto &[key, buffer] : rank->resident)
    (void)cudaFree(buffer.second);
  for (auto &[group, comm] : rank->groupComms)
    if (comm)
      (void)ncclCommDestroy(comm);
  if (rank->world)
    (void)ncclCommDestroy(rank->world);
  if (rank->blas)
    (void)cublasDestroy(rank->blas);
  if (rank->stream)
    (void)cudaStreamDestroy(rank->stream);
  delete rank;
}

inline const StageInfo &findStage(const char *name) {
  const ModelInfo &info = model();
  for (int32_t i = 0; i < info.numStages; ++i)
    if (std::strcmp(info.stages[i].name, name) == 0)
      return info.stages[i];
  throw Error(std::string("the model has no stage function '") + name + "'");
}
} // namespace detail

} // namespace tp::cuda

//===----------------------------------------------------------------------===//
// The C ABI (tp_model_abi.h)
//===----------------------------------------------------------------------===//

namespace tp::cuda::abi {

/// A tp_model_rank is a tp::cuda::Rank behind the ABI's opaque type.
inline Rank *unwrap(tp_model_rank *rank) {
  return reinterpret_cast<Rank *>(rank);
}

inline const char *signature() { return tp_model_signature(); }

inline int deviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

inline int uniqueId(void *id) {
  static_assert(sizeof(ncclUniqueId) == TP_MODEL_UNIQUE_ID_BYTES,
                "ncclUniqueId changed size");
  ncclUniqueId unique;
  if (ncclGetUniqueId(&unique) != ncclSuccess)
    return 1;
  std::memcpy(id, &unique, sizeof(unique));
  return 0;
}

inline tp_model_rank *createRank(const tp_rank_config *config) {
  int32_t rank = config->rank, worldSize = config->world_size,
          device = config->device;
  const void *id = config->unique_id;
  const char *site = "creating the rank";
  auto *context = new Rank();
  context->rank = rank;
  context->worldSize = worldSize;
  context->device = device;
  try {
    TP_CUDA_CHECK(cudaSetDevice(device), site);
    TP_CUDA_CHECK(
        cudaStreamCreateWithFlags(&context->stream, cudaStreamNonBlocking),
        site);
    // Buffers freed by one forward stay in the pool for the next.
    cudaMemPool_t pool;
    TP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device), site);
    uint64_t keep = UINT64_MAX;
    TP_CUDA_CHECK(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
        site);
    TP_CUDA_CHECK(cublasCreate(&context->blas), site);
    TP_CUDA_CHECK(cublasSetStream(context->blas, context->stream), site);
    ncclUniqueId unique;
    std::memcpy(&unique, id, sizeof(unique));
    TP_CUDA_CHECK(ncclCommInitRank(&context->world, worldSize, unique, rank),
                  site);
    // Splitting is collective over the world: every rank splits every
    // group, in the table's order. color: the group's first rank.
    const ModelInfo &info = model();
    for (int32_t i = 0; i < info.numGroups; ++i) {
      Group group = info.groups[i];
      int32_t index = context->groupIndex(group);
      ncclComm_t comm = nullptr;
      TP_CUDA_CHECK(ncclCommSplit(context->world, rank - index * group.stride,
                                  index, &comm, nullptr),
                    site);
      context->groupComms.emplace_back(group, comm);
    }
  } catch (const std::exception &e) {
    detail::createError = "rank " + std::to_string(rank) + " on device " +
                          std::to_string(device) + ": " + e.what();
    detail::destroy(context);
    return nullptr;
  }
  return reinterpret_cast<tp_model_rank *>(context);
}

inline int runRank(tp_model_rank *rank, const char *stage,
                   void *const *hostArgs, void *const *hostResults) {
  Rank *context = unwrap(rank);
  std::vector<void *> temporaries;
  try {
    const char *site = stage;
    TP_CUDA_CHECK(cudaSetDevice(context->device), site);
    const StageInfo &info = detail::findStage(stage);
    std::vector<void *> args(info.numArgs), results(info.numResults);
    auto upload = [&](int32_t i) {
      void *buffer = allocate<char>(context, info.argBytes[i], site);
      TP_CUDA_CHECK(cudaMemcpyAsync(buffer, hostArgs[i], info.argBytes[i],
                                    cudaMemcpyHostToDevice, context->stream),
                    site);
      return buffer;
    };
    // Weights and caches: resident, uploaded on first use.
    for (int32_t i = 0; i < info.numArgs; ++i) {
      if (!info.argIsWeight[i])
        continue;
      auto &cached = context->resident[hostArgs[i]];
      if (cached.first != info.argBytes[i] || !cached.second) {
        if (cached.second)
          release(context, cached.second);
        cached = {info.argBytes[i], upload(i)};
      }
      args[i] = cached.second;
    }

    // From the second call on: replay the stage's graph, captured on the
    // first replay (and again if a resident buffer moved).
    Rank::Captured &captured = context->captured[stage];
    if (detail::graphsEnabled() && !captured.eager && captured.calls++ > 0) {
      if (captured.exec)
        for (int32_t i = 0; i < info.numArgs; ++i)
          if (info.argIsWeight[i] && captured.args[i] != args[i]) {
            detail::dropCapture(captured);
            break;
          }
      if (!captured.exec) {
        captured.args = args;
        captured.results.assign(info.numResults, nullptr);
        auto own = [&](int64_t bytes) {
          void *buffer = nullptr;
          TP_CUDA_CHECK(cudaMalloc(&buffer, std::max<int64_t>(bytes, 1)), site);
          captured.owned.push_back(buffer);
          return buffer;
        };
        for (int32_t i = 0; i < info.numArgs; ++i)
          if (!info.argIsWeight[i])
            captured.args[i] = own(info.argBytes[i]);
        for (int32_t i = 0; i < info.numResults; ++i)
          captured.results[i] = own(info.resultBytes[i]);
        TP_CUDA_CHECK(cudaStreamSynchronize(context->stream), site);
        TP_CUDA_CHECK(cudaStreamBeginCapture(context->stream,
                                             cudaStreamCaptureModeThreadLocal),
                      site);
        bool recorded = true;
        try {
          info.function(context, captured.args.data(), captured.results.data());
        } catch (const std::exception &) {
          recorded = false;
        }
        cudaGraph_t graph = nullptr;
        recorded &=
            cudaStreamEndCapture(context->stream, &graph) == cudaSuccess &&
            graph;
        captured.graph = graph;
        recorded = recorded && cudaGraphInstantiate(&captured.exec, graph, 0) ==
                                   cudaSuccess;
        (void)cudaGetLastError();
        if (!recorded) {
          // Not capturable (it waits for a value on the host): run it as
          // before, from now on.
          detail::dropCapture(captured);
          captured.eager = true;
        }
      }
      if (captured.exec) {
        for (int32_t i = 0; i < info.numArgs; ++i)
          if (!info.argIsWeight[i])
            TP_CUDA_CHECK(
                cudaMemcpyAsync(captured.args[i], hostArgs[i], info.argBytes[i],
                                cudaMemcpyHostToDevice, context->stream),
                site);
        TP_CUDA_CHECK(cudaGraphLaunch(captured.exec, context->stream), site);
        for (int32_t i = 0; i < info.numResults; ++i)
          TP_CUDA_CHECK(cudaMemcpyAsync(hostResults[i], captured.results[i],
                                        info.resultBytes[i],
                                        cudaMemcpyDeviceToHost,
                                        context->stream),
                        site);
        TP_CUDA_CHECK(cudaStreamSynchronize(context->stream), site);
        return 0;
      }
    }

    for (int32_t i = 0; i < info.numArgs; ++i) {
      if (info.argIsWeight[i])
        continue;
      args[i] = upload(i);
      temporaries.push_back(args[i]);
    }
    for (int32_t i = 0; i < info.numResults; ++i) {
      results[i] = allocate<char>(context, info.resultBytes[i], site);
      temporaries.push_back(results[i]);
    }
    info.function(context, args.data(), results.data());
    for (int32_t i = 0; i < info.numResults; ++i)
      TP_CUDA_CHECK(cudaMemcpyAsync(hostResults[i], results[i],
                                    info.resultBytes[i], cudaMemcpyDeviceToHost,
                                    context->stream),
                    site);
    for (void *buffer : temporaries)
      release(context, buffer);
    TP_CUDA_CHECK(cudaStreamSynchronize(context->stream), site);
    return 0;
  } catch (const std::exception &e) {
    context->lastError =
        "rank " + std::to_string(context->rank) + ": " + e.what();
    for (void *buffer : temporaries)
      release(context, buffer);
    return 1;
  }
}

/// The cache is resident on the device once a stage has used it: its rows
/// move there, through a copy of the whole; before that, on the host.
inline int reorderRows(tp_model_rank *rank, void *cache, int64_t rows,
                       int64_t rowBytes, const int64_t *source) {
  Rank *context = unwrap(rank);
  const char *site = "reordering a KV cache";
  auto it = context->resident.find(cache);
  bool onDevice = it != context->resident.end() && it->second.second;
  int64_t bytes = rows * rowBytes;
  std::vector<char> hostCopy;
  void *copy = nullptr;
  try {
    for (int64_t i = 0; i < rows; ++i)
      if (source[i] < 0 || source[i] >= rows)
        throw Error("cache row " + std::to_string(source[i]) +
                    " does not exist (" + std::to_string(rows) + " rows)");
    char *data = static_cast<char *>(cache);
    cudaMemcpyKind kind = cudaMemcpyHostToHost;
    if (onDevice) {
      data = static_cast<char *>(it->second.second);
      kind = cudaMemcpyDeviceToDevice;
      TP_CUDA_CHECK(cudaSetDevice(context->device), site);
      copy = allocate<char>(context, bytes, site);
      TP_CUDA_CHECK(cudaMemcpyAsync(copy, data, bytes, kind, context->stream),
                    site);
    } else {
      hostCopy.assign(data, data + bytes);
      copy = hostCopy.data();
    }
    for (int64_t i = 0; i < rows; ++i) {
      if (source[i] == i)
        continue;
      char *to = data + i * rowBytes;
      const char *from = static_cast<char *>(copy) + source[i] * rowBytes;
      if (onDevice)
        TP_CUDA_CHECK(
            cudaMemcpyAsync(to, from, rowBytes, kind, context->stream), site);
      else
        std::memcpy(to, from, rowBytes);
    }
    if (onDevice) {
      release(context, copy);
      TP_CUDA_CHECK(cudaStreamSynchronize(context->stream), site);
    }
    return 0;
  } catch (const std::exception &e) {
    context->lastError =
        "rank " + std::to_string(context->rank) + ": " + e.what();
    return 1;
  }
}

inline const char *lastError(tp_model_rank *rank) {
  return rank ? unwrap(rank)->lastError.c_str() : detail::createError.c_str();
}

inline void abortRank(tp_model_rank *rank) {
  Rank *context = unwrap(rank);
  if (!context)
    return;
  for (auto &[group, comm] : context->groupComms)
    if (comm)
      (void)ncclCommAbort(comm);
  if (context->world)
    (void)ncclCommAbort(context->world);
  // Aborting also freed them.
  for (auto &[group, comm] : context->groupComms)
    comm = nullptr;
  context->world = nullptr;
}

inline void destroyRank(tp_model_rank *rank) { detail::destroy(unwrap(rank)); }

} // namespace tp::cuda::abi

TP_MODEL_DEFINE_QUERY(tp::cuda::abi, "cuda")

#endif // TP_CUDA_MODEL_LIBRARY

#endif // TP_RUNTIME_CUDARANKCONTEXT_H
