// A decode step's grouped-query attention: 4 query heads over KV caches of
// 2 heads and 40 positions. Each K/V head is broadcast to the 2 query
// heads of its group ([1, 2, 40, 8] -> [1, 2, 2, 40, 8]) and merged into
// the heads dim ([1, 4, 40, 8]), as transformers' repeat_kv exports; K is
// then transposed for Q Kᵀ.
#rin = affine_map<(b, g, r, j, d) -> (b, g, j, d)>
#rout = affine_map<(b, g, r, j, d) -> (b, g, r, j, d)>
#tmap = affine_map<(b, h, d, j) -> (b, h, j, d)>
#tid = affine_map<(b, h, d, j) -> (b, h, d, j)>
#qmap = affine_map<(b, h, i, j, d) -> (b, h, i, d)>
#kmap = affine_map<(b, h, i, j, d) -> (b, h, d, j)>
#smap = affine_map<(b, h, i, j, d) -> (b, h, i, j)>
#id = affine_map<(b, h, i, j) -> (b, h, i, j)>
#row = affine_map<(b, h, i, j) -> (b, h, i)>
#pmap = affine_map<(b, h, i, e, j) -> (b, h, i, j)>
#vmap = affine_map<(b, h, i, e, j) -> (b, h, j, e)>
#omap = affine_map<(b, h, i, e, j) -> (b, h, i, e)>
func.func @main(%q: tensor<1x4x1x8xf32> {tp.input = "q"}, %kn: tensor<1x2x1x8xf32> {tp.input = "k"},
                %vn: tensor<1x2x1x8xf32> {tp.input = "v"},
                %pos: tensor<i64> {tp.input = "cache_position"},
                %kc: tensor<1x2x40x8xf32> {tp.cache = "past_key_values.0.key"},
                %vc: tensor<1x2x40x8xf32> {tp.cache = "past_key_values.0.value"})
    -> (tensor<1x4x1x8xf32> {tp.output = "o"}) {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.35355339 : f32
  %k = tp.cache_update %kn into %kc[%pos] dim = 2 : tensor<1x2x1x8xf32> into tensor<1x2x40x8xf32>, tensor<i64>
  %v = tp.cache_update %vn into %vc[%pos] dim = 2 : tensor<1x2x1x8xf32> into tensor<1x2x40x8xf32>, tensor<i64>
  %re5 = tensor.empty() : tensor<1x2x2x40x8xf32>
  %kr = linalg.generic {indexing_maps = [#rin, #rout], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%k : tensor<1x2x40x8xf32>) outs(%re5 : tensor<1x2x2x40x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x2x40x8xf32>
  %kh = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x40x8xf32> into tensor<1x4x40x8xf32>
  %vr = linalg.generic {indexing_maps = [#rin, #rout], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%v : tensor<1x2x40x8xf32>) outs(%re5 : tensor<1x2x2x40x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x2x40x8xf32>
  %vh = tensor.collapse_shape %vr [[0], [1, 2], [3], [4]] : tensor<1x2x2x40x8xf32> into tensor<1x4x40x8xf32>
  %te = tensor.empty() : tensor<1x4x8x40xf32>
  %kt = linalg.generic {indexing_maps = [#tmap, #tid], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%kh : tensor<1x4x40x8xf32>) outs(%te : tensor<1x4x8x40xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x4x8x40xf32>
  %se = tensor.empty() : tensor<1x4x1x40xf32>
  %sz = linalg.fill ins(%zero : f32) outs(%se : tensor<1x4x1x40xf32>) -> tensor<1x4x1x40xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %kt : tensor<1x4x1x8xf32>, tensor<1x4x8x40xf32>) outs(%sz : tensor<1x4x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x40xf32>
  %x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x4x1x40xf32>) outs(%se : tensor<1x4x1x40xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x40xf32>
  %re = tensor.empty() : tensor<1x4x1xf32>
  %mi = linalg.fill ins(%lowest : f32) outs(%re : tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %mx = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x : tensor<1x4x1x40xf32>) outs(%mi : tensor<1x4x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1xf32>
  %e = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %mx : tensor<1x4x1x40xf32>, tensor<1x4x1xf32>) outs(%se : tensor<1x4x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x40xf32>
  %lz = linalg.fill ins(%zero : f32) outs(%re : tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %l = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%e : tensor<1x4x1x40xf32>) outs(%lz : tensor<1x4x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1xf32>
  %pr = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%e, %l : tensor<1x4x1x40xf32>, tensor<1x4x1xf32>) outs(%se : tensor<1x4x1x40xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x40xf32>
  %oe = tensor.empty() : tensor<1x4x1x8xf32>
  %oz = linalg.fill ins(%zero : f32) outs(%oe : tensor<1x4x1x8xf32>) -> tensor<1x4x1x8xf32>
  %out = linalg.generic {indexing_maps = [#pmap, #vmap, #omap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%pr, %vh : tensor<1x4x1x40xf32>, tensor<1x4x40x8xf32>) outs(%oz : tensor<1x4x1x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x8xf32>
  return %out : tensor<1x4x1x8xf32>
}
