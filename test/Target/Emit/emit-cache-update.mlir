// RUN: tp-translate --emit-cpp %s | FileCheck %s --check-prefix=CPP
// RUN: tp-translate --emit-cuda %s | FileCheck %s --check-prefix=CUDA
// RUN: not tp-translate --emit-cpp -split-input-file %S/Inputs/cache-update-not-in-place.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// A decode step's cache write is in place: the result is the cache
// argument's buffer, written at the position; CUDA reads the position on
// the device (a captured step replays with each token's position), and
// keeps the cache on the device between calls, as it does weights.

#id = affine_map<(b, h, s, d) -> (b, h, s, d)>

// CPP-LABEL: static void fn_main(
// CPP: float *[[CACHE:a[0-9]+]] = static_cast<float *>(args[1]); // KV cache "past_key_values.0.key"
// CPP: std::int64_t *[[POS:a[0-9]+]] = static_cast<std::int64_t *>(args[2]); // input "cache_position"
// CPP: tp::rt::writeCache([[CACHE]], {{[a-z0-9]+}}, [[POS]][0], 6LL, 16LL, 1LL, 4LL, "cache_update
// CUDA: tp::cuda::writeCache(context, {{[a-z0-9]+}}, {{[a-z0-9]+}}, {{[a-z0-9]+}}, 6LL, 16LL, 1LL, 4LL,
// CUDA: main_argIsWeight[] = {false, true, false}
func.func @main(%new: tensor<2x3x1x4xf32> {tp.input = "new"},
                %cache: tensor<2x3x16x4xf32> {tp.cache = "past_key_values.0.key"},
                %pos: tensor<i64> {tp.input = "cache_position"})
    -> (tensor<2x3x16x4xf32> {tp.output = "scores"}) {
  %k = tp.cache_update %new into %cache[%pos] dim = 2 : tensor<2x3x1x4xf32> into tensor<2x3x16x4xf32>, tensor<i64>
  %e = tensor.empty() : tensor<2x3x16x4xf32>
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%k : tensor<2x3x16x4xf32>) outs(%e : tensor<2x3x16x4xf32>) {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %x : f32
    linalg.yield %m : f32
  } -> tensor<2x3x16x4xf32>
  return %s : tensor<2x3x16x4xf32>
}
// ERR: error: code generation writes a KV cache in place: its cache must be a 'tp.cache' argument that nothing else reads
