// RUN: tp-opt %s --tp-annotate-inits | FileCheck %s

// The count of labels that are not ignored: an elementwise op on a
// replicated input alone, feeding only a rank-0 result. Propagation reads
// its init through an annotate_for_users shard.shard but leaves the empty's
// own result unannotated; the pass annotates it alike.
// CHECK-LABEL: func.func @count
// CHECK: %[[S:.*]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK: %[[E:.*]] = tensor.empty() : tensor<14xf32>
// CHECK: %[[R:.*]] = shard.shard %[[E]] to %[[S]] : tensor<14xf32>
// CHECK: shard.shard %[[R]] to %[[S]] annotate_for_users : tensor<14xf32>
#id = affine_map<(d0) -> (d0)>
module {
  shard.grid @grid(shape = 2)
  func.func @count(%labels: tensor<14xi64>) -> tensor<14xf32> {
    %sharding = shard.sharding @grid split_axes = [[]] : !shard.sharding
    %in = shard.shard %labels to %sharding annotate_for_users : tensor<14xi64>
    %e = tensor.empty() : tensor<14xf32>
    %init = shard.shard %e to %sharding annotate_for_users : tensor<14xf32>
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%in : tensor<14xi64>) outs(%init : tensor<14xf32>) {
    ^bb0(%l: i64, %o: f32):
      %c = arith.constant -100 : i64
      %one = arith.constant 1.0 : f32
      %zero = arith.constant 0.0 : f32
      %k = arith.cmpi ne, %l, %c : i64
      %v = arith.select %k, %one, %zero : f32
      linalg.yield %v : f32
    } -> tensor<14xf32>
    %out = shard.shard %r to %sharding : tensor<14xf32>
    return %out : tensor<14xf32>
  }
}
