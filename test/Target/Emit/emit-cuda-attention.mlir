// RUN: tp-translate --emit-cuda %s -split-input-file | FileCheck %s

// Scaled dot-product attention as the import writes it after partition:
// S = Q Kᵀ, X = S * scale + mask, softmax over the keys (max, exp, sum,
// divide), O = P V. It becomes one kernel: a warp per query row, online
// softmax over blocks of 32 keys, the mask read at (row, key), and no
// buffer for S, X, the statistics or P.
#qmap = affine_map<(b, i, j, d) -> (b, i, d)>
#kmap = affine_map<(b, i, j, d) -> (b, j, d)>
#smap = affine_map<(b, i, j, d) -> (b, i, j)>
#id = affine_map<(b, i, j) -> (b, i, j)>
#mask = affine_map<(b, i, j) -> (i, j)>
#row = affine_map<(b, i, j) -> (b, i)>
#pmap = affine_map<(b, i, e, j) -> (b, i, j)>
#vmap = affine_map<(b, i, e, j) -> (b, j, e)>
#omap = affine_map<(b, i, e, j) -> (b, i, e)>

// CHECK-LABEL: // Attention
// CHECK-SAME: 2 x (4 queries x 40 keys), depth 8, value width 8; one warp per query row, online softmax, no scores in memory
// CHECK-NEXT: __global__ void [[KERNEL:kernel[0-9]+]](const float *__restrict__ q, const float *__restrict__ kt, const float *__restrict__ v, float *__restrict__ o, const float *__restrict__ x4, const float c0) {
// CHECK: const std::int64_t limit = 40;
// CHECK: for (std::int64_t first = 0; first < limit; first += 32) {
// CHECK: s += static_cast<float>(q[b * 32LL + row * 8LL + d]) * static_cast<float>(kt[b * 320LL + j * 8LL + d]);
// CHECK: = s * c0;
// CHECK: + x4[row * 40LL + j];
// CHECK: blockMax = fmaxf(blockMax, __shfl_xor_sync(0xffffffffu, blockMax, offset));
// CHECK: const float weight = __shfl_sync(0xffffffffu, p, from);
// CHECK: acc[c] += weight * static_cast<float>(v[b * 320LL + key * 8LL + col]);
// CHECK: o[b * 32LL + row * 8LL + col] = acc[c] / runSum;
// CHECK-LABEL: static void fn_main(tp::cuda::Rank *context
// CHECK-NOT: cublas
// CHECK: [[KERNEL]]<<<tp::cuda::blocksForWarps(8), tp::cuda::threadsForWarps(8), 0, context->stream>>>(a0, a1, a2, {{v[0-9]+}}, a3, {{v[0-9]+}});
// CHECK-NOT: tp::cuda::release(context, a
func.func @main(%q: tensor<2x4x8xf32> {tp.input = "q"}, %k: tensor<2x40x8xf32> {tp.input = "k"},
                %v: tensor<2x40x8xf32> {tp.input = "v"}, %m: tensor<4x40xf32> {tp.input = "mask"})
    -> (tensor<2x4x8xf32> {tp.output = "o"}) {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.35355339 : f32
  %se = tensor.empty() : tensor<2x4x40xf32>
  %sz = linalg.fill ins(%zero : f32) outs(%se : tensor<2x4x40xf32>) -> tensor<2x4x40xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<2x4x8xf32>, tensor<2x40x8xf32>) outs(%sz : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %x = linalg.generic {indexing_maps = [#id, #mask, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s, %m : tensor<2x4x40xf32>, tensor<4x40xf32>) outs(%se : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %scale : f32
    %r = arith.addf %p, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %re = tensor.empty() : tensor<2x4xf32>
  %mi = linalg.fill ins(%lowest : f32) outs(%re : tensor<2x4xf32>) -> tensor<2x4xf32>
  %mx = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x4x40xf32>) outs(%mi : tensor<2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x4xf32>
  %e = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %mx : tensor<2x4x40xf32>, tensor<2x4xf32>) outs(%se : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %lz = linalg.fill ins(%zero : f32) outs(%re : tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%e : tensor<2x4x40xf32>) outs(%lz : tensor<2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x4xf32>
  %pr = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%e, %l : tensor<2x4x40xf32>, tensor<2x4xf32>) outs(%se : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %oe = tensor.empty() : tensor<2x4x8xf32>
  %oz = linalg.fill ins(%zero : f32) outs(%oe : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %out = linalg.generic {indexing_maps = [#pmap, #vmap, #omap], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%pr, %v : tensor<2x4x40xf32>, tensor<2x40x8xf32>) outs(%oz : tensor<2x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x4x8xf32>
  return %out : tensor<2x4x8xf32>
}

// -----

// The probabilities are also returned (a model output): they must be
// stored, so the chain stays as it is.
#qmap = affine_map<(b, i, j, d) -> (b, i, d)>
#kmap = affine_map<(b, i, j, d) -> (b, j, d)>
#smap = affine_map<(b, i, j, d) -> (b, i, j)>
#id = affine_map<(b, i, j) -> (b, i, j)>
#row = affine_map<(b, i, j) -> (b, i)>
#pmap = affine_map<(b, i, e, j) -> (b, i, j)>
#vmap = affine_map<(b, i, e, j) -> (b, j, e)>
#omap = affine_map<(b, i, e, j) -> (b, i, e)>
// CHECK-NOT: // Attention
// CHECK-LABEL: static void fn_main(tp::cuda::Rank *context
// CHECK: cublasSgemmStridedBatched
// CHECK: cublasSgemmStridedBatched
func.func @main(%q: tensor<2x4x8xf32> {tp.input = "q"}, %k: tensor<2x40x8xf32> {tp.input = "k"},
                %v: tensor<2x40x8xf32> {tp.input = "v"})
    -> (tensor<2x4x8xf32> {tp.output = "o"}, tensor<2x4x40xf32> {tp.output = "p"}) {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.35355339 : f32
  %se = tensor.empty() : tensor<2x4x40xf32>
  %sz = linalg.fill ins(%zero : f32) outs(%se : tensor<2x4x40xf32>) -> tensor<2x4x40xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<2x4x8xf32>, tensor<2x40x8xf32>) outs(%sz : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s : tensor<2x4x40xf32>) outs(%se : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %o: f32):
    %p = arith.mulf %a, %scale : f32
    linalg.yield %p : f32
  } -> tensor<2x4x40xf32>
  %re = tensor.empty() : tensor<2x4xf32>
  %mi = linalg.fill ins(%lowest : f32) outs(%re : tensor<2x4xf32>) -> tensor<2x4xf32>
  %mx = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x4x40xf32>) outs(%mi : tensor<2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x4xf32>
  %e = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %mx : tensor<2x4x40xf32>, tensor<2x4xf32>) outs(%se : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %lz = linalg.fill ins(%zero : f32) outs(%re : tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%e : tensor<2x4x40xf32>) outs(%lz : tensor<2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x4xf32>
  %pr = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%e, %l : tensor<2x4x40xf32>, tensor<2x4xf32>) outs(%se : tensor<2x4x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x4x40xf32>
  %oe = tensor.empty() : tensor<2x4x8xf32>
  %oz = linalg.fill ins(%zero : f32) outs(%oe : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %out = linalg.generic {indexing_maps = [#pmap, #vmap, #omap], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%pr, %v : tensor<2x4x40xf32>, tensor<2x40x8xf32>) outs(%oz : tensor<2x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x4x8xf32>
  return %out, %pr : tensor<2x4x8xf32>, tensor<2x4x40xf32>
}
