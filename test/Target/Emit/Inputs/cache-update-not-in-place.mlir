// A cache that is not a tp.cache argument cannot be written in place.
func.func @main(%new: tensor<1x1x1x4xf32> {tp.input = "new"},
                %cache: tensor<1x1x8x4xf32> {tp.input = "cache"},
                %pos: tensor<i64> {tp.input = "cache_position"})
    -> (tensor<1x1x8x4xf32> {tp.output = "k"}) {
  %k = tp.cache_update %new into %cache[%pos] dim = 2 : tensor<1x1x1x4xf32> into tensor<1x1x8x4xf32>, tensor<i64>
  return %k : tensor<1x1x8x4xf32>
}
