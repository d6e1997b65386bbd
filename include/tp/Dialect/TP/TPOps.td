//===- TPOps.td - the tp dialect's ops ---------------------*- tablegen -*-===//
//
// The few computations upstream dialects have no op for.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_TPOPS_TD
#define TP_DIALECT_TP_TPOPS_TD

include "tp/Dialect/TP/TPDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class TP_Op<string mnemonic, list<Trait> traits = []>
    : Op<TP_Dialect, mnemonic, traits>;

def TP_CacheUpdateOp : TP_Op<"cache_update",
    [AllTypesMatch<["cache", "result"]>, MemoryEffects<[MemWrite]>]> {
  let summary = "Write a step's keys or values into a persistent KV cache";
  let description = [{
    `cache` is a function argument tagged `tp.cache`: a buffer of every
    position of the context (`--max-seq`) that the runtime owns and keeps
    between calls. The result is `cache` with `update` written at
    positions [`position`, `position` + size of `update` on `dim`) of
    `dim`; every other dim of the two is equal. It replaces the
    `concat(past, new)` of an export with a cache, so that a step writes
    only its own positions.

    Code generation writes in place: the result is the cache's buffer, and
    the cache has no other use. The op is kept even when its result is not
    read (a prefill writes the cache for the steps after it), so it is
    declared to write memory. A position outside the cache is a run-time
    error, never a write out of bounds.

    ```mlir
    %k = tp.cache_update %new into %cache[%pos] dim = 2
        : tensor<2x6x1x16xf32> into tensor<2x6x64x16xf32>, tensor<i64>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$update, AnyRankedTensor:$cache,
                       0DTensorOf<[I64]>:$position, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $update `into` $cache `[` $position `]` `dim` `=` $dim attr-dict `:`
    type($update) `into` type($cache) `,` type($position)
  }];
  let hasVerifier = 1;
}

#endif // TP_DIALECT_TP_TPOPS_TD
