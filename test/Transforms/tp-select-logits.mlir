// RUN: tp-opt --tp-select-logits %s --split-input-file | FileCheck %s

// A chunk's logits: an RMS norm of the stream x (its statistic, then its
// scale), then the LM head. The selection of one position moves above all
// three, which run on one position: x, read by the statistic and by the
// scale, gets one selection for each.

#x3 = affine_map<(b, s, h) -> (b, s, h)>
#w1 = affine_map<(b, s, h) -> (h)>
#r2 = affine_map<(b, s, h) -> (b, s)>
#lhs = affine_map<(b, s, v, h) -> (b, s, h)>
#rhs = affine_map<(b, s, v, h) -> (h, v)>
#out = affine_map<(b, s, v, h) -> (b, s, v)>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %{{.*}}: tensor<2x8x4xf32> {tp.input = "hidden"}, %[[POS:.*]]: tensor<i64> {tp.input = "logits_position"}
// CHECK-SAME: -> (tensor<2x1x10xf32> {tp.output = "logits"})
func.func @main(%x: tensor<2x8x4xf32> {tp.input = "hidden"},
                %g: tensor<4xf32> {tp.weight = "norm"},
                %w: tensor<4x10xf32> {tp.weight = "head"})
    -> (tensor<2x8x10xf32> {tp.output = "logits"}) {
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2x8xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: %[[XROW0:.*]] = linalg.generic {{.*}} ins(%arg0, %[[POS]] : tensor<2x8x4xf32>, tensor<i64>) outs(%{{.*}} : tensor<2x1x4xf32>)
  // CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[XROW0]] : tensor<2x1x4xf32>) outs(%{{.*}} : tensor<2x1xf32>)
  %sum = linalg.generic {indexing_maps = [#x3, #r2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x8x4xf32>) outs(%z2 : tensor<2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %sq = arith.mulf %a, %a : f32
    %r = arith.addf %o, %sq : f32
    linalg.yield %r : f32
  } -> tensor<2x8xf32>
  %e3 = tensor.empty() : tensor<2x8x4xf32>
  // CHECK: %[[XROW:.*]] = linalg.generic {{.*}} ins(%arg0, %[[POS]] : tensor<2x8x4xf32>, tensor<i64>) outs(%{{.*}} : tensor<2x1x4xf32>)
  // CHECK: %[[N:.*]] = linalg.generic {{.*}} ins(%[[XROW]], %[[SUM]], %arg2 : {{.*}}) outs(%{{.*}} : tensor<2x1x4xf32>)
  %n = linalg.generic {indexing_maps = [#x3, #r2, #w1, #x3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %sum, %g : tensor<2x8x4xf32>, tensor<2x8xf32>, tensor<4xf32>) outs(%e3 : tensor<2x8x4xf32>) {
  ^bb0(%a: f32, %s: f32, %c: f32, %o: f32):
    %q = math.rsqrt %s : f32
    %y = arith.mulf %a, %q : f32
    %r = arith.mulf %y, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x4xf32>
  %el = tensor.empty() : tensor<2x8x10xf32>
  %zl = linalg.fill ins(%zero : f32) outs(%el : tensor<2x8x10xf32>) -> tensor<2x8x10xf32>
  // CHECK: %[[INIT:.*]] = linalg.fill {{.*}} outs(%{{.*}} : tensor<2x1x10xf32>)
  // CHECK: %[[L:.*]] = linalg.generic {{.*}} ins(%[[N]], %arg3 : tensor<2x1x4xf32>, tensor<4x10xf32>) outs(%[[INIT]] : tensor<2x1x10xf32>)
  %l = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%n, %w : tensor<2x8x4xf32>, tensor<4x10xf32>) outs(%zl : tensor<2x8x10xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %o, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x8x10xf32>
  // CHECK: return %[[L]] : tensor<2x1x10xf32>
  return %l : tensor<2x8x10xf32>
}

// -----

// The selection itself: a sum over the positions of the one that equals
// logits_position (a lookup the emitters read as one row). A producer
// that reads its position through linalg.index (here a position bias)
// computes every position, and the selection stays below it.

#id = affine_map<(b, s, v) -> (b, s, v)>
// CHECK-LABEL: func.func @main
// CHECK: %[[B:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<2x8x10xf32>)
// CHECK: linalg.index 1
// CHECK: %[[ROW:.*]] = linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[B]], %arg1 : tensor<2x8x10xf32>, tensor<i64>)
// CHECK: ^bb0(%[[IN:.*]]: f32, %[[P:.*]]: i64, %[[OUT:.*]]: f32):
// CHECK-NEXT: %[[KEY:.*]] = arith.index_cast %[[P]] : i64 to index
// CHECK-NEXT: %[[I:.*]] = linalg.index 3 : index
// CHECK-NEXT: %[[HIT:.*]] = arith.cmpi eq, %[[I]], %[[KEY]] : index
// CHECK: %[[PICK:.*]] = arith.select %[[HIT]], %[[IN]], %{{.*}} : f32
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[OUT]], %[[PICK]] : f32
// CHECK-NEXT: linalg.yield %[[SUM]] : f32
// CHECK: return %[[ROW]] : tensor<2x1x10xf32>
func.func @main(%x: tensor<2x8x10xf32> {tp.input = "logits_in"}) -> (tensor<2x8x10xf32> {tp.output = "logits"}) {
  %e = tensor.empty() : tensor<2x8x10xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<2x8x10xf32>) outs(%e : tensor<2x8x10xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f32
    %r = arith.addf %a, %f : f32
    linalg.yield %r : f32
  } -> tensor<2x8x10xf32>
  return %b : tensor<2x8x10xf32>
}

// -----

// A producer whose result is read elsewhere too (here returned as well)
// computes every position; the selection stays below it.

#e = affine_map<(b, s, v) -> (b, s, v)>
// CHECK-LABEL: func.func @main
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<2x8x10xf32>)
// CHECK: %[[ROW:.*]] = linalg.generic {{.*}} ins(%[[Y]], %arg1 : tensor<2x8x10xf32>, tensor<i64>)
// CHECK: return %[[ROW]], %[[Y]] : tensor<2x1x10xf32>, tensor<2x8x10xf32>
func.func @main(%x: tensor<2x8x10xf32> {tp.input = "x"})
    -> (tensor<2x8x10xf32> {tp.output = "logits"}, tensor<2x8x10xf32> {tp.output = "y"}) {
  %e0 = tensor.empty() : tensor<2x8x10xf32>
  %y = linalg.generic {indexing_maps = [#e, #e], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<2x8x10xf32>) outs(%e0 : tensor<2x8x10xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<2x8x10xf32>
  return %y, %y : tensor<2x8x10xf32>, tensor<2x8x10xf32>
}

// -----

// No output named logits, or one already one position long: nothing to do.

// CHECK-LABEL: func.func @main
// CHECK-NOT: logits_position
func.func @main(%x: tensor<2x1x10xf32> {tp.input = "x"}) -> (tensor<2x1x10xf32> {tp.output = "logits"}) {
  return %x : tensor<2x1x10xf32>
}
