// RUN: tp-opt %s -split-input-file --tp-pad-vocabulary=devices=4 | FileCheck %s
// RUN: tp-opt %s -split-input-file --tp-parallelize=devices=4 | FileCheck %s --check-prefix=PART

#ids = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#table = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#lhs = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#rhs = affine_map<(d0, d1, d2, d3) -> (d3, d2)>

// A vocabulary of 10 on 4 devices: the embedding table and the LM head are
// padded with zeros to 12 rows / columns, and the padded logits are sliced
// off before the result. The pads come first in the function (one per
// weight, see the tied case below).
// CHECK-LABEL: func.func @main(
// CHECK: %[[HEAD:.*]] = tensor.pad %arg2 low[0, 0] high[0, 2]
// CHECK: %[[TABLE:.*]] = tensor.pad %arg1 low[0, 0] high[2, 0]
// CHECK: tensor<10x8xf32> to tensor<12x8xf32>
// CHECK: linalg.generic {{.*}} ins(%arg0, %[[TABLE]] : tensor<2x3xi64>, tensor<12x8xf32>) {{.*}} attrs =  {tp.embedding = 12 : i64}
// CHECK: %[[LOGITS:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[HEAD]] : tensor<2x3x8xf32>, tensor<8x12xf32>) outs(%{{.*}} : tensor<2x3x12xf32>)
// CHECK: %[[UNPAD:.*]] = tensor.extract_slice %[[LOGITS]][0, 0, 0] [2, 3, 10] [1, 1, 1] : tensor<2x3x12xf32> to tensor<2x3x10xf32>
// CHECK: return %[[UNPAD]]
// After partition each rank holds 3 rows of the padded table and 3 columns
// of the padded head, marked with their original and padded sizes.
// PART-LABEL: func.func @main(
// PART-SAME: tensor<3x8xf32> {tp.layout = #tp.layout<role = vocab, dim = 0, block = 0, padded = [10, 12]>, tp.weight = "wte"}
// PART-SAME: tensor<8x3xf32> {tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 1, padded = [10, 12]>, tp.weight = "head"}
// PART-NOT: tensor.pad
// PART: shard.all_gather {{.*}} : tensor<2x3x3xf32> -> tensor<2x3x12xf32>
// PART: tensor.extract_slice {{.*}} [2, 3, 10] [1, 1, 1] : tensor<2x3x12xf32> to tensor<2x3x10xf32>
func.func @main(%ids: tensor<2x3xi64> {tp.input = "input_ids"},
                %wte: tensor<10x8xf32> {tp.weight = "wte"},
                %head: tensor<8x10xf32> {tp.weight = "head"})
    -> (tensor<2x3x10xf32> {tp.output = "logits"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x3x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %h = linalg.generic {indexing_maps = [#ids, #table, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%ids, %wte : tensor<2x3xi64>, tensor<10x8xf32>) outs(%init : tensor<2x3x8xf32>) attrs = {tp.embedding = 10 : i64} {
  ^bb0(%id: i64, %row: f32, %acc: f32):
    %i = arith.index_cast %id : i64 to index
    %v = linalg.index 3 : index
    %hit = arith.cmpi eq, %i, %v : index
    %z = arith.constant 0.0 : f32
    %t = arith.select %hit, %row, %z : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<2x3x8xf32>
  %e2 = tensor.empty() : tensor<2x3x10xf32>
  %init2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x3x10xf32>) -> tensor<2x3x10xf32>
  %logits = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%h, %head : tensor<2x3x8xf32>, tensor<8x10xf32>) outs(%init2 : tensor<2x3x10xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x3x10xf32>
  return %logits : tensor<2x3x10xf32>
}

// -----

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>

// A contraction whose output does not reach a result is left alone: it is
// not an LM head.
// CHECK-LABEL: func.func @not_a_head(
// CHECK-NOT: tensor.pad
func.func @not_a_head(%x: tensor<2x8xf32> {tp.input = "x"},
                      %w: tensor<8x10xf32> {tp.weight = "w"},
                      %v: tensor<10x8xf32> {tp.weight = "v"})
    -> (tensor<2x8xf32> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x10xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x10xf32>) -> tensor<2x10xf32>
  %h = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<2x8xf32>, tensor<8x10xf32>) outs(%init : tensor<2x10xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x10xf32>
  %e2 = tensor.empty() : tensor<2x8xf32>
  %init2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %v : tensor<2x10xf32>, tensor<10x8xf32>) outs(%init2 : tensor<2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A head written as a named op (linalg.matmul) is generalized first; the
// padded weight is read before the widened contraction (it used to be
// created after it: "operand #1 does not dominate this use").
// CHECK-LABEL: func.func @named_head(
// CHECK: %[[W:.*]] = tensor.pad %arg1 low[0, 0] high[0, 2]
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%arg0, %[[W]] : tensor<2x6xf32>, tensor<6x12xf32>)
// CHECK: tensor.extract_slice %[[Y]][0, 0] [2, 10] [1, 1] : tensor<2x12xf32> to tensor<2x10xf32>
func.func @named_head(%x: tensor<2x6xf32> {tp.input = "x"},
                      %w: tensor<6x10xf32> {tp.weight = "head"})
    -> (tensor<2x10xf32> {tp.output = "logits"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x10xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x10xf32>) -> tensor<2x10xf32>
  %y = linalg.matmul ins(%x, %w : tensor<2x6xf32>, tensor<6x10xf32>) outs(%init : tensor<2x10xf32>) -> tensor<2x10xf32>
  return %y : tensor<2x10xf32>
}

// -----

#ids = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#table = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#lhs = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#tied = affine_map<(d0, d1, d2, d3) -> (d2, d3)>

// An LM head tied to the embedding, one weight read by both (as a
// TorchScript module has it; an ONNX export stores the head transposed, a
// second initializer): one pad serves both, and after partition the one
// argument is each rank's rows of the padded table.
// CHECK-LABEL: func.func @tied(
// CHECK: %[[PAD:.*]] = tensor.pad %arg1 low[0, 0] high[2, 0]
// CHECK-NOT: tensor.pad
// CHECK: linalg.generic {{.*}} ins(%arg0, %[[PAD]] : tensor<2x3xi64>, tensor<12x8xf32>)
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[PAD]] : tensor<2x3x8xf32>, tensor<12x8xf32>) outs(%{{.*}} : tensor<2x3x12xf32>)
// CHECK: tensor.extract_slice {{.*}} [2, 3, 10] [1, 1, 1] : tensor<2x3x12xf32> to tensor<2x3x10xf32>
// PART-LABEL: func.func @tied(
// PART-SAME: tensor<3x8xf32> {tp.layout = #tp.layout<role = vocab, dim = 0, block = 0, padded = [10, 12]>, tp.weight = "wte"}
// PART-NOT: tensor.pad
// PART: shard.all_gather {{.*}} : tensor<2x3x3xf32> -> tensor<2x3x12xf32>
func.func @tied(%ids: tensor<2x3xi64> {tp.input = "input_ids"},
                %wte: tensor<10x8xf32> {tp.weight = "wte"})
    -> (tensor<2x3x10xf32> {tp.output = "logits"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x3x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %h = linalg.generic {indexing_maps = [#ids, #table, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%ids, %wte : tensor<2x3xi64>, tensor<10x8xf32>) outs(%init : tensor<2x3x8xf32>) attrs = {tp.embedding = 10 : i64} {
  ^bb0(%id: i64, %row: f32, %acc: f32):
    %i = arith.index_cast %id : i64 to index
    %v = linalg.index 3 : index
    %hit = arith.cmpi eq, %i, %v : index
    %z = arith.constant 0.0 : f32
    %t = arith.select %hit, %row, %z : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<2x3x8xf32>
  %e2 = tensor.empty() : tensor<2x3x10xf32>
  %init2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x3x10xf32>) -> tensor<2x3x10xf32>
  %logits = linalg.generic {indexing_maps = [#lhs, #tied, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%h, %wte : tensor<2x3x8xf32>, tensor<10x8xf32>) outs(%init2 : tensor<2x3x10xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x3x10xf32>
  return %logits : tensor<2x3x10xf32>
}

// -----

// A bias broadcast along the other dims ([1, V], BART's final_logits_bias),
// which the importer reads through a collapse of its unit dim: the weight
// is padded on its V dim and collapsed again; the head is padded as
// without it.
// CHECK-LABEL: func.func @broadcast_bias(
// CHECK: %[[W:.*]] = tensor.pad %arg1 low[0, 0] high[0, 2]
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%arg0, %[[W]] : tensor<2x6xf32>, tensor<6x12xf32>)
// CHECK: %[[B:.*]] = tensor.pad %arg2 low[0, 0] high[0, 2]
// CHECK: %[[BC:.*]] = tensor.collapse_shape %[[B]] {{\[}}[0, 1]] : tensor<1x12xf32> into tensor<12xf32>
// CHECK: %[[Z:.*]] = linalg.generic {{.*}} ins(%[[Y]], %[[BC]] : tensor<2x12xf32>, tensor<12xf32>)
// CHECK: tensor.extract_slice %[[Z]][0, 0] [2, 10] [1, 1] : tensor<2x12xf32> to tensor<2x10xf32>
// PART-LABEL: func.func @broadcast_bias(
// PART-SAME: tensor<6x3xf32> {tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 0, padded = [10, 12]>
// PART-SAME: tensor<1x3xf32> {tp.layout = #tp.layout<role = bias, dim = 1, block = 0, padded = [10, 12]>
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#res = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @broadcast_bias(%x: tensor<2x6xf32> {tp.input = "x"},
                          %w: tensor<6x10xf32> {tp.weight = "head"},
                          %b: tensor<1x10xf32> {tp.weight = "final_logits_bias"})
    -> (tensor<2x10xf32> {tp.output = "logits"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x10xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x10xf32>) -> tensor<2x10xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #res], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<2x6xf32>, tensor<6x10xf32>) outs(%init : tensor<2x10xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x10xf32>
  %bc = tensor.collapse_shape %b [[0, 1]] : tensor<1x10xf32> into tensor<10xf32>
  %e2 = tensor.empty() : tensor<2x10xf32>
  %z = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%y, %bc : tensor<2x10xf32>, tensor<10xf32>) outs(%e2 : tensor<2x10xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<2x10xf32>
  return %z : tensor<2x10xf32>
}

// -----

// Elementwise ops after the head whose other operands are the same for
// every vocabulary entry (Gemma 2's soft-capping: tanh(logits / cap) * cap,
// the cap a scalar): padded with the head, the padding sliced off after
// them. After partition each rank caps its own block of the logits and the
// gather comes last.
// CHECK-LABEL: func.func @capped_logits(
// CHECK: %[[W:.*]] = tensor.pad %arg1 low[0, 0] high[0, 2]
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%arg0, %[[W]] : tensor<2x6xf32>, tensor<6x12xf32>)
// CHECK: %[[Z:.*]] = linalg.generic {{.*}} ins(%[[Y]], %{{.*}} : tensor<2x12xf32>, tensor<f32>)
// CHECK: math.tanh
// CHECK: tensor.extract_slice %[[Z]][0, 0] [2, 10] [1, 1] : tensor<2x12xf32> to tensor<2x10xf32>
// PART-LABEL: func.func @capped_logits(
// PART-SAME: tensor<6x3xf32> {tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 0, padded = [10, 12]>
// PART: math.tanh
// PART: shard.all_gather {{.*}} gather_axis = 1 : tensor<2x3xf32> -> tensor<2x12xf32>
// PART: tensor.extract_slice {{.*}} : tensor<2x12xf32> to tensor<2x10xf32>
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#res = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#scalar = affine_map<(d0, d1) -> ()>
func.func @capped_logits(%x: tensor<2x6xf32> {tp.input = "x"},
                         %w: tensor<6x10xf32> {tp.weight = "head"})
    -> (tensor<2x10xf32> {tp.output = "logits"}) {
  %zero = arith.constant 0.0 : f32
  %cap = arith.constant dense<3.0> : tensor<f32>
  %e = tensor.empty() : tensor<2x10xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x10xf32>) -> tensor<2x10xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #res], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<2x6xf32>, tensor<6x10xf32>) outs(%init : tensor<2x10xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x10xf32>
  %e2 = tensor.empty() : tensor<2x10xf32>
  %z = linalg.generic {indexing_maps = [#id, #scalar, #id], iterator_types = ["parallel", "parallel"]} ins(%y, %cap : tensor<2x10xf32>, tensor<f32>) outs(%e2 : tensor<2x10xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %d = arith.divf %a, %c : f32
    %t = math.tanh %d : f32
    %r = arith.mulf %t, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x10xf32>
  return %z : tensor<2x10xf32>
}
