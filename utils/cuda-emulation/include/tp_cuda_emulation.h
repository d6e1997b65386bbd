//===- tp_cuda_emulation.h - CUDA, cuBLAS and NCCL on the CPU, for tests --===//
//
// Just enough of the CUDA runtime, cuBLAS and NCCL for a --target cuda
// model.cu to compile with the host C++ compiler and run under tp-run on a
// machine without a GPU (run_emulated.py drives it). Kernel launches, which
// run_emulated.py rewrites from <<<...>>> into tp_emu::launch, run every
// block and thread in turn; streams are synchronous; NCCL communicators are
// shared state between tp-run's rank threads. Device memory is host memory,
// filled with 0xFF when allocated and freed so that reading a buffer before
// it is written, or after it is released, shows as NaN.
//
// It checks the generated code's logic — index arithmetic, GEMM operand
// order and leading dims (this cuBLAS is column-major and checks them),
// collective layouts, buffer lifetimes — not its concurrency.
//
//===----------------------------------------------------------------------===//

#ifndef TP_CUDA_EMULATION_H
#define TP_CUDA_EMULATION_H

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

//===----------------------------------------------------------------------===//
// CUDA runtime
//===----------------------------------------------------------------------===//

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1)
      : x(x), y(y), z(z) {}
};
inline thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
} cudaError_t;

struct CUstream_st {};
typedef CUstream_st *cudaStream_t;
struct CUmemPoolHandle_st {};
typedef CUmemPoolHandle_st *cudaMemPool_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
#define cudaStreamNonBlocking 0x01

namespace tp_emu {
/// Sizes of live allocations, to poison them when freed.
inline std::mutex allocationsMutex;
inline std::map<void *, size_t> allocations;

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t,
            cudaStream_t, Args &&...args) {
  gridDim = grid;
  blockDim = block;
  for (unsigned b = 0; b < grid.x; ++b)
    for (unsigned t = 0; t < block.x; ++t) {
      blockIdx = dim3(b);
      threadIdx = dim3(t);
      kernel(args...);
    }
}
} // namespace tp_emu

inline const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "emulated CUDA error";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
/// Eight devices: enough for every rank of the tests.
inline cudaError_t cudaGetDeviceCount(int *count) {
  *count = 8;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
  *stream = new CUstream_st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int) {
  *pool = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr,
                                           void *) {
  return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void **pointer, size_t bytes, cudaStream_t) {
  *pointer = std::malloc(bytes);
  if (!*pointer)
    return cudaErrorMemoryAllocation;
  std::memset(*pointer, 0xFF, bytes);
  std::lock_guard<std::mutex> lock(tp_emu::allocationsMutex);
  tp_emu::allocations[*pointer] = bytes;
  return cudaSuccess;
}
inline cudaError_t cudaFree(void *pointer) {
  if (!pointer)
    return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(tp_emu::allocationsMutex);
    auto it = tp_emu::allocations.find(pointer);
    if (it == tp_emu::allocations.end())
      return cudaErrorInvalidValue;
    std::memset(pointer, 0xFF, it->second);
    tp_emu::allocations.erase(it);
  }
  std::free(pointer);
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void *pointer, cudaStream_t) {
  return cudaFree(pointer);
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                   cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes,
                                   cudaStream_t) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
template <typename T>
cudaError_t cudaGetSymbolAddress(void **pointer, const T &symbol) {
  *pointer = const_cast<void *>(static_cast<const void *>(&symbol));
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// cuBLAS
//===----------------------------------------------------------------------===//

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_INVALID_VALUE = 7,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
struct cublasContext {};
typedef cublasContext *cublasHandle_t;

inline cublasStatus_t cublasCreate(cublasHandle_t *handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline const char *cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success"
                                         : "invalid value (emulated check)";
}

namespace tp_emu {
/// Column-major C = alpha op(A) op(B) + beta C per batch element, with
/// cuBLAS's argument checks; C is not read when beta is 0.
template <typename T>
cublasStatus_t gemm(cublasOperation_t opA, cublasOperation_t opB, int m, int n,
                    int k, const T *alpha, const T *a, int lda,
                    long long strideA, const T *b, int ldb, long long strideB,
                    const T *beta, T *c, int ldc, long long strideC,
                    int batch) {
  if (m < 0 || n < 0 || k < 0 || batch < 0 ||
      lda < std::max(1, opA == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, opB == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int p = 0; p < batch; ++p) {
    const T *ap = a + p * strideA, *bp = b + p * strideB;
    T *cp = c + p * strideC;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        T sum = 0;
        for (int l = 0; l < k; ++l) {
          T x = opA == CUBLAS_OP_N ? ap[i + l * (long long)lda]
                                   : ap[l + i * (long long)lda];
          T y = opB == CUBLAS_OP_N ? bp[l + j * (long long)ldb]
                                   : bp[j + l * (long long)ldb];
          sum += x * y;
        }
        T &out = cp[i + j * (long long)ldc];
        out = *alpha * sum + (*beta == T(0) ? T(0) : *beta * out);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
} // namespace tp_emu

inline cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t, cublasOperation_t opA, cublasOperation_t opB, int m, int n,
    int k, const float *alpha, const float *a, int lda, long long strideA,
    const float *b, int ldb, long long strideB, const float *beta, float *c,
    int ldc, long long strideC, int batch) {
  return tp_emu::gemm(opA, opB, m, n, k, alpha, a, lda, strideA, b, ldb,
                      strideB, beta, c, ldc, strideC, batch);
}
inline cublasStatus_t cublasDgemmStridedBatched(
    cublasHandle_t, cublasOperation_t opA, cublasOperation_t opB, int m, int n,
    int k, const double *alpha, const double *a, int lda, long long strideA,
    const double *b, int ldb, long long strideB, const double *beta, double *c,
    int ldc, long long strideC, int batch) {
  return tp_emu::gemm(opA, opB, m, n, k, alpha, a, lda, strideA, b, ldb,
                      strideB, beta, c, ldc, strideC, batch);
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

typedef enum {
  ncclSuccess = 0,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
} ncclDataType_t;
typedef enum { ncclSum, ncclProd, ncclMax, ncclMin } ncclRedOp_t;

namespace tp_emu {
/// What the ranks of one communicator share.
struct Shared {
  explicit Shared(int size) : size(size), sends(size), splits(size) {}
  const int size;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const void *> sends;
  std::vector<std::pair<int, int>> splits; // (color, key) per rank
  std::map<std::pair<uint64_t, int>, std::shared_ptr<Shared>> children;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail;

  /// Waits for every rank; false once the communicator is aborted.
  bool barrier() {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t mine = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      changed.notify_all();
    } else {
      changed.wait(lock, [&] { return generation != mine || aborted; });
    }
    return !aborted;
  }
};

inline std::mutex worldsMutex;
inline std::map<std::string, std::shared_ptr<Shared>> worlds;

inline size_t typeBytes(ncclDataType_t type) {
  switch (type) {
  case ncclInt8:
  case ncclUint8:
    return 1;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  default:
    return 8;
  }
}

template <typename T>
void reduceInto(T *acc, const T *in, size_t count, ncclRedOp_t op) {
  for (size_t i = 0; i < count; ++i)
    switch (op) {
    case ncclSum:
      acc[i] = acc[i] + in[i];
      break;
    case ncclProd:
      acc[i] = acc[i] * in[i];
      break;
    case ncclMax:
      acc[i] = std::max(acc[i], in[i]);
      break;
    case ncclMin:
      acc[i] = std::min(acc[i], in[i]);
      break;
    }
}

inline void reduceInto(void *acc, const void *in, size_t count,
                       ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
  case ncclInt8:
    return reduceInto(static_cast<int8_t *>(acc),
                      static_cast<const int8_t *>(in), count, op);
  case ncclUint8:
    return reduceInto(static_cast<uint8_t *>(acc),
                      static_cast<const uint8_t *>(in), count, op);
  case ncclInt32:
    return reduceInto(static_cast<int32_t *>(acc),
                      static_cast<const int32_t *>(in), count, op);
  case ncclUint32:
    return reduceInto(static_cast<uint32_t *>(acc),
                      static_cast<const uint32_t *>(in), count, op);
  case ncclInt64:
    return reduceInto(static_cast<int64_t *>(acc),
                      static_cast<const int64_t *>(in), count, op);
  case ncclUint64:
    return reduceInto(static_cast<uint64_t *>(acc),
                      static_cast<const uint64_t *>(in), count, op);
  case ncclFloat32:
    return reduceInto(static_cast<float *>(acc), static_cast<const float *>(in),
                      count, op);
  case ncclFloat64:
    return reduceInto(static_cast<double *>(acc),
                      static_cast<const double *>(in), count, op);
  }
}
} // namespace tp_emu

struct ncclComm {
  std::shared_ptr<tp_emu::Shared> shared;
  int rank;
  uint64_t splitRounds = 0;
};
typedef ncclComm *ncclComm_t;

inline const char *ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "emulated NCCL error";
}
inline const char *ncclGetLastError(ncclComm_t) { return ""; }
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }

inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static std::atomic<uint64_t> next{1};
  std::memset(id->internal, 0, sizeof(id->internal));
  std::string text = "tp-emu-" + std::to_string(next++);
  std::memcpy(id->internal, text.data(), text.size());
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int size,
                                     ncclUniqueId id, int rank) {
  std::shared_ptr<tp_emu::Shared> shared;
  {
    std::lock_guard<std::mutex> lock(tp_emu::worldsMutex);
    auto &slot = tp_emu::worlds[std::string(id.internal)];
    if (!slot)
      slot = std::make_shared<tp_emu::Shared>(size);
    shared = slot;
  }
  if (shared->size != size || rank < 0 || rank >= size)
    return ncclInvalidArgument;
  *comm = new ncclComm{shared, rank};
  return shared->barrier() ? ncclSuccess : ncclRemoteError;
}

inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                  ncclComm_t *newComm, void *) {
  tp_emu::Shared &shared = *comm->shared;
  uint64_t round = comm->splitRounds++;
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    shared.splits[comm->rank] = {color, key};
  }
  if (!shared.barrier())
    return ncclRemoteError;
  // Members of this color ordered by (key, old rank): the new ranks.
  std::vector<std::pair<int, int>> members;
  for (int r = 0; r < shared.size; ++r)
    if (shared.splits[r].first == color)
      members.push_back({shared.splits[r].second, r});
  std::sort(members.begin(), members.end());
  int newRank = 0;
  while (members[newRank].second != comm->rank)
    ++newRank;
  std::shared_ptr<tp_emu::Shared> child;
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    auto &slot = shared.children[{round, color}];
    if (!slot)
      slot = std::make_shared<tp_emu::Shared>(members.size());
    child = slot;
  }
  *newComm = new ncclComm{child, newRank};
  return shared.barrier() ? ncclSuccess : ncclRemoteError;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

/// Unlike NCCL's, this leaks `comm`: its own rank's thread may still be in
/// a call on it.
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(comm->shared->mutex);
  comm->shared->aborted = true;
  comm->shared->changed.notify_all();
  return ncclSuccess;
}

inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                                  ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t) {
  tp_emu::Shared &shared = *comm->shared;
  size_t bytes = count * tp_emu::typeBytes(type);
  shared.sends[comm->rank] = send;
  if (!shared.barrier())
    return ncclRemoteError;
  std::vector<char> sum(static_cast<const char *>(shared.sends[0]),
                        static_cast<const char *>(shared.sends[0]) + bytes);
  for (int r = 1; r < shared.size; ++r)
    tp_emu::reduceInto(sum.data(), shared.sends[r], count, type, op);
  if (!shared.barrier())
    return ncclRemoteError;
  std::memcpy(recv, sum.data(), bytes);
  return ncclSuccess;
}

inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                                  ncclDataType_t type, ncclComm_t comm,
                                  cudaStream_t) {
  tp_emu::Shared &shared = *comm->shared;
  size_t bytes = count * tp_emu::typeBytes(type);
  shared.sends[comm->rank] = send;
  if (!shared.barrier())
    return ncclRemoteError;
  std::vector<char> all(bytes * shared.size);
  for (int r = 0; r < shared.size; ++r)
    std::memcpy(all.data() + r * bytes, shared.sends[r], bytes);
  if (!shared.barrier())
    return ncclRemoteError;
  std::memcpy(recv, all.data(), all.size());
  return ncclSuccess;
}

inline ncclResult_t ncclReduceScatter(const void *send, void *recv,
                                      size_t count, ncclDataType_t type,
                                      ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t) {
  tp_emu::Shared &shared = *comm->shared;
  size_t bytes = count * tp_emu::typeBytes(type);
  shared.sends[comm->rank] = send;
  if (!shared.barrier())
    return ncclRemoteError;
  auto part = [&](int r) {
    return static_cast<const char *>(shared.sends[r]) + comm->rank * bytes;
  };
  std::vector<char> sum(part(0), part(0) + bytes);
  for (int r = 1; r < shared.size; ++r)
    tp_emu::reduceInto(sum.data(), part(r), count, type, op);
  if (!shared.barrier())
    return ncclRemoteError;
  std::memcpy(recv, sum.data(), bytes);
  return ncclSuccess;
}

inline ncclResult_t ncclSend(const void *send, size_t count,
                             ncclDataType_t type, int peer, ncclComm_t comm,
                             cudaStream_t) {
  tp_emu::Shared &shared = *comm->shared;
  const char *bytes = static_cast<const char *>(send);
  std::lock_guard<std::mutex> lock(shared.mutex);
  shared.mail[{comm->rank, peer}].emplace_back(
      bytes, bytes + count * tp_emu::typeBytes(type));
  shared.changed.notify_all();
  return ncclSuccess;
}

inline ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type,
                             int peer, ncclComm_t comm, cudaStream_t) {
  tp_emu::Shared &shared = *comm->shared;
  std::unique_lock<std::mutex> lock(shared.mutex);
  auto &queue = shared.mail[{peer, comm->rank}];
  shared.changed.wait(lock, [&] { return !queue.empty() || shared.aborted; });
  if (shared.aborted)
    return ncclRemoteError;
  if (queue.front().size() != count * tp_emu::typeBytes(type))
    return ncclInvalidUsage;
  std::memcpy(recv, queue.front().data(), queue.front().size());
  queue.pop_front();
  return ncclSuccess;
}

#endif // TP_CUDA_EMULATION_H
