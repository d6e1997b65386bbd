// Attention over keys and values that are f32 model inputs (no KV cache),
// the keys divided by a scale as they are transposed (DeBERTa-v2:
// `key.transpose(-1, -2) / scale`, the scale a constant outside the copy),
// with Q scaled before the product: under --dtype bf16 (tp-convert-dtype)
// Q is a bf16 activation, K and V stay f32, and the transpose of K rounds
// each of its elements to bf16 as it copies it.
#tmap = affine_map<(b, d, j) -> (b, j, d)>
#tid = affine_map<(b, d, j) -> (b, d, j)>
#qmap = affine_map<(b, i, j, d) -> (b, i, d)>
#kmap = affine_map<(b, i, j, d) -> (b, d, j)>
#smap = affine_map<(b, i, j, d) -> (b, i, j)>
#id = affine_map<(b, i, j) -> (b, i, j)>
#mask = affine_map<(b, i, j) -> (i, j)>
#row = affine_map<(b, i, j) -> (b, i)>
#pmap = affine_map<(b, i, e, j) -> (b, i, j)>
#vmap = affine_map<(b, i, e, j) -> (b, j, e)>
#omap = affine_map<(b, i, e, j) -> (b, i, e)>
func.func @main(%q: tensor<2x1x8xf32> {tp.input = "q"}, %m: tensor<1x40xf32> {tp.input = "mask"},
                %kc: tensor<2x40x8xf32> {tp.input = "keys"},
                %vc: tensor<2x40x8xf32> {tp.input = "values"})
    -> (tensor<2x1x8xf32> {tp.output = "o"}) {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.35355339 : f32
  %kscale = arith.constant 1.41421354 : f32
  %qe = tensor.empty() : tensor<2x1x8xf32>
  %qs = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%q : tensor<2x1x8xf32>) outs(%qe : tensor<2x1x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %scale : f32
    linalg.yield %r : f32
  } -> tensor<2x1x8xf32>
  %te = tensor.empty() : tensor<2x8x40xf32>
  %kt = linalg.generic {indexing_maps = [#tmap, #tid], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%kc : tensor<2x40x8xf32>) outs(%te : tensor<2x8x40xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.divf %a, %kscale : f32
    linalg.yield %r : f32
  } -> tensor<2x8x40xf32>
  %se = tensor.empty() : tensor<2x1x40xf32>
  %sz = linalg.fill ins(%zero : f32) outs(%se : tensor<2x1x40xf32>) -> tensor<2x1x40xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%qs, %kt : tensor<2x1x8xf32>, tensor<2x8x40xf32>) outs(%sz : tensor<2x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x1x40xf32>
  %x = linalg.generic {indexing_maps = [#id, #mask, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s, %m : tensor<2x1x40xf32>, tensor<1x40xf32>) outs(%se : tensor<2x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x1x40xf32>
  %re = tensor.empty() : tensor<2x1xf32>
  %mi = linalg.fill ins(%lowest : f32) outs(%re : tensor<2x1xf32>) -> tensor<2x1xf32>
  %mx = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x1x40xf32>) outs(%mi : tensor<2x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x1xf32>
  %e = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %mx : tensor<2x1x40xf32>, tensor<2x1xf32>) outs(%se : tensor<2x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<2x1x40xf32>
  %lz = linalg.fill ins(%zero : f32) outs(%re : tensor<2x1xf32>) -> tensor<2x1xf32>
  %l = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%e : tensor<2x1x40xf32>) outs(%lz : tensor<2x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x1xf32>
  %pr = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%e, %l : tensor<2x1x40xf32>, tensor<2x1xf32>) outs(%se : tensor<2x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x1x40xf32>
  %oe = tensor.empty() : tensor<2x1x8xf32>
  %oz = linalg.fill ins(%zero : f32) outs(%oe : tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  %out = linalg.generic {indexing_maps = [#pmap, #vmap, #omap], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%pr, %vc : tensor<2x1x40xf32>, tensor<2x40x8xf32>) outs(%oz : tensor<2x1x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x1x8xf32>
  return %out : tensor<2x1x8xf32>
}
