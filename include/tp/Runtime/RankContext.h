//===- RankContext.h - what generated code calls at run time ----*- C++ -*-===//
//
// The only interface between code emitted by tp-compile (`--target cpu`) and
// the runtime. Generated code includes this header (tp-compile copies it into
// the artifact as tp_runtime.h) and calls the virtual functions below, so a
// compiled model library has no link-time dependency on the runtime.
//
// Ranks are numbered row-major over (pipeline stage, tensor index):
// rank = stage * tp + tpIndex. A collective runs over a Group: the ranks that
// differ from the caller only in one grid axis, i.e. `size` ranks spaced
// `stride` apart that include the caller.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_RANKCONTEXT_H
#define TP_RUNTIME_RANKCONTEXT_H

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tp::rt {

/// Element types a collective can carry; values match Npy/safetensors names
/// only through dtypeName().
/// BF16 travels in .npy files as its raw bits ('<u2'): NumPy has no bfloat16.
enum class DType : int32_t { F32, F64, I64, I32, I16, I8, U8, Bool, F16, BF16 };

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
    throw Error("out of memory allocating " + std::to_string(bytes) +
                " bytes");
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
  // Last, so that a model library built before it still finds freeBuffers
  // where it was.
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

/// Signature of every entry point a model library exports, one per pipeline
/// stage: `args` in the stage function's argument order (inputs and weights,
/// see manifest.json), `results` preallocated by the caller.
extern "C" {
typedef void (*tp_stage_fn)(tp::rt::RankContext *context,
                            void *const *args, void *const *results);
}

#endif // TP_RUNTIME_RANKCONTEXT_H
