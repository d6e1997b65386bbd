// RUN: tp-opt %s -split-input-file --tp-convert-dtype=dtype=bf16 | FileCheck %s
// RUN: tp-opt %s -split-input-file --tp-convert-dtype=dtype=f16 | FileCheck %s --check-prefix=F16
// RUN: tp-opt %s -split-input-file --tp-convert-dtype=dtype=f32 | FileCheck %s --check-prefix=F32
// RUN: not tp-opt %s -split-input-file --tp-convert-dtype=dtype=fp8 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: tp-opt %s -split-input-file --tp-convert-dtype="dtype=bf16 master-weights=true" | FileCheck %s --check-prefix=MASTER

// Master weights (training): the weight arguments stay f32, each rounded
// once where the function starts, and the program reads the rounded copy.
// MASTER-LABEL: func.func @projection(
// MASTER-SAME: %[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32> {tp.weight = "w"}, %[[B:.*]]: tensor<16xf32> {tp.weight = "b"})
// MASTER: %[[WR:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xbf16>)
// MASTER: %[[BR:.*]] = linalg.generic {{.*}} ins(%[[B]] : tensor<16xf32>) outs(%{{.*}} : tensor<16xbf16>)
// MASTER: linalg.generic {{.*}} ins(%{{.*}}, %[[WR]] : tensor<4x8xbf16>, tensor<8x16xbf16>)

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
shard.grid @grid(shape = 2)

// A row-parallel projection, then a bias add and a row sum:
// - the weight argument is narrowed, the input and the result are not;
// - the contraction takes the f32 input rounded to bf16 (as a bf16 model
//   takes its inputs: both operands narrow, so both targets' GEMMs take
//   it), reads both through extensions and accumulates in f32, and its sum
//   is rounded once, before the all-reduce, which moves bf16;
// - the elementwise add stores bf16 and computes in f32;
// - the reduction keeps its f32 accumulator; the return gets f32.
// CHECK-LABEL: func.func @projection(
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xbf16> {tp.weight = "w"}, %[[B:.*]]: tensor<16xbf16> {tp.weight = "b"})
// CHECK-SAME: -> (tensor<4x16xf32>, tensor<4xf32>)
// CHECK: %[[XR:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<4x8xf32>) outs(%{{.*}} : tensor<4x8xbf16>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[MM:.*]] = linalg.generic {{.*}} ins(%[[XR]], %[[W]] : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: bf16, %[[WIN:.*]]: bf16, %[[ACC:.*]]: f32):
// CHECK-NEXT: %[[INEXT:.*]] = arith.extf %[[IN]] : bf16 to f32
// CHECK-NEXT: %[[WEXT:.*]] = arith.extf %[[WIN]] : bf16 to f32
// CHECK-NEXT: arith.mulf %[[INEXT]], %[[WEXT]] : f32
// CHECK: -> tensor<4x16xf32>
// CHECK: %[[ROUNDED:.*]] = linalg.generic {{.*}} ins(%[[MM]] : tensor<4x16xf32>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[SUM:.*]] = shard.all_reduce %[[ROUNDED]] {{.*}} : tensor<4x16xbf16> -> tensor<4x16xbf16>
// CHECK: %[[BIASED:.*]] = linalg.generic {{.*}} ins(%[[SUM]], %[[B]] : tensor<4x16xbf16>, tensor<16xbf16>) outs(%{{.*}} : tensor<4x16xbf16>)
// CHECK: arith.extf
// CHECK: arith.extf
// CHECK: %[[ADD:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// Rounding saturates finite values at bf16's largest; infinities stay.
// CHECK-NEXT: %[[HI:.*]] = arith.constant 3.38953139E+38 : f32
// CHECK-NEXT: %[[LO:.*]] = arith.constant -3.38953139E+38 : f32
// CHECK-NEXT: %[[INF:.*]] = arith.constant 0x7F800000 : f32
// CHECK-NEXT: %[[MAX:.*]] = arith.maximumf %[[ADD]], %[[LO]] : f32
// CHECK-NEXT: %[[MIN:.*]] = arith.minimumf %[[MAX]], %[[HI]] : f32
// CHECK-NEXT: %[[ABS:.*]] = math.absf %[[ADD]] : f32
// CHECK-NEXT: %[[ISINF:.*]] = arith.cmpf oeq, %[[ABS]], %[[INF]] : f32
// CHECK-NEXT: %[[KEPT:.*]] = arith.select %[[ISINF]], %[[ADD]], %[[MIN]] : f32
// CHECK-NEXT: %[[T:.*]] = arith.truncf %[[KEPT]] : f32 to bf16
// CHECK-NEXT: linalg.yield %[[T]] : bf16
// CHECK: %[[ROWS:.*]] = linalg.generic {{.*}} ins(%[[BIASED]] : tensor<4x16xbf16>) outs(%{{.*}} : tensor<4xf32>)
// CHECK: -> tensor<4xf32>
// CHECK: %[[WIDE:.*]] = linalg.generic {{.*}} ins(%[[BIASED]] : tensor<4x16xbf16>)
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: return %[[WIDE]], %[[ROWS]] : tensor<4x16xf32>, tensor<4xf32>
// F16-LABEL: func.func @projection(
// F16-SAME: tensor<8x16xf16> {tp.weight = "w"}
// F16: arith.constant 6.550400e+04 : f32
// F16: arith.truncf %{{.*}} : f32 to f16
// F16: shard.all_reduce {{.*}} : tensor<4x16xf16> -> tensor<4x16xf16>
// F32-LABEL: func.func @projection(
// F32-SAME: tensor<8x16xf32> {tp.weight = "w"}
// F32-NOT: bf16
// F32-NOT: arith.extf
// BAD: error: tp-convert-dtype: dtype must be bf16, f16 or f32, not 'fp8'
func.func @projection(%x: tensor<4x8xf32>, %w: tensor<8x16xf32> {tp.weight = "w"}, %b: tensor<16xf32> {tp.weight = "b"}) -> (tensor<4x16xf32>, tensor<4xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) {
  ^bb0(%a: f32, %bw: f32, %c: f32):
    %p = arith.mulf %a, %bw : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %sum = shard.all_reduce %mm on @grid grid_axes = [0] : tensor<4x16xf32> -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %biased = linalg.generic {indexing_maps = [#id, affine_map<(d0, d1) -> (d1)>, #id], iterator_types = ["parallel", "parallel"]} ins(%sum, %b : tensor<4x16xf32>, tensor<16xf32>) outs(%e2 : tensor<4x16xf32>) {
  ^bb0(%v: f32, %bv: f32, %o: f32):
    %r = arith.addf %v, %bv : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %e3 = tensor.empty() : tensor<4xf32>
  %acc3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<4xf32>) -> tensor<4xf32>
  %rows = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%biased : tensor<4x16xf32>) outs(%acc3 : tensor<4xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %o, %v : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %biased, %rows : tensor<4x16xf32>, tensor<4xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// An embedding lookup reads the narrowed table in its body: the extracted
// element is extended where it is read. A reshape moves bf16 as it is.
// CHECK-LABEL: func.func @lookup(
// CHECK-SAME: %{{.*}}: tensor<4xi64>, %[[TABLE:.*]]: tensor<10x8xbf16> {tp.weight = "table"})
// CHECK: %[[ROWS:.*]] = linalg.generic
// CHECK: %[[E:.*]] = tensor.extract %[[TABLE]][%{{.*}}, %{{.*}}] : tensor<10x8xbf16>
// CHECK-NEXT: %[[EXT:.*]] = arith.extf %[[E]] : bf16 to f32
// CHECK: arith.maximumf %[[EXT]]
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: -> tensor<4x8xbf16>
// CHECK: tensor.expand_shape %[[ROWS]] {{.*}} : tensor<4x8xbf16> into tensor<2x2x8xbf16>
func.func @lookup(%ids: tensor<4xi64>, %table: tensor<10x8xf32> {tp.weight = "table"}) -> tensor<2x2x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %rows = linalg.generic {indexing_maps = [#row, #id], iterator_types = ["parallel", "parallel"]} ins(%ids : tensor<4xi64>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%id: i64, %o: f32):
    %i = arith.index_cast %id : i64 to index
    %j = linalg.index 1 : index
    %v = tensor.extract %table[%i, %j] : tensor<10x8xf32>
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  %r = tensor.expand_shape %rows [[0, 1], [2]] output_shape [2, 2, 8] : tensor<4x8xf32> into tensor<2x2x8xf32>
  return %r : tensor<2x2x8xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// A KV cache is the runtime's buffer, which no binding of the user's sees:
// it is narrowed like a weight. The step's keys, an f32 input, are rounded
// into it; a key computed in the program is already narrow and goes in as
// it is. Readers of the updated cache extend it in their bodies.
// CHECK-LABEL: func.func @cache(
// CHECK-SAME: %[[K:.*]]: tensor<2x1x4xf32> {tp.input = "k"}, %[[POS:.*]]: tensor<i64> {tp.input = "cache_position"}, %[[KC:.*]]: tensor<2x8x4xbf16> {tp.cache = "past.key"}, %[[VC:.*]]: tensor<2x8x4xbf16> {tp.cache = "past.value"})
// CHECK: %[[KR:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<2x1x4xf32>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[KU:.*]] = tp.cache_update %[[KR]] into %[[KC]][%[[POS]]] dim = 1 : tensor<2x1x4xbf16> into tensor<2x8x4xbf16>, tensor<i64>
// CHECK: %[[VN:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<2x1x4xf32>) outs(%{{.*}} : tensor<2x1x4xbf16>)
// CHECK: arith.negf
// CHECK-NOT: linalg.generic
// CHECK: %[[VU:.*]] = tp.cache_update %[[VN]] into %[[VC]][%[[POS]]] dim = 1 : tensor<2x1x4xbf16> into tensor<2x8x4xbf16>, tensor<i64>
// CHECK: linalg.generic {{.*}} ins(%[[KU]], %[[VU]] : tensor<2x8x4xbf16>, tensor<2x8x4xbf16>)
// CHECK-NEXT: ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %{{.*}}: bf16):
// CHECK-NEXT: arith.extf %[[A]] : bf16 to f32
// CHECK: return %{{.*}} : tensor<2x8x4xf32>
// F32-LABEL: func.func @cache(
// F32-SAME: tensor<2x8x4xf32> {tp.cache = "past.key"}
func.func @cache(%k: tensor<2x1x4xf32> {tp.input = "k"}, %pos: tensor<i64> {tp.input = "cache_position"},
                 %kc: tensor<2x8x4xf32> {tp.cache = "past.key"}, %vc: tensor<2x8x4xf32> {tp.cache = "past.value"})
    -> tensor<2x8x4xf32> {
  %ku = tp.cache_update %k into %kc[%pos] dim = 1 : tensor<2x1x4xf32> into tensor<2x8x4xf32>, tensor<i64>
  %ve = tensor.empty() : tensor<2x1x4xf32>
  %vn = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%k : tensor<2x1x4xf32>) outs(%ve : tensor<2x1x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  } -> tensor<2x1x4xf32>
  %vu = tp.cache_update %vn into %vc[%pos] dim = 1 : tensor<2x1x4xf32> into tensor<2x8x4xf32>, tensor<i64>
  %se = tensor.empty() : tensor<2x8x4xf32>
  %s = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ku, %vu : tensor<2x8x4xf32>, tensor<2x8x4xf32>) outs(%se : tensor<2x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x8x4xf32>
  return %s : tensor<2x8x4xf32>
}

// -----

// The backward of a training step (ops marked tp.backward) rounds without
// saturating, so that a gradient past f16's range is an infinity that loss
// scaling sees; the forward's result saturates (minimumf/maximumf before
// the truncation).
// F16-LABEL: func.func @backward(
// F16: linalg.generic
// F16: arith.maximumf
// F16: arith.minimumf
// F16: arith.truncf %{{.*}} : f32 to f16
// F16: linalg.generic
// F16-NOT: arith.minimumf
// F16: arith.truncf %{{.*}} : f32 to f16
// F16-NEXT: linalg.yield
// F16: return
func.func @backward(%x: tensor<4xf32> {tp.input = "x"}) -> (tensor<4xf32>, tensor<4xf32>) {
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%f : tensor<4xf32>) outs(%e : tensor<4xf32>) attrs = {tp.backward} {
  ^bb0(%a: f32, %o: f32):
    %n = arith.mulf %a, %a : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  return %f, %g : tensor<4xf32>, tensor<4xf32>
}
