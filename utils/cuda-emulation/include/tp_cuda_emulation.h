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
// Kernels that shuffle values between the lanes of a warp (reductions) or
// wait for them (__syncwarp: row groups) are launched with
// tp_emu::launchWarps instead: each block's threads run as fibers
// (ucontext), and a shuffle or __syncwarp waits until every lane of its
// warp has reached it. A warp whose lanes do not all reach the same shuffle —
// some finished, others waiting — is reported and aborts the run.
//
// __half and __nv_bfloat16 (cuda_fp16.h, cuda_bf16.h) hold their bits and
// convert to and from float, rounding to nearest even (arithmetic on them
// goes through float); cublasGemmStridedBatchedEx multiplies f16, bf16 or
// f32 operands into an f32 output (or one of the operands' type, rounded
// once), summing in f32 as CUBLAS_COMPUTE_32F does, though not in the
// tensor cores' order; NCCL reduces f16 and bf16
// element by element in f32, rounding after each rank's contribution.
//
// Memory has a kind. Device memory is what cudaMalloc(Async) returned and
// the __device__ symbols whose address host code took
// (cudaGetSymbolAddress); everything else is host memory. A copy whose
// kind disagrees with its pointers (cudaMemcpyHostToDevice from device
// memory), a copy or memset that runs past the end of a device allocation,
// a kernel, cuBLAS or NCCL argument in host memory: each is reported on
// stderr and fails the call (a launch through cudaGetLastError), so the
// runtime's check names the op.
//
// Device memory is also used in stream order. Each allocation remembers the
// stream and the call that last used it (a kernel argument, a copy, a
// memset, a GEMM operand, a collective's buffer, a free); a call on another
// stream that uses it is reported and fails unless it is ordered after
// that call: its stream waited for an event recorded after it
// (cudaEventRecord, cudaStreamWaitEvent, transitively), or the host
// synchronized that stream, the event or the device since. Work runs at
// once here, so a missing event computes the right numbers; on a GPU the
// two calls may overlap.
//
// It checks the generated code's logic — index arithmetic, GEMM operand
// order and leading dims (this cuBLAS is column-major and checks them),
// collective layouts, buffer lifetimes — not its concurrency. Stream
// capture records the work queued on a stream (kernels, copies, GEMMs, NCCL
// calls, with their arguments as they were) instead of running it, and a
// graph launch replays it, so a replay that reads a buffer the capture did
// not pin down reads what is there now, as on a GPU; synchronizing a
// capturing stream invalidates the capture, as CUDA does. Each graph launch
// appends a line to $TP_EMU_GRAPH_LOG when it is set.
//
//===----------------------------------------------------------------------===//

#ifndef TP_CUDA_EMULATION_H
#define TP_CUDA_EMULATION_H

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

//===----------------------------------------------------------------------===//
// Half precision
//===----------------------------------------------------------------------===//

namespace tp_emu {
inline float bitsToFloat(uint32_t word) {
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}
} // namespace tp_emu

struct __nv_bfloat16 {
  uint16_t bits;
  __nv_bfloat16() = default;
  __nv_bfloat16(float value) {
    uint32_t word;
    std::memcpy(&word, &value, sizeof(word));
    bits =
        value != value
            ? static_cast<uint16_t>((word >> 16) | 0x40)
            : static_cast<uint16_t>((word + 0x7FFF + ((word >> 16) & 1)) >> 16);
  }
  operator float() const {
    return tp_emu::bitsToFloat(static_cast<uint32_t>(bits) << 16);
  }
};

struct __half {
  uint16_t bits;
  __half() = default;
  __half(float value) {
    _Float16 half = static_cast<_Float16>(value);
    std::memcpy(&bits, &half, sizeof(bits));
  }
  operator float() const {
    _Float16 half;
    std::memcpy(&half, &bits, sizeof(half));
    return static_cast<float>(half);
  }
};

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
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
} cudaError_t;

/// Work recorded by a capture: 0 when it succeeded.
using EmulatedWork = std::function<int()>;
struct CUgraph_st {
  std::vector<EmulatedWork> work;
  /// Allocated while capturing: the graph owns them, at fixed addresses.
  std::vector<void *> owned;
  /// Device memory the recorded work uses, ordered at each launch.
  std::vector<const void *> touched;
};
typedef CUgraph_st *cudaGraph_t;
struct CUgraphExec_st {
  cudaGraph_t graph;
};
typedef CUgraphExec_st *cudaGraphExec_t;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};

struct CUstream_st {
  /// Set between cudaStreamBeginCapture and cudaStreamEndCapture.
  cudaGraph_t capture = nullptr;
  bool invalidated = false;
  /// Calls issued on this stream: the n-th is ordered after calls 1..n-1.
  std::uint64_t issued = 0;
  /// The host waited for calls 1..synchronized (cudaStreamSynchronize).
  std::uint64_t synchronized = 0;
  /// Per other stream, the last of its calls this stream's next calls are
  /// ordered after (cudaStreamWaitEvent), transitively.
  std::map<const CUstream_st *, std::uint64_t> after;
};
typedef CUstream_st *cudaStream_t;
/// A point in a stream (cudaEventRecord): its calls so far, and what they
/// were ordered after.
struct CUevent_st {
  const CUstream_st *stream = nullptr;
  std::uint64_t call = 0;
  std::map<const CUstream_st *, std::uint64_t> after;
};
typedef CUevent_st *cudaEvent_t;
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
/// __device__ symbols host code took the address of: device memory too.
inline std::map<void *, size_t> symbols;
/// What the next cudaGetLastError returns (a refused launch).
inline thread_local cudaError_t lastError = cudaSuccess;

inline void misuse(const std::string &what) {
  std::fprintf(stderr, "tp_cuda_emulation: %s\n", what.c_str());
}

/// Stream order. Each device allocation remembers the stream and call that
/// last used it; a call on another stream may use it only once it is
/// ordered after that call: the stream waited for an event recorded after
/// it, or the host synchronized that stream (or the device) since. Work
/// runs at once here, so without this a missing event between two streams
/// would compute the right numbers; on a GPU the two calls may overlap.
struct LastUse {
  const CUstream_st *stream;
  std::uint64_t call;
};
inline std::mutex orderMutex;
inline std::map<const void *, LastUse> lastUses; // by allocation base
inline std::vector<CUstream_st *> streams;       // live, for device syncs
/// The legacy default stream (a null cudaStream_t).
inline CUstream_st defaultStream;

inline CUstream_st *streamOf(cudaStream_t stream) {
  return stream ? stream : &defaultStream;
}

/// The base of the device allocation holding `pointer`, or null. Not the
/// __device__ symbols: each GPU has its own copy of those, where here the
/// ranks' threads share one.
inline const void *allocationOf(const void *pointer) {
  std::lock_guard<std::mutex> lock(allocationsMutex);
  auto it = allocations.upper_bound(const_cast<void *>(pointer));
  if (it == allocations.begin())
    return nullptr;
  --it;
  const char *base = static_cast<const char *>(it->first);
  return static_cast<const char *>(pointer) <
                 base + std::max<size_t>(it->second, 1)
             ? it->first
             : nullptr;
}

/// Whether `stream`'s next call is ordered after call `call` of `other`.
inline bool orderedAfter(const CUstream_st *stream, const CUstream_st *other,
                         std::uint64_t call) {
  if (stream == other || other->synchronized >= call)
    return true;
  auto it = stream->after.find(other);
  return it != stream->after.end() && it->second >= call;
}

/// Issues one call on `stream` that uses `pointers` (host memory and null
/// are ignored); false, with a report, if some device memory among them was
/// last used by another stream's call this one is not ordered after. While
/// the stream captures, the graph's launch is checked instead.
inline bool inStreamOrder(const char *call, cudaStream_t stream,
                          const std::vector<const void *> &pointers) {
  std::vector<const void *> bases;
  for (const void *pointer : pointers)
    if (const void *base = pointer ? allocationOf(pointer) : nullptr)
      bases.push_back(base);
  CUstream_st *s = streamOf(stream);
  std::lock_guard<std::mutex> lock(orderMutex);
  if (s->capture) {
    s->capture->touched.insert(s->capture->touched.end(), bases.begin(),
                               bases.end());
    return true;
  }
  bool ok = true;
  for (const void *base : bases) {
    auto it = lastUses.find(base);
    if (it == lastUses.end() ||
        orderedAfter(s, it->second.stream, it->second.call))
      continue;
    misuse(std::string(call) + ": device memory that another stream's call " +
           std::to_string(it->second.call) +
           " used, with no event or "
           "synchronization between the two streams");
    ok = false;
  }
  if (!ok)
    return false;
  ++s->issued;
  for (const void *base : bases)
    lastUses[base] = {s, s->issued};
  return true;
}

/// inStreamOrder for a launch's or a library call's arguments.
template <typename... Args>
bool argumentsInStreamOrder(const char *call, cudaStream_t stream,
                            const Args &...args) {
  auto pointerOf = [](const auto &arg) -> const void * {
    using Arg = std::decay_t<decltype(arg)>;
    if constexpr (std::is_pointer_v<Arg>)
      return arg;
    else
      return nullptr;
  };
  return inStreamOrder(call, stream,
                       std::vector<const void *>{pointerOf(args)...});
}

/// The host waited for `stream`'s calls so far, and for what they were
/// ordered after.
inline void
hostWaited(const CUstream_st *stream, std::uint64_t call,
           const std::map<const CUstream_st *, std::uint64_t> &after) {
  std::lock_guard<std::mutex> lock(orderMutex);
  for (CUstream_st *s : streams) {
    if (s == stream)
      s->synchronized = std::max(s->synchronized, call);
    auto it = after.find(s);
    if (it != after.end())
      s->synchronized = std::max(s->synchronized, it->second);
  }
  if (stream == &defaultStream)
    defaultStream.synchronized = std::max(defaultStream.synchronized, call);
}

/// cudaDeviceSynchronize, or a call that implies it (cudaFree).
inline void deviceWaited() {
  std::lock_guard<std::mutex> lock(orderMutex);
  for (CUstream_st *s : streams)
    s->synchronized = s->issued;
  defaultStream.synchronized = defaultStream.issued;
}

inline void forget(const void *base) {
  std::lock_guard<std::mutex> lock(orderMutex);
  lastUses.erase(base);
}

enum class Where { Host, Device, PastTheEnd };

/// Where [pointer, pointer + bytes) is: in one device allocation or symbol,
/// starting in one and running past its end, or in host memory.
inline Where locate(const void *pointer, size_t bytes) {
  std::lock_guard<std::mutex> lock(allocationsMutex);
  const char *p = static_cast<const char *>(pointer);
  for (const std::map<void *, size_t> *blocks : {&allocations, &symbols}) {
    auto it = blocks->upper_bound(const_cast<void *>(pointer));
    if (it == blocks->begin())
      continue;
    --it;
    const char *base = static_cast<const char *>(it->first);
    if (p >= base + std::max<size_t>(it->second, 1))
      continue;
    return p + bytes <= base + it->second ? Where::Device : Where::PastTheEnd;
  }
  return Where::Host;
}

/// Every pointer among a call's arguments is device memory (or null).
template <typename... Args>
bool onDevice(const char *call, const Args &...args) {
  bool ok = true;
  int index = 0;
  auto check = [&](const auto &arg) {
    using Arg = std::decay_t<decltype(arg)>;
    if constexpr (std::is_pointer_v<Arg>) {
      if (arg && locate(arg, 0) != Where::Device) {
        misuse(std::string(call) + ": argument " + std::to_string(index) +
               " points to host memory");
        ok = false;
      }
    }
    ++index;
  };
  (check(args), ...);
  return ok;
}

/// A copy's pointers agree with its kind and stay inside their allocations.
inline bool checkCopy(void *dst, const void *src, size_t bytes,
                      cudaMemcpyKind kind) {
  static const char *const kinds[] = {
      "cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
      "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
      "cudaMemcpyDefault"};
  bool ok = true;
  auto check = [&](const void *pointer, const char *role, bool device) {
    Where where = locate(pointer, bytes);
    std::string call = std::string("cudaMemcpyAsync(") + kinds[kind] + ") of " +
                       std::to_string(bytes) + " bytes: the " + role;
    if (where == Where::PastTheEnd) {
      misuse(call + " runs past the end of its device allocation");
      ok = false;
    } else if (kind != cudaMemcpyDefault &&
               (where == Where::Device) != device) {
      misuse(call + " is " + (device ? "host" : "device") + " memory");
      ok = false;
    }
  };
  check(src, "source",
        kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice);
  check(dst, "destination",
        kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice);
  return ok;
}

/// Runs `work` now, or records it when `stream` is capturing.
inline int enqueue(cudaStream_t stream, EmulatedWork work) {
  if (stream && stream->capture) {
    stream->capture->work.push_back(std::move(work));
    return 0;
  }
  return work();
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t,
            cudaStream_t stream, Args &&...args) {
  if (!onDevice("a kernel launch", args...) ||
      !argumentsInStreamOrder("a kernel launch", stream, args...)) {
    lastError = cudaErrorInvalidValue;
    return;
  }
  // Arguments by value, as CUDA copies them at the launch (or capture).
  enqueue(stream, [=] {
    gridDim = grid;
    blockDim = block;
    for (unsigned b = 0; b < grid.x; ++b)
      for (unsigned t = 0; t < block.x; ++t) {
        blockIdx = dim3(b);
        threadIdx = dim3(t);
        kernel(args...);
      }
    return 0;
  });
}

/// One block's threads as fibers, for kernels with warp shuffles.
struct Lanes {
  struct Lane {
    ucontext_t context;
    bool done = false;
    bool waiting = false; // at a warp barrier
  };
  std::vector<Lane> lanes;
  /// The value each lane offers to its warp's current shuffle.
  std::vector<std::uint64_t> slots;
  ucontext_t scheduler;
  std::function<void()> body;
  unsigned current = 0;
};
inline thread_local Lanes *activeLanes = nullptr;

inline void laneEntry() {
  activeLanes->body();
  activeLanes->lanes[activeLanes->current].done = true;
}

/// Suspends the running lane until every lane of its warp waits too.
inline void warpBarrier() {
  Lanes &l = *activeLanes;
  l.lanes[l.current].waiting = true;
  swapcontext(&l.lanes[l.current].context, &l.scheduler);
}

template <typename... Params, typename... Args>
void launchWarps(void (*kernel)(Params...), dim3 grid, dim3 block, size_t,
                 cudaStream_t stream, Args &&...args) {
  if (!onDevice("a kernel launch", args...) ||
      !argumentsInStreamOrder("a kernel launch", stream, args...)) {
    lastError = cudaErrorInvalidValue;
    return;
  }
  enqueue(stream, [=] {
    constexpr size_t stackBytes = 64 << 10;
    constexpr unsigned warpSize = 32;
    gridDim = grid;
    blockDim = block;
    Lanes l;
    l.lanes.resize(block.x);
    l.slots.resize(block.x);
    l.body = [&] { kernel(args...); };
    std::unique_ptr<char[]> stacks(new char[block.x * stackBytes]);
    Lanes *outer = activeLanes;
    activeLanes = &l;
    for (unsigned b = 0; b < grid.x; ++b) {
      blockIdx = dim3(b);
      for (unsigned t = 0; t < block.x; ++t) {
        Lanes::Lane &lane = l.lanes[t];
        lane.done = lane.waiting = false;
        getcontext(&lane.context);
        lane.context.uc_stack.ss_sp = stacks.get() + t * stackBytes;
        lane.context.uc_stack.ss_size = stackBytes;
        lane.context.uc_link = &l.scheduler;
        makecontext(&lane.context, laneEntry, 0);
      }
      while (true) {
        // Each lane runs until it finishes or waits at a shuffle.
        for (unsigned t = 0; t < block.x; ++t) {
          if (l.lanes[t].done || l.lanes[t].waiting)
            continue;
          l.current = t;
          threadIdx = dim3(t);
          swapcontext(&l.scheduler, &l.lanes[t].context);
        }
        bool released = false;
        for (unsigned w = 0; w < block.x; w += warpSize) {
          unsigned end = std::min(block.x, w + warpSize);
          unsigned waiting = 0, done = 0;
          for (unsigned t = w; t < end; ++t) {
            waiting += l.lanes[t].waiting;
            done += l.lanes[t].done;
          }
          if (waiting == 0)
            continue;
          if (done != 0) {
            std::fprintf(stderr,
                         "tp_cuda_emulation: block %u, warp %u: %u lanes wait "
                         "at a shuffle or __syncwarp that %u finished lanes "
                         "never reach\n",
                         b, w / warpSize, waiting, done);
            std::abort();
          }
          for (unsigned t = w; t < end; ++t)
            l.lanes[t].waiting = false;
          released = true;
        }
        if (!released)
          break;
      }
    }
    activeLanes = outer;
    return 0;
  });
}

inline void poison(void *pointer) {
  std::lock_guard<std::mutex> lock(allocationsMutex);
  auto it = allocations.find(pointer);
  if (it != allocations.end())
    std::memset(pointer, 0xFF, it->second);
}
} // namespace tp_emu

inline const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "emulated CUDA error";
}
inline cudaError_t cudaGetLastError() {
  return std::exchange(tp_emu::lastError, cudaSuccess);
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
/// Eight devices: enough for every rank of the tests.
inline cudaError_t cudaGetDeviceCount(int *count) {
  *count = 8;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
  *stream = new CUstream_st;
  std::lock_guard<std::mutex> lock(tp_emu::orderMutex);
  tp_emu::streams.push_back(*stream);
  return cudaSuccess;
}
/// The stream's uses of memory are forgotten with it (its work is done
/// here; on a GPU it finishes before the stream is released).
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(tp_emu::orderMutex);
    auto &all = tp_emu::streams;
    all.erase(std::remove(all.begin(), all.end(), stream), all.end());
    for (auto it = tp_emu::lastUses.begin(); it != tp_emu::lastUses.end();)
      it = it->second.stream == stream ? tp_emu::lastUses.erase(it)
                                       : std::next(it);
    for (CUstream_st *other : all)
      other->after.erase(stream);
  }
  delete stream;
  return cudaSuccess;
}
/// Waiting for a capturing stream is not allowed: the capture is lost.
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream && stream->capture) {
    stream->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  CUstream_st *s = tp_emu::streamOf(stream);
  tp_emu::hostWaited(s, s->issued, s->after);
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  tp_emu::deviceWaited();
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) {
  return cudaEventCreate(event);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
/// Marks `stream`'s calls so far. Not while capturing (no event nodes).
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUstream_st *s = tp_emu::streamOf(stream);
  if (!event || s->capture)
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(tp_emu::orderMutex);
  event->stream = s;
  event->call = s->issued;
  event->after = s->after;
  return cudaSuccess;
}
/// `stream`'s later calls are ordered after the event's calls.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                       unsigned = 0) {
  CUstream_st *s = tp_emu::streamOf(stream);
  if (!event)
    return cudaErrorInvalidValue;
  if (!event->stream)
    return cudaSuccess; // never recorded: CUDA waits for nothing
  std::lock_guard<std::mutex> lock(tp_emu::orderMutex);
  auto wait = [&](const CUstream_st *other, std::uint64_t call) {
    std::uint64_t &known = s->after[other];
    known = std::max(known, call);
  };
  wait(event->stream, event->call);
  for (const auto &[other, call] : event->after)
    wait(other, call);
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event)
    return cudaErrorInvalidValue;
  if (event->stream)
    tp_emu::hostWaited(event->stream, event->call, event->after);
  return cudaSuccess;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                          cudaStreamCaptureMode) {
  if (!stream || stream->capture)
    return cudaErrorInvalidValue;
  stream->capture = new CUgraph_st;
  stream->invalidated = false;
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph);
inline cudaError_t cudaStreamEndCapture(cudaStream_t stream,
                                        cudaGraph_t *graph) {
  if (!stream || !stream->capture)
    return cudaErrorInvalidValue;
  cudaGraph_t captured = stream->capture;
  stream->capture = nullptr;
  if (stream->invalidated) {
    cudaGraphDestroy(captured);
    *graph = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = captured;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec,
                                        cudaGraph_t graph, unsigned long long) {
  if (!graph)
    return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph};
  return cudaSuccess;
}
/// Replays the recorded work in order; stream-ordered like the rest, so
/// synchronous here.
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec)
    return cudaErrorInvalidValue;
  if (!tp_emu::inStreamOrder("cudaGraphLaunch", stream, exec->graph->touched))
    return cudaErrorInvalidValue;
  if (const char *log = std::getenv("TP_EMU_GRAPH_LOG")) {
    static std::mutex logMutex;
    std::lock_guard<std::mutex> lock(logMutex);
    std::ofstream(log, std::ios::app)
        << "launch " << exec->graph->work.size() << " nodes\n";
  }
  for (const EmulatedWork &work : exec->graph->work)
    if (work() != 0)
      return cudaErrorLaunchFailure;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int) {
  *pool = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr,
                                           void *) {
  return cudaSuccess;
}
/// While capturing, the memory is the graph's (one address for every
/// replay, which poisons it where the allocation was).
inline cudaError_t cudaMallocAsync(void **pointer, size_t bytes,
                                   cudaStream_t stream) {
  *pointer = std::malloc(bytes ? bytes : 1);
  if (!*pointer)
    return cudaErrorMemoryAllocation;
  std::memset(*pointer, 0xFF, bytes);
  {
    std::lock_guard<std::mutex> lock(tp_emu::allocationsMutex);
    tp_emu::allocations[*pointer] = bytes;
  }
  // Stream-ordered: usable on `stream`, and elsewhere once ordered after it.
  if (stream && !stream->capture)
    tp_emu::inStreamOrder("cudaMallocAsync", stream, {*pointer});
  if (stream && stream->capture) {
    void *allocated = *pointer;
    stream->capture->owned.push_back(allocated);
    stream->capture->work.push_back([allocated] {
      tp_emu::poison(allocated);
      return 0;
    });
  }
  return cudaSuccess;
}
namespace tp_emu {
inline cudaError_t release(void *pointer) {
  if (!pointer)
    return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(allocationsMutex);
    auto it = allocations.find(pointer);
    if (it == allocations.end())
      return cudaErrorInvalidValue;
    std::memset(pointer, 0xFF, it->second);
    allocations.erase(it);
  }
  forget(pointer);
  std::free(pointer);
  return cudaSuccess;
}
} // namespace tp_emu
/// Waits for the device first, as CUDA's does.
inline cudaError_t cudaFree(void *pointer) {
  tp_emu::deviceWaited();
  return tp_emu::release(pointer);
}
inline cudaError_t cudaMalloc(void **pointer, size_t bytes) {
  return cudaMallocAsync(pointer, bytes, nullptr);
}
/// While capturing, memory freed in the graph stays the graph's until the
/// graph is destroyed; a replay poisons it where the free was.
inline cudaError_t cudaFreeAsync(void *pointer, cudaStream_t stream) {
  if (stream && stream->capture) {
    stream->capture->work.push_back([pointer] {
      tp_emu::poison(pointer);
      return 0;
    });
    return cudaSuccess;
  }
  if (!tp_emu::inStreamOrder("cudaFreeAsync", stream, {pointer}))
    return cudaErrorInvalidValue;
  return tp_emu::release(pointer);
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                   cudaMemcpyKind kind, cudaStream_t stream) {
  if (!tp_emu::checkCopy(dst, src, bytes, kind) ||
      !tp_emu::inStreamOrder("cudaMemcpyAsync", stream, {dst, src}))
    return cudaErrorInvalidValue;
  tp_emu::enqueue(stream, [=] {
    std::memmove(dst, src, bytes);
    return 0;
  });
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes,
                                   cudaStream_t stream) {
  if (tp_emu::locate(dst, bytes) != tp_emu::Where::Device) {
    tp_emu::misuse("cudaMemsetAsync of " + std::to_string(bytes) +
                   " bytes: the destination is not inside device memory");
    return cudaErrorInvalidValue;
  }
  if (!tp_emu::inStreamOrder("cudaMemsetAsync", stream, {dst}))
    return cudaErrorInvalidValue;
  tp_emu::enqueue(stream, [=] {
    std::memset(dst, value, bytes);
    return 0;
  });
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph)
    return cudaSuccess;
  for (void *pointer : graph->owned)
    cudaFree(pointer);
  delete graph;
  return cudaSuccess;
}
template <typename T>
cudaError_t cudaGetSymbolAddress(void **pointer, const T &symbol) {
  *pointer = const_cast<void *>(static_cast<const void *>(&symbol));
  std::lock_guard<std::mutex> lock(tp_emu::allocationsMutex);
  tp_emu::symbols[*pointer] = sizeof(T);
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
struct cublasContext {
  cudaStream_t stream = nullptr;
};
typedef cublasContext *cublasHandle_t;

inline cublasStatus_t cublasCreate(cublasHandle_t *handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t handle,
                                      cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
inline const char *cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success"
                                         : "invalid value (emulated check)";
}

namespace tp_emu {
inline bool gemmArgsValid(cublasOperation_t opA, cublasOperation_t opB, int m,
                          int n, int k, int lda, int ldb, int ldc, int batch) {
  return m >= 0 && n >= 0 && k >= 0 && batch >= 0 &&
         lda >= std::max(1, opA == CUBLAS_OP_N ? m : k) &&
         ldb >= std::max(1, opB == CUBLAS_OP_N ? k : n) &&
         ldc >= std::max(1, m);
}

/// Column-major C = alpha op(A) op(B) + beta C per batch element, with
/// cuBLAS's argument checks; C is not read when beta is 0.
template <typename T>
cublasStatus_t gemm(cublasOperation_t opA, cublasOperation_t opB, int m, int n,
                    int k, const T *alpha, const T *a, int lda,
                    long long strideA, const T *b, int ldb, long long strideB,
                    const T *beta, T *c, int ldc, long long strideC,
                    int batch) {
  if (!gemmArgsValid(opA, opB, m, n, k, lda, ldb, ldc, batch))
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

namespace tp_emu {
/// A GEMM on the handle's stream: its arguments are checked now, and alpha
/// and beta (host scalars) read now, as cuBLAS does in host pointer mode.
template <typename T>
cublasStatus_t queueGemm(cublasHandle_t handle, cublasOperation_t opA,
                         cublasOperation_t opB, int m, int n, int k,
                         const T *alpha, const T *a, int lda, long long strideA,
                         const T *b, int ldb, long long strideB, const T *beta,
                         T *c, int ldc, long long strideC, int batch) {
  if (!gemmArgsValid(opA, opB, m, n, k, lda, ldb, ldc, batch))
    return CUBLAS_STATUS_INVALID_VALUE;
  T alphaValue = *alpha, betaValue = *beta;
  enqueue(handle->stream, [=] {
    return static_cast<int>(gemm(opA, opB, m, n, k, &alphaValue, a, lda,
                                 strideA, b, ldb, strideB, &betaValue, c, ldc,
                                 strideC, batch));
  });
  return CUBLAS_STATUS_SUCCESS;
}
} // namespace tp_emu

typedef enum {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

namespace tp_emu {
/// Element i of a cuBLAS operand of `type`, as float.
inline float loadAs(cudaDataType_t type, const void *base, long long i) {
  switch (type) {
  case CUDA_R_16F:
    return static_cast<const __half *>(base)[i];
  case CUDA_R_16BF:
    return static_cast<const __nv_bfloat16 *>(base)[i];
  case CUDA_R_64F:
    return static_cast<float>(static_cast<const double *>(base)[i]);
  default:
    return static_cast<const float *>(base)[i];
  }
}
} // namespace tp_emu

namespace tp_emu {
/// Stores `value` as element i of a cuBLAS operand of `type` (f16 and bf16
/// round to nearest even, without saturating, as cuBLAS's output does).
inline void storeAs(cudaDataType_t type, void *base, long long i, float value) {
  switch (type) {
  case CUDA_R_16F:
    static_cast<__half *>(base)[i] = __half(value);
    return;
  case CUDA_R_16BF:
    static_cast<__nv_bfloat16 *>(base)[i] = __nv_bfloat16(value);
    return;
  default:
    static_cast<float *>(base)[i] = value;
  }
}
} // namespace tp_emu

/// The mixed-precision GEMM tp-compile --dtype emits: A and B of one type
/// (f16, bf16 or f32), C f32 or A's type, the scalars f32, compute
/// CUBLAS_COMPUTE_32F: sums in f32, C rounded once at the end.
inline cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t opA, cublasOperation_t opB, int m,
    int n, int k, const void *alpha, const void *a, cudaDataType_t typeA,
    int lda, long long strideA, const void *b, cudaDataType_t typeB, int ldb,
    long long strideB, const void *beta, void *c, cudaDataType_t typeC, int ldc,
    long long strideC, int batch, cublasComputeType_t compute,
    cublasGemmAlgo_t) {
  if (!tp_emu::onDevice("cublasGemmStridedBatchedEx (a, b, c)", a, b, c) ||
      !tp_emu::argumentsInStreamOrder("cublasGemmStridedBatchedEx",
                                      handle->stream, a, b, c))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (typeA != typeB || (typeC != CUDA_R_32F && typeC != typeA) ||
      compute != CUBLAS_COMPUTE_32F ||
      !tp_emu::gemmArgsValid(opA, opB, m, n, k, lda, ldb, ldc, batch))
    return CUBLAS_STATUS_INVALID_VALUE;
  float alphaValue = *static_cast<const float *>(alpha);
  float betaValue = *static_cast<const float *>(beta);
  tp_emu::enqueue(handle->stream, [=] {
    for (int p = 0; p < batch; ++p)
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          float sum = 0;
          for (int l = 0; l < k; ++l) {
            long long x = opA == CUBLAS_OP_N ? i + l * (long long)lda
                                             : l + i * (long long)lda;
            long long y = opB == CUBLAS_OP_N ? l + j * (long long)ldb
                                             : j + l * (long long)ldb;
            sum += tp_emu::loadAs(typeA, a, p * strideA + x) *
                   tp_emu::loadAs(typeB, b, p * strideB + y);
          }
          long long at = p * strideC + i + j * (long long)ldc;
          float prior = betaValue == 0 ? 0 : tp_emu::loadAs(typeC, c, at);
          tp_emu::storeAs(typeC, c, at, alphaValue * sum + betaValue * prior);
        }
    return 0;
  });
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t opA, cublasOperation_t opB, int m,
    int n, int k, const float *alpha, const float *a, int lda,
    long long strideA, const float *b, int ldb, long long strideB,
    const float *beta, float *c, int ldc, long long strideC, int batch) {
  if (!tp_emu::onDevice("cublasSgemmStridedBatched (a, b, c)", a, b, c) ||
      !tp_emu::argumentsInStreamOrder("cublasSgemmStridedBatched",
                                      handle->stream, a, b, c))
    return CUBLAS_STATUS_INVALID_VALUE;
  return tp_emu::queueGemm(handle, opA, opB, m, n, k, alpha, a, lda, strideA, b,
                           ldb, strideB, beta, c, ldc, strideC, batch);
}
inline cublasStatus_t cublasDgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t opA, cublasOperation_t opB, int m,
    int n, int k, const double *alpha, const double *a, int lda,
    long long strideA, const double *b, int ldb, long long strideB,
    const double *beta, double *c, int ldc, long long strideC, int batch) {
  if (!tp_emu::onDevice("cublasDgemmStridedBatched (a, b, c)", a, b, c) ||
      !tp_emu::argumentsInStreamOrder("cublasDgemmStridedBatched",
                                      handle->stream, a, b, c))
    return CUBLAS_STATUS_INVALID_VALUE;
  return tp_emu::queueGemm(handle, opA, opB, m, n, k, alpha, a, lda, strideA, b,
                           ldb, strideB, beta, c, ldc, strideC, batch);
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
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
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
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  default:
    return 8;
  }
}

/// For __half and __nv_bfloat16, each combination is computed in float
/// (their conversions) and rounded back.
template <typename T>
void reduceInto(T *acc, const T *in, size_t count, ncclRedOp_t op) {
  using Math = std::conditional_t<std::is_class_v<T>, float, T>;
  for (size_t i = 0; i < count; ++i) {
    Math x = acc[i], y = in[i];
    switch (op) {
    case ncclSum:
      acc[i] = T(x + y);
      break;
    case ncclProd:
      acc[i] = T(x * y);
      break;
    case ncclMax:
      acc[i] = T(std::max(x, y));
      break;
    case ncclMin:
      acc[i] = T(std::min(x, y));
      break;
    }
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
  case ncclFloat16:
    return reduceInto(static_cast<__half *>(acc),
                      static_cast<const __half *>(in), count, op);
  case ncclBfloat16:
    return reduceInto(static_cast<__nv_bfloat16 *>(acc),
                      static_cast<const __nv_bfloat16 *>(in), count, op);
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

namespace tp_emu {
inline ncclResult_t ncclAllReduceNow(const void *send, void *recv, size_t count,
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
} // namespace tp_emu

namespace tp_emu {
inline ncclResult_t ncclAllGatherNow(const void *send, void *recv, size_t count,
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
} // namespace tp_emu

namespace tp_emu {
inline ncclResult_t ncclReduceScatterNow(const void *send, void *recv,
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
} // namespace tp_emu

namespace tp_emu {
inline ncclResult_t ncclSendNow(const void *send, size_t count,
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
} // namespace tp_emu

namespace tp_emu {
inline ncclResult_t ncclRecvNow(void *recv, size_t count, ncclDataType_t type,
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
} // namespace tp_emu

// Each NCCL call runs on its stream: now, or recorded by a capture and run
// at each replay (the peers' replays meet in the same order).
#define TP_EMU_QUEUE_NCCL(call)                                                \
  tp_emu::enqueue(stream, [=] { return static_cast<int>(call); }) == 0         \
      ? ncclSuccess                                                            \
      : ncclRemoteError

inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                                  ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
  if (!tp_emu::onDevice("ncclAllReduce (send, recv)", send, recv) ||
      !tp_emu::argumentsInStreamOrder("ncclAllReduce", stream, send, recv))
    return ncclInvalidArgument;
  return TP_EMU_QUEUE_NCCL(
      tp_emu::ncclAllReduceNow(send, recv, count, type, op, comm, stream));
}
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                                  ncclDataType_t type, ncclComm_t comm,
                                  cudaStream_t stream) {
  if (!tp_emu::onDevice("ncclAllGather (send, recv)", send, recv) ||
      !tp_emu::argumentsInStreamOrder("ncclAllGather", stream, send, recv))
    return ncclInvalidArgument;
  return TP_EMU_QUEUE_NCCL(
      tp_emu::ncclAllGatherNow(send, recv, count, type, comm, stream));
}
inline ncclResult_t ncclReduceScatter(const void *send, void *recv,
                                      size_t count, ncclDataType_t type,
                                      ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  if (!tp_emu::onDevice("ncclReduceScatter (send, recv)", send, recv) ||
      !tp_emu::argumentsInStreamOrder("ncclReduceScatter", stream, send, recv))
    return ncclInvalidArgument;
  return TP_EMU_QUEUE_NCCL(
      tp_emu::ncclReduceScatterNow(send, recv, count, type, op, comm, stream));
}
inline ncclResult_t ncclSend(const void *send, size_t count,
                             ncclDataType_t type, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
  if (!tp_emu::onDevice("ncclSend (send)", send) ||
      !tp_emu::argumentsInStreamOrder("ncclSend", stream, send))
    return ncclInvalidArgument;
  return TP_EMU_QUEUE_NCCL(
      tp_emu::ncclSendNow(send, count, type, peer, comm, stream));
}
inline ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type,
                             int peer, ncclComm_t comm, cudaStream_t stream) {
  if (!tp_emu::onDevice("ncclRecv (recv)", recv) ||
      !tp_emu::argumentsInStreamOrder("ncclRecv", stream, recv))
    return ncclInvalidArgument;
  return TP_EMU_QUEUE_NCCL(
      tp_emu::ncclRecvNow(recv, count, type, peer, comm, stream));
}
#undef TP_EMU_QUEUE_NCCL

/// __shfl_xor_sync(mask, value, laneMask): the value of lane
/// (lane ^ laneMask) of the same warp, once every lane has offered its own.
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int laneMask, int = 32) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "a shuffle moves 8 bytes");
  tp_emu::Lanes *l = tp_emu::activeLanes;
  if (!l || mask != 0xffffffffu) {
    std::fprintf(stderr, "tp_cuda_emulation: __shfl_xor_sync %s\n",
                 l ? "with a partial mask"
                   : "in a kernel not launched with "
                     "tp_emu::launchWarps");
    std::abort();
  }
  unsigned me = l->current;
  std::memcpy(&l->slots[me], &value, sizeof(T));
  tp_emu::warpBarrier();
  T other;
  std::memcpy(&other,
              &l->slots[(me & ~31u) | ((me & 31u) ^ unsigned(laneMask))],
              sizeof(T));
  // No lane offers its next value before every lane has read this one.
  tp_emu::warpBarrier();
  return other;
}

/// __syncwarp(mask): waits until every lane of the warp reaches it (the
/// lanes' memory accesses before it are then seen by all of them after it;
/// here memory is simply shared).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  tp_emu::Lanes *l = tp_emu::activeLanes;
  if (!l || mask != 0xffffffffu) {
    std::fprintf(stderr, "tp_cuda_emulation: __syncwarp %s\n",
                 l ? "with a partial mask"
                   : "in a kernel not launched with "
                     "tp_emu::launchWarps");
    std::abort();
  }
  tp_emu::warpBarrier();
}

/// __shfl_sync(mask, value, srcLane): the value of lane srcLane of the same
/// warp, once every lane has offered its own.
template <typename T>
T __shfl_sync(unsigned mask, T value, int srcLane, int = 32) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "a shuffle moves 8 bytes");
  tp_emu::Lanes *l = tp_emu::activeLanes;
  if (!l || mask != 0xffffffffu || srcLane < 0 || srcLane > 31) {
    std::fprintf(stderr, "tp_cuda_emulation: __shfl_sync %s\n",
                 !l ? "in a kernel not launched with tp_emu::launchWarps"
                 : mask != 0xffffffffu ? "with a partial mask"
                                       : "from a lane outside the warp");
    std::abort();
  }
  unsigned me = l->current;
  std::memcpy(&l->slots[me], &value, sizeof(T));
  tp_emu::warpBarrier();
  T other;
  std::memcpy(&other, &l->slots[(me & ~31u) | unsigned(srcLane)], sizeof(T));
  tp_emu::warpBarrier();
  return other;
}

#endif // TP_CUDA_EMULATION_H
