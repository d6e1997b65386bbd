//===- ArtifactFormat.h - the contract of a tp-compile artifact -*- C++ -*-===//
//
// The version numbers and file names shared by tp-compile's artifact writer
// and its readers (the runtime, tp-export-weights), in a header that needs
// neither MLIR nor the runtime. Macros, so that the compiler (mlir::tp) and
// the runtime (tp::rt) each name them in their own namespace.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_ARTIFACTFORMAT_H
#define TP_RUNTIME_ARTIFACTFORMAT_H

/// Bumped whenever a reader of manifest.json would need to change.
/// 3: one rank-file entry per weight argument, named by its key (a piece of
/// a fused weight by its range, `w[:, 0:64]`), with `initializer`, `slice`
/// and `role` (was `parallel`); `pieces` is gone.
/// 4: `SHA256SUMS` covers every file of the artifact; the model library
/// exports `tp_model_signature`; inputs read as indices carry
/// `index_range`.
/// 5: `generation` ({max_seq, max_batch}) and stage arguments of kind
/// `cache` (a KV cache the runtime allocates) for a decode step.
/// 6: a model output may carry `split_dim`: each rank of the last stage
/// returns its block of that dim (a generation artifact's logits), and the
/// output's `shape` is the whole output's.
/// 7: the model library's entry points are the versioned C ABI of
/// tp_model_abi.h (one export, tp_model_query), for --target cpu as for
/// cuda; a rank's `function` must be its stage's.
/// 8: `generation.prefill` is a list of chunk programs by ascending
/// `length`, each reading the cache written before it (chunked prefill).
#define TP_ARTIFACT_FORMAT_VERSION 8

/// The checksum file, in `sha256sum` format ("<hex>  <name>" per line), so
/// that `sha256sum -c SHA256SUMS` inside the artifact checks it too. The
/// runtime checks `manifest.json` against it before parsing it, and the
/// model library before loading it.
#define TP_ARTIFACT_CHECKSUMS "SHA256SUMS"

/// The model library's self-description, returned by its exported
/// `const char *tp_model_signature(void)` and by the `signature` entry of
/// its C ABI (tp_model_abi.h):
///
///   tp-model-signature 1
///   grid tp=2 pp=1 microbatches=1
///   main(F32[2,16],I64[16,768])->(F32[2,16,50304])
///
/// one line per stage function, in stage order, with every argument and
/// result as its safetensors dtype and shape. The runtime builds the same
/// text from manifest.json and refuses to run when the two differ: every
/// buffer size the runtime uses is then one the library was compiled for.
#define TP_MODEL_SIGNATURE_VERSION 1
#define TP_MODEL_SIGNATURE_SYMBOL "tp_model_signature"

#endif // TP_RUNTIME_ARTIFACTFORMAT_H
