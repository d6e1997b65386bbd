//===- RankContext.h - what generated code calls at run time ----*- C++ -*-===//
//
// What code emitted by tp-compile (`--target cpu`) calls: a RankContext's
// collectives and buffer pool. tp-compile copies this header into the
// artifact as tp_runtime.h. It has two parts:
//
//  - RankContext, the C++ interface generated code calls and the runtime's
//    communicators (threads, MPI) implement.
//  - With TP_CPU_MODEL_LIBRARY defined (model.cpp defines it): the model
//    library's side of the C ABI (tp_model_abi.h). Inside the library a
//    RankContext forwards to the host's tp_host_comm; errors are C++
//    exceptions inside and a status plus a message at the ABI, so no C++
//    type or exception crosses between the library and the runtime. The
//    same for every model: with TP_CPU_MODEL_GLUE_LINKED also defined the
//    model leaves it out, and tp-compile links it in as an object built
//    once (its build cache keeps it).
//
// Ranks are numbered row-major over (pipeline stage, tensor index):
// rank = stage * tp + tpIndex. A collective runs over a Group: the ranks that
// differ from the caller only in one grid axis, i.e. `size` ranks spaced
// `stride` apart that include the caller.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_RANKCONTEXT_H
#define TP_RUNTIME_RANKCONTEXT_H

#include "tp_model_abi.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tp::rt {

/// Element types a collective can carry; values match Npy/safetensors names
/// only through dtypeName().
/// BF16 travels in .npy files as its raw bits ('<u2'): NumPy has no bfloat16.
enum class DType : int32_t { F32, F64, I64, I32, I16, I8, U8, Bool, F16, BF16 };
static_assert(static_cast<int32_t>(DType::F32) == TP_DTYPE_F32 &&
                  static_cast<int32_t>(DType::I64) == TP_DTYPE_I64 &&
                  static_cast<int32_t>(DType::BF16) == TP_DTYPE_BF16,
              "DType must number element types as tp_model_abi.h does");

inline int64_t dtypeBytes(DType type) {
  switch (type) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I16:
  case DType::F16:
  case DType::BF16:
    return 2;
  default:
    return 1;
  }
}

enum class Reduction : int32_t { Sum, Product, Max, Min };
static_assert(static_cast<int32_t>(Reduction::Min) == TP_REDUCE_MIN,
              "Reduction must number reductions as tp_model_abi.h does");

/// `size` ranks spaced `stride` apart in global rank numbering.
struct Group {
  int32_t size;
  int32_t stride;
};

/// Thrown by the runtime (timeouts, aborted peers) and by generated code.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Activation buffers of generated code: 64-byte aligned, never null.
inline void *allocate(int64_t bytes) {
  size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void *pointer = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!pointer)
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  return pointer;
}
/// Memory streamed whole on every call (a rank's weights, their packed
/// panels): from 2 MiB on, 2 MiB-aligned and in 2 MiB pages where the
/// kernel gives them on request (transparent huge pages in "madvise"
/// mode), so that streaming it misses the TLB 512x less often and filling
/// it faults 512x fewer pages. Released with release().
inline void *allocateLarge(int64_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (static_cast<size_t>(bytes) < kHuge)
    return allocate(bytes);
  size_t rounded = (static_cast<size_t>(bytes) + kHuge - 1) / kHuge * kHuge;
  void *pointer = std::aligned_alloc(kHuge, rounded);
  if (!pointer)
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(pointer, rounded, MADV_HUGEPAGE); // advice: failure is harmless
#endif
  return pointer;
}
inline void release(void *pointer) { std::free(pointer); }

/// One rank's view of the world. `site` arguments name the collective in the
/// source (e.g. "all_reduce at model.mlir:57") for timeout messages.
class RankContext {
public:
  virtual ~RankContext() {
    for (auto &[bytes, buffers] : freeBuffers)
      for (void *buffer : buffers)
        tp::rt::release(buffer);
    for (void *buffer : inUse)
      tp::rt::release(buffer);
    for (auto &[key, buffer] : packedWeights)
      if (buffer != key.weight) // not packed into the weight's own memory
        tp::rt::release(buffer);
  }

  /// A weight as one kernel lays it out (tp_packed_gemm.h): made on its
  /// first use and kept for the rank's lifetime, since weights stay where
  /// they are. Null until the caller fills it: with memory from
  /// tp::rt::allocate, or with the weight itself when it was packed into
  /// its own memory (residentWeightGemm), which is not the context's.
  struct PackedKey {
    const void *weight;
    int64_t k, n, ld;
    bool transposed;
    bool operator==(const PackedKey &o) const {
      return weight == o.weight && k == o.k && n == o.n && ld == o.ld &&
             transposed == o.transposed;
    }
  };
  __attribute__((noinline)) void *&packedWeight(const PackedKey &key) {
    return packedWeights[key];
  }

  /// Activation buffers, recycled by size: a forward pass allocates the
  /// same sizes every time, so from the second pass on nothing reaches the
  /// system allocator (whose per-thread arenas would hand big buffers back
  /// to the kernel and fault them in again). The context owns every buffer
  /// it hands out: a pass that throws (an aborted collective) never
  /// releases its live ones, and they go with the context.
  /// Out of line: generated code calls these once per buffer, and inlined
  /// map and set code at each of 10,000 call sites is most of what the host
  /// compiler spends on a long model.
  __attribute__((noinline)) void *allocate(int64_t bytes) {
    void *buffer;
    auto it = freeBuffers.find(bytes);
    if (it != freeBuffers.end() && !it->second.empty()) {
      buffer = it->second.back();
      it->second.pop_back();
    } else {
      buffer = tp::rt::allocate(bytes);
    }
    inUse.insert(buffer);
    return buffer;
  }
  __attribute__((noinline)) void release(void *buffer, int64_t bytes) {
    inUse.erase(buffer);
    freeBuffers[bytes].push_back(buffer);
  }

  virtual int32_t rank() const = 0;
  virtual int32_t worldSize() const = 0;

  /// In place: every rank of `group` ends with the reduction of all buffers.
  virtual void allReduce(Group group, void *buffer, int64_t count, DType type,
                         Reduction op, const char *site) = 0;
  /// `in` is [outer, chunkBytes] on every rank; `out` is [outer, size,
  /// chunkBytes]: rank i's chunk lands at position i of the middle dim.
  virtual void allGather(Group group, const void *in, void *out, int64_t outer,
                         int64_t chunkBytes, const char *site) = 0;
  /// `in` is [outer, size, chunk] elements on every rank; `out` is [outer,
  /// chunk]: the reduction over ranks of position groupIndex() of the middle
  /// dim.
  virtual void reduceScatter(Group group, const void *in, void *out,
                             int64_t outer, int64_t chunk, DType type,
                             Reduction op, const char *site) = 0;
  /// Point to point between two global ranks (pipeline stages). send does
  /// not wait for the matching recv.
  virtual void send(int32_t peer, const void *buffer, int64_t bytes,
                    const char *site) = 0;
  virtual void recv(int32_t peer, void *buffer, int64_t bytes,
                    const char *site) = 0;

  /// The caller's position in `group`.
  int32_t groupIndex(Group group) const {
    return (rank() / group.stride) % group.size;
  }
  /// Global rank of position `index` in the caller's `group`.
  int32_t groupPeer(Group group, int32_t index) const {
    return rank() - groupIndex(group) * group.stride + index * group.stride;
  }

private:
  std::unordered_map<int64_t, std::vector<void *>> freeBuffers;
  struct PackedKeyHash {
    size_t operator()(const PackedKey &key) const {
      size_t h = std::hash<const void *>()(key.weight);
      for (int64_t v : {key.k, key.n, key.ld, int64_t(key.transposed)})
        h = h * 1000003u ^ std::hash<int64_t>()(v);
      return h;
    }
  };
  std::unordered_map<PackedKey, void *, PackedKeyHash> packedWeights;
  std::unordered_set<void *> inUse;
};

/// tp.cache_update: writes `update`, [outer, count, inner] elements, at
/// positions [position, position + count) of `cache`, [outer, slots,
/// inner]. A position outside the cache is an error, never a write.
template <typename T>
inline void writeCache(T *cache, const T *update, int64_t position,
                       int64_t outer, int64_t slots, int64_t count,
                       int64_t inner, const char *site) {
  if (position < 0 || position > slots - count)
    throw Error(std::string(site) + ": position " + std::to_string(position) +
                " and " + std::to_string(count) +
                " new entries do not fit a cache of " + std::to_string(slots) +
                " positions");
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(cache + (o * slots + position) * inner,
                update + o * count * inner,
                static_cast<size_t>(count * inner) * sizeof(T));
}

} // namespace tp::rt

#ifdef TP_CPU_MODEL_LIBRARY

#include <exception>
#include <new>

namespace tp::rt {

/// A stage function of the generated code: `args` in the function's
/// argument order (inputs, weights, caches), `results` preallocated.
using StageFunction = void (*)(RankContext *context, void *const *args,
                               void *const *results);
struct StageEntry {
  const char *name;
  StageFunction function;
};
struct ModelEntries {
  const StageEntry *stages;
  int32_t numStages;
};
/// The library's stage functions; defined by the generated code.
const ModelEntries &modelEntries();
} // namespace tp::rt

#ifndef TP_CPU_MODEL_GLUE_LINKED

namespace tp::rt {
namespace detail {
/// A rank inside the library: the host's collectives behind RankContext,
/// which throws the host's message when a call fails.
class HostRankContext final : public RankContext {
public:
  HostRankContext(int32_t rank, int32_t worldSize, const tp_host_comm &comm)
      : rankIndex(rank), size(worldSize), comm(comm) {}
  int32_t rank() const override { return rankIndex; }
  int32_t worldSize() const override { return size; }
  void allReduce(Group group, void *buffer, int64_t count, DType type,
                 Reduction op, const char *site) override {
    check(comm.all_reduce(comm.self, {group.size, group.stride}, buffer, count,
                          static_cast<int32_t>(type), static_cast<int32_t>(op),
                          site));
  }
  void allGather(Group group, const void *in, void *out, int64_t outer,
                 int64_t chunkBytes, const char *site) override {
    check(comm.all_gather(comm.self, {group.size, group.stride}, in, out, outer,
                          chunkBytes, site));
  }
  void reduceScatter(Group group, const void *in, void *out, int64_t outer,
                     int64_t chunk, DType type, Reduction op,
                     const char *site) override {
    check(comm.reduce_scatter(comm.self, {group.size, group.stride}, in, out,
                              outer, chunk, static_cast<int32_t>(type),
                              static_cast<int32_t>(op), site));
  }
  void send(int32_t peer, const void *buffer, int64_t bytes,
            const char *site) override {
    check(comm.send(comm.self, peer, buffer, bytes, site));
  }
  void recv(int32_t peer, void *buffer, int64_t bytes,
            const char *site) override {
    check(comm.recv(comm.self, peer, buffer, bytes, site));
  }

private:
  void check(int status) {
    if (status != 0)
      throw Error(comm.last_error(comm.self));
  }
  int32_t rankIndex, size;
  tp_host_comm comm;
};

/// Why the calling thread's last rank_create failed.
inline thread_local std::string createError;
} // namespace detail
} // namespace tp::rt

/// The library's rank: its context (and buffer pool, kept between runs).
struct tp_model_rank {
  tp::rt::detail::HostRankContext context;
  std::string lastError;
};

namespace tp::rt::detail {
inline const char *signature() { return tp_model_signature(); }
inline int deviceCount() { return -1; }
inline int uniqueId(void *id) {
  std::memset(id, 0, TP_MODEL_UNIQUE_ID_BYTES);
  return 0;
}
inline tp_model_rank *createRank(const tp_rank_config *config) {
  if (!config || !config->comm) {
    createError = "a CPU model rank needs the host's collectives";
    return nullptr;
  }
  auto *rank = new (std::nothrow) tp_model_rank{
      HostRankContext(config->rank, config->world_size, *config->comm), {}};
  if (!rank)
    createError = "out of memory creating rank " + std::to_string(config->rank);
  return rank;
}
inline int runRank(tp_model_rank *rank, const char *stage, void *const *args,
                   void *const *results) {
  try {
    const ModelEntries &entries = modelEntries();
    for (int32_t i = 0; i < entries.numStages; ++i)
      if (std::strcmp(entries.stages[i].name, stage) == 0) {
        entries.stages[i].function(&rank->context, args, results);
        return 0;
      }
    throw Error(std::string("the model has no stage function '") + stage + "'");
  } catch (const std::exception &e) {
    rank->lastError = e.what();
  } catch (...) {
    rank->lastError = "stage '" + std::string(stage) + "' failed";
  }
  return 1;
}
inline int reorderRows(tp_model_rank *rank, void *cache, int64_t rows,
                       int64_t rowBytes, const int64_t *source) {
  try {
    auto *data = static_cast<char *>(cache);
    std::vector<char> copy(data, data + rows * rowBytes);
    for (int64_t i = 0; i < rows; ++i) {
      if (source[i] < 0 || source[i] >= rows)
        throw Error("cache row " + std::to_string(source[i]) +
                    " does not exist (" + std::to_string(rows) + " rows)");
      if (source[i] != i)
        std::memcpy(data + i * rowBytes, copy.data() + source[i] * rowBytes,
                    static_cast<size_t>(rowBytes));
    }
    return 0;
  } catch (const std::exception &e) {
    rank->lastError = e.what();
    return 1;
  }
}
inline const char *lastError(tp_model_rank *rank) {
  return rank ? rank->lastError.c_str() : createError.c_str();
}
inline void abortRank(tp_model_rank *) {}
inline void destroyRank(tp_model_rank *rank) { delete rank; }
} // namespace tp::rt::detail

TP_MODEL_DEFINE_QUERY(tp::rt::detail, "cpu")

#endif // TP_CPU_MODEL_GLUE_LINKED
#endif // TP_CPU_MODEL_LIBRARY

#endif // TP_RUNTIME_RANKCONTEXT_H
