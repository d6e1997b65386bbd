// RUN: tp-opt %s -split-input-file --tp-kv-cache=max-seq=8 -verify-diagnostics | FileCheck %s

#id = affine_map<(b, h, s, d) -> (b, h, s, d)>

// A decode step (one new position after 7): the past input becomes a cache
// of all 8 positions, written at the new cache_position input; attention
// reads the cache; the present output is gone.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[IDS:[^:]+]]: tensor<1x1xi64> {tp.input = "input_ids"}
// CHECK-SAME: %[[CACHE:[^:]+]]: tensor<1x2x8x4xf32> {tp.cache = "past_key_values.0.key"}
// CHECK-SAME: %[[POS:[^:]+]]: tensor<i64> {tp.input = "cache_position"}
// CHECK-SAME: -> (tensor<1x2x8x4xf32> {tp.output = "scores"})
// CHECK: %[[NEW:.+]] = linalg.fill
// CHECK: %[[K:.+]] = tp.cache_update %[[NEW]] into %[[CACHE]][%[[POS]]] dim = 2 : tensor<1x2x1x4xf32> into tensor<1x2x8x4xf32>, tensor<i64>
// CHECK: %[[S:.+]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x2x8x4xf32>)
// CHECK-NOT: tensor.concat
// CHECK: return %[[S]] : tensor<1x2x8x4xf32>
func.func @main(%ids: tensor<1x1xi64> {tp.input = "input_ids"},
                %past: tensor<1x2x7x4xf32> {tp.input = "past_key_values.0.key"})
    -> (tensor<1x2x8x4xf32> {tp.output = "scores"},
        tensor<1x2x8x4xf32> {tp.output = "present.0.key"}) {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<1x2x1x4xf32>
  %new = linalg.fill ins(%one : f32) outs(%e : tensor<1x2x1x4xf32>) -> tensor<1x2x1x4xf32>
  %kv = tensor.concat dim(2) %past, %new : (tensor<1x2x7x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x8x4xf32>
  %e2 = tensor.empty() : tensor<1x2x8x4xf32>
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%kv : tensor<1x2x8x4xf32>) outs(%e2 : tensor<1x2x8x4xf32>) {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %x : f32
    linalg.yield %m : f32
  } -> tensor<1x2x8x4xf32>
  return %s, %kv : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

#id = affine_map<(b, h, s, d) -> (b, h, s, d)>

// A prefill (no past positions): attention reads the step's own entries;
// the cache update only writes, and stays (it is declared to write memory).
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[CACHE:[^:]+]]: tensor<1x2x8x4xf32> {tp.cache = "past_key_values.0.key"}
// CHECK-SAME: %[[POS:[^:]+]]: tensor<i64> {tp.input = "cache_position"}
// CHECK: %[[NEW:.+]] = linalg.fill
// CHECK: tp.cache_update %[[NEW]] into %[[CACHE]][%[[POS]]] dim = 2 : tensor<1x2x3x4xf32> into tensor<1x2x8x4xf32>, tensor<i64>
// CHECK: linalg.generic {{.*}} ins(%[[NEW]] : tensor<1x2x3x4xf32>)
func.func @main(%past: tensor<1x2x0x4xf32> {tp.input = "past_key_values.0.key"})
    -> (tensor<1x2x3x4xf32> {tp.output = "scores"},
        tensor<1x2x3x4xf32> {tp.output = "present.0.key"}) {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<1x2x3x4xf32>
  %new = linalg.fill ins(%one : f32) outs(%e : tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %kv = tensor.concat dim(2) %past, %new : (tensor<1x2x0x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %e2 = tensor.empty() : tensor<1x2x3x4xf32>
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%kv : tensor<1x2x3x4xf32>) outs(%e2 : tensor<1x2x3x4xf32>) {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %x : f32
    linalg.yield %m : f32
  } -> tensor<1x2x3x4xf32>
  return %s, %kv : tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>
}

// -----

// Past positions that are neither max-seq - 1 (a step) nor 0 (a prefill).
func.func @main(%past: tensor<1x2x5x4xf32> {tp.input = "past_key_values.0.key"},
                %new: tensor<1x2x1x4xf32> {tp.input = "new"})
    -> (tensor<1x2x6x4xf32> {tp.output = "present.0.key"}) {
  // expected-error @+1 {{tp-kv-cache: input 'past_key_values.0.key' has 5 past positions and the step 1; with max-seq 8 a step of 1 needs 7 (or 0, a prefill)}}
  %kv = tensor.concat dim(2) %past, %new : (tensor<1x2x5x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x6x4xf32>
  return %kv : tensor<1x2x6x4xf32>
}

// -----

// No past/present pair: a model exported without its cache.
// expected-error @+1 {{tp-kv-cache: no KV cache in the model}}
func.func @main(%x: tensor<2x3xf32> {tp.input = "x"}) -> (tensor<2x3xf32> {tp.output = "y"}) {
  return %x : tensor<2x3xf32>
}

// -----

#id2 = affine_map<(b, s) -> (b, s)>

// OPT's positions: computed over the [B, past + 1] mask and sliced at its
// last position, the export's place for the step's token. The decode step
// puts it at cache_position, so the slice becomes a read there; a slice of
// the mask at any other offset stays.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[MASK:[^:]+]]: tensor<2x8xi64> {tp.input = "attention_mask"}
// CHECK-SAME: %[[POS:[^:]+]]: tensor<i64> {tp.input = "cache_position"}
// CHECK: %[[M:.+]] = linalg.generic {{.*}} ins(%[[MASK]] : tensor<2x8xi64>)
// CHECK: %[[AT:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[M]], %[[POS]] : tensor<2x8xi64>, tensor<i64>)
// CHECK: %[[I:.+]] = linalg.index 1 : index
// CHECK: %[[J:.+]] = linalg.index 2 : index
// CHECK: %[[P:.+]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[Q:.+]] = arith.addi %[[P]], %[[I]] : index
// CHECK: arith.cmpi eq, %[[J]], %[[Q]] : index
// CHECK: %[[FIRST:.+]] = tensor.extract_slice %[[M]][0, 0] [2, 1] [1, 1]
// CHECK: return %[[AT]], %[[FIRST]]
func.func @main(%mask: tensor<2x8xi64> {tp.input = "attention_mask"},
                %past: tensor<2x2x7x4xf32> {tp.input = "past_key_values.0.key"},
                %new: tensor<2x2x1x4xf32> {tp.input = "new"})
    -> (tensor<2x1xi64> {tp.output = "position"},
        tensor<2x1xi64> {tp.output = "first"},
        tensor<2x2x8x4xf32> {tp.output = "present.0.key"}) {
  %e = tensor.empty() : tensor<2x8xi64>
  %m = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%mask : tensor<2x8xi64>) outs(%e : tensor<2x8xi64>) {
  ^bb0(%x: i64, %y: i64):
    %d = arith.addi %x, %x : i64
    linalg.yield %d : i64
  } -> tensor<2x8xi64>
  %last = tensor.extract_slice %m[0, 7] [2, 1] [1, 1] : tensor<2x8xi64> to tensor<2x1xi64>
  %first = tensor.extract_slice %m[0, 0] [2, 1] [1, 1] : tensor<2x8xi64> to tensor<2x1xi64>
  %kv = tensor.concat dim(2) %past, %new : (tensor<2x2x7x4xf32>, tensor<2x2x1x4xf32>) -> tensor<2x2x8x4xf32>
  return %last, %first, %kv : tensor<2x1xi64>, tensor<2x1xi64>, tensor<2x2x8x4xf32>
}

// -----

#q = affine_map<(b, i, j) -> (i, j)>
#s = affine_map<(b, i, j) -> (b, i, j)>

// A prefill chunk (3 new positions after 5): the export's causal mask,
// folded to a constant for queries at positions 5..7 (query i sees keys
// j <= 5 + i), is the same along each diagonal: it is kept as its
// diagonals (entry j - i + 2) and read shifted to where the chunk sits:
// entry (i, j) at key j + 5 - cache_position, the last key where that runs
// past the end. A table that is the same along the keys (%flat) is left
// alone.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[POS:[^:]+]]: tensor<i64> {tp.input = "cache_position"}
// CHECK: %[[DIAG:.+]] = arith.constant dense<{{\[\[}}0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, -1.000000e+09, -1.000000e+09]]> : tensor<1x10xf32>
// CHECK: %[[SHIFTED:.+]] = linalg.generic {{.*}} ins(%[[POS]] : tensor<i64>) outs({{.*}} : tensor<3x8xf32>)
// CHECK: %[[ZERO:.+]] = arith.constant 0 : index
// CHECK: %[[J:.+]] = linalg.index 1 : index
// CHECK: %[[AT:.+]] = arith.index_cast
// CHECK: %[[BASE:.+]] = arith.constant 5 : index
// CHECK: %[[LAST:.+]] = arith.constant 7 : index
// CHECK: %[[PLUS:.+]] = arith.addi %[[J]], %[[BASE]]
// CHECK: %[[SUB:.+]] = arith.subi %[[PLUS]], %[[AT]]
// CHECK: %[[MIN:.+]] = arith.minsi %[[SUB]], %[[LAST]]
// CHECK: %[[KEY:.+]] = arith.maxsi %[[MIN]], %[[ZERO]]
// CHECK: %[[I:.+]] = linalg.index 0 : index
// CHECK: %[[TWO:.+]] = arith.constant 2 : index
// CHECK: %[[D:.+]] = arith.subi %[[KEY]], %[[I]]
// CHECK: %[[U:.+]] = arith.addi %[[D]], %[[TWO]]
// CHECK: tensor.extract %[[DIAG]][%[[ZERO]], %[[U]]] : tensor<1x10xf32>
// CHECK: %[[FLAT:.+]] = arith.constant dense<{{\[\[}}1.000000e+00
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %[[SHIFTED]], %[[FLAT]] : tensor<1x3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>)
func.func @main(%past: tensor<1x5x4xf32> {tp.input = "past_key_values.0.key"})
    -> (tensor<1x3x8xf32> {tp.output = "scores"},
        tensor<1x8x4xf32> {tp.output = "present.0.key"}) {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<1x3x4xf32>
  %new = linalg.fill ins(%one : f32) outs(%e : tensor<1x3x4xf32>) -> tensor<1x3x4xf32>
  %kv = tensor.concat dim(1) %past, %new : (tensor<1x5x4xf32>, tensor<1x3x4xf32>) -> tensor<1x8x4xf32>
  %e2 = tensor.empty() : tensor<1x3x8xf32>
  %scores = linalg.generic {indexing_maps = [affine_map<(b, i, j, d) -> (b, i, d)>, affine_map<(b, i, j, d) -> (b, j, d)>, affine_map<(b, i, j, d) -> (b, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%new, %kv : tensor<1x3x4xf32>, tensor<1x8x4xf32>) outs(%e2 : tensor<1x3x8xf32>) {
  ^bb0(%x: f32, %k: f32, %acc: f32):
    %p = arith.mulf %x, %k : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<1x3x8xf32>
  %mask = arith.constant dense<[[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0e9, -1.0e9],
                                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0e9],
                                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<3x8xf32>
  %flat = arith.constant dense<[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
                                [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                                [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]]> : tensor<3x8xf32>
  %masked = linalg.generic {indexing_maps = [#s, #q, #q, #s], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%scores, %mask, %flat : tensor<1x3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) outs(%e2 : tensor<1x3x8xf32>) {
  ^bb0(%x: f32, %m: f32, %f: f32, %y: f32):
    %a = arith.addf %x, %m : f32
    %b = arith.mulf %a, %f : f32
    linalg.yield %b : f32
  } -> tensor<1x3x8xf32>
  return %masked, %kv : tensor<1x3x8xf32>, tensor<1x8x4xf32>
}
