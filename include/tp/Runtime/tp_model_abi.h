/*===- tp_model_abi.h - the C ABI of a compiled model library ----*- C -*-===*\
|*                                                                            *|
|* The one contract between a model library built by tp-compile (--target    *|
|* cpu or cuda) and the runtime that loads it: plain C types, no C++ class   *|
|* or exception crosses it. A library exports one symbol, tp_model_query;    *|
|* the runtime asks it for the version it was built against and gets a       *|
|* table of entry points, or null when the library speaks another version.   *|
|* tp-compile copies this header into every artifact beside the runtime      *|
|* header its code includes (tp_runtime.h, tp_cuda_runtime.h).               *|
|*                                                                            *|
|* Ranks are numbered row-major over (pipeline stage, tensor index): rank =  *|
|* stage * tp + tpIndex. A collective runs over a group: `size` ranks spaced *|
|* `stride` apart that include the caller.                                    *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef TP_RUNTIME_TP_MODEL_ABI_H
#define TP_RUNTIME_TP_MODEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a library built against one version would misbehave
 * under a runtime built against another. */
#define TP_MODEL_ABI_VERSION 1
#define TP_MODEL_QUERY_SYMBOL "tp_model_query"
/* A library is built with hidden visibility: these two are all it exports. */
#if defined(__GNUC__) || defined(__clang__)
#define TP_MODEL_EXPORT __attribute__((visibility("default")))
#else
#define TP_MODEL_EXPORT
#endif

/* Bytes of a world's id (unique_id); on CUDA an ncclUniqueId. */
#define TP_MODEL_UNIQUE_ID_BYTES 128

/* Element types, as tp::rt::DType numbers them. */
enum {
  TP_DTYPE_F32 = 0,
  TP_DTYPE_F64 = 1,
  TP_DTYPE_I64 = 2,
  TP_DTYPE_I32 = 3,
  TP_DTYPE_I16 = 4,
  TP_DTYPE_I8 = 5,
  TP_DTYPE_U8 = 6,
  TP_DTYPE_BOOL = 7,
  TP_DTYPE_F16 = 8,
  TP_DTYPE_BF16 = 9
};

/* Reductions, as tp::rt::Reduction numbers them. */
enum {
  TP_REDUCE_SUM = 0,
  TP_REDUCE_PRODUCT = 1,
  TP_REDUCE_MAX = 2,
  TP_REDUCE_MIN = 3
};

typedef struct tp_group {
  int32_t size;
  int32_t stride;
} tp_group;

/* The host's collectives, which a --target cpu library calls (threads of
 * one process, or MPI processes). Every function returns 0, or nonzero
 * with the reason in last_error(self) on the calling thread; the library
 * then abandons the stage and reports that reason. `site` names the op in
 * the model ("all_reduce at model.mlir:57") for timeout messages. Buffers
 * are as tp::rt::RankContext documents them (RankContext.h). */
typedef struct tp_host_comm {
  void *self;
  int (*all_reduce)(void *self, tp_group group, void *buffer, int64_t count,
                    int32_t dtype, int32_t op, const char *site);
  int (*all_gather)(void *self, tp_group group, const void *in, void *out,
                    int64_t outer, int64_t chunk_bytes, const char *site);
  int (*reduce_scatter)(void *self, tp_group group, const void *in, void *out,
                        int64_t outer, int64_t chunk, int32_t dtype, int32_t op,
                        const char *site);
  int (*send)(void *self, int32_t peer, const void *buffer, int64_t bytes,
              const char *site);
  int (*recv)(void *self, int32_t peer, void *buffer, int64_t bytes,
              const char *site);
  const char *(*last_error)(void *self);
} tp_host_comm;

/* What one rank is created with. */
typedef struct tp_rank_config {
  int32_t rank;
  int32_t world_size;
  /* CUDA: the device the rank runs on. CPU: unused. */
  int32_t device;
  /* CUDA: the world's id from unique_id(), the same on every rank (NCCL).
   * CPU: unused. */
  const void *unique_id;
  /* CPU: the collectives the rank calls. CUDA: unused (NCCL, inside the
   * library). */
  const tp_host_comm *comm;
} tp_rank_config;

/* One rank's state inside the library. */
typedef struct tp_model_rank tp_model_rank;

/* The entry points. A call that fails returns nonzero (or null) and leaves
 * its reason in last_error: for a rank, of that rank; for a null rank, of
 * the calling thread's last failed rank_create. */
typedef struct tp_model_api {
  uint32_t abi_version;
  /* "cpu" or "cuda". */
  const char *target;
  /* The library's own description of what it was compiled for (grid and
   * every stage's arguments and results; ArtifactFormat.h). */
  const char *(*signature)(void);
  /* Devices the rank_create `device` may name: CUDA devices visible (0
   * without a driver); -1 for a CPU library, which needs none. */
  int (*device_count)(void);
  /* Writes a fresh world id (TP_MODEL_UNIQUE_ID_BYTES) to `id`; a CPU
   * library writes zeros. */
  int (*unique_id)(void *id);
  /* Creates one rank. On CUDA every rank of the world must be created
   * concurrently (NCCL's initialisation is collective). */
  tp_model_rank *(*rank_create)(const tp_rank_config *config);
  /* Runs the stage function `stage` (the manifest's "function") on host
   * buffers: `args` in the function's argument order (inputs, weights and
   * KV caches), `results` preallocated. Weights and caches may stay
   * resident in the library (CUDA) between calls with the same pointers. */
  int (*rank_run)(tp_model_rank *rank, const char *stage, void *const *args,
                  void *const *results);
  /* Reorders the rows (dim 0: sequences) of a KV cache the rank holds for
   * the host buffer `cache` of `rows` rows of `row_bytes` each: row i takes
   * what row source[i] held (beam search keeping the beams it extends). */
  int (*rank_reorder_rows)(tp_model_rank *rank, void *cache, int64_t rows,
                           int64_t row_bytes, const int64_t *source);
  /* Never null. */
  const char *(*last_error)(tp_model_rank *rank);
  /* Makes peers waiting on this rank fail instead of hanging; callable
   * from any thread. A CPU library leaves this to the host's collectives. */
  void (*rank_abort)(tp_model_rank *rank);
  /* Releases the rank; null is ignored. */
  void (*rank_destroy)(tp_model_rank *rank);
} tp_model_api;

/* The one export: the entry points for `abi_version`, or null when the
 * library was built against another version. */
TP_MODEL_EXPORT const tp_model_api *tp_model_query(uint32_t abi_version);
/* The signature's text, also exported on its own (ArtifactFormat.h). */
TP_MODEL_EXPORT const char *tp_model_signature(void);
typedef const tp_model_api *(*tp_model_query_fn)(uint32_t abi_version);

#ifdef __cplusplus
} /* extern "C" */

/* Defines tp_model_query over the functions of namespace NS (a library's
 * side of the ABI, as RankContext.h and CudaRankContext.h write it) for
 * TARGET. */
#define TP_MODEL_DEFINE_QUERY(NS, TARGET)                                      \
  extern "C" TP_MODEL_EXPORT const tp_model_api *tp_model_query(               \
      uint32_t abi_version) {                                                  \
    static const tp_model_api api = {                                          \
        TP_MODEL_ABI_VERSION, TARGET,         NS::signature,  NS::deviceCount, \
        NS::uniqueId,         NS::createRank, NS::runRank,    NS::reorderRows, \
        NS::lastError,        NS::abortRank,  NS::destroyRank};                \
    return abi_version == TP_MODEL_ABI_VERSION ? &api : 0;                     \
  }
#endif

#endif /* TP_RUNTIME_TP_MODEL_ABI_H */
