// RUN: tp-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(tp-plan-tensor-parallel{devices=2},tp-plan-sequence-parallel)' | FileCheck %s

// An MLP block with a residual: h = x + pos (the stream), then
// h -> w1 (column) -> relu -> w2 (row) -> + b2 -> + h. The residual add's
// result and the stream it adds to are split on the sequence dim (dim 1 of
// [batch, seq, hidden]) by plain shard.shard ops (not annotate_for_users):
// they annotate the producer, so partition ends w2's block with an
// all-reduce and a slice, and gathers h before w1.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @mlp_residual(
// CHECK: %[[H:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<2x16x64xf32>, tensor<2x16x64xf32>)
// CHECK: } -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[SH:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: %[[HS:.*]] = shard.shard %[[H]] to %[[SH]] : tensor<2x16x64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[HS]], %{{.*}} : tensor<2x16x64xf32>, tensor<64x256xf32>)
// CHECK: %[[BIAS:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<2x16x64xf32>, tensor<64xf32>)
// CHECK: %[[ADD:.*]] = linalg.generic {{.*}} ins(%[[BIAS]], %[[HS]] : tensor<2x16x64xf32>, tensor<2x16x64xf32>)
// CHECK: } -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[SA:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: %[[AS:.*]] = shard.shard %[[ADD]] to %[[SA]] : tensor<2x16x64xf32>
// CHECK: shard.shard %[[AS]] to %{{.*}} annotate_for_users
func.func @mlp_residual(%x: tensor<2x16x64xf32> {tp.input = "x"}, %pos: tensor<2x16x64xf32> {tp.input = "pos"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}, %b2: tensor<64xf32> {tp.weight = "b2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x64xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %pos : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %up = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %e2 = tensor.empty() : tensor<2x16x256xf32>
  %act = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%up : tensor<2x16x256xf32>) outs(%e2 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %cst : f32
    linalg.yield %r : f32
  } -> tensor<2x16x256xf32>
  %e3 = tensor.empty() : tensor<2x16x64xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %down = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%act, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f3 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %e4 = tensor.empty() : tensor<2x16x64xf32>
  %bias = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%down, %b2 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%e4 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %b = arith.addf %in, %in_1 : f32
    linalg.yield %b : f32
  } -> tensor<2x16x64xf32>
  %e5 = tensor.empty() : tensor<2x16x64xf32>
  %res = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%bias, %h : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e5 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  return %res : tensor<2x16x64xf32>
}

// -----

// A position table (a weight, [seq, hidden]) added to the stream, as
// Whisper's encoder adds its sinusoids: the stream splits on the sequence,
// so the table is read split on its dim 0 (each rank reads its positions'
// rows); read whole, sharding propagation could not split the add.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
#sh = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @position_table(
// CHECK: tensor.empty() : tensor<2x16x64xf32>
// CHECK-NEXT: %[[SP:.*]] = shard.sharding @grid split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-NEXT: %[[P:.*]] = shard.shard %{{.*}} to %[[SP]] annotate_for_users : tensor<16x64xf32>
// CHECK-NEXT: %[[H:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[P]] : tensor<2x16x64xf32>, tensor<16x64xf32>)
// CHECK: } -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[SH:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: shard.shard %[[H]] to %[[SH]] : tensor<2x16x64xf32>
func.func @position_table(%x: tensor<2x16x64xf32> {tp.input = "x"}, %pos: tensor<16x64xf32> {tp.weight = "pos"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}, %b2: tensor<64xf32> {tp.weight = "b2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x64xf32>
  %h = linalg.generic {indexing_maps = [#id, #sh, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %pos : tensor<2x16x64xf32>, tensor<16x64xf32>) outs(%e0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %up = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %e2 = tensor.empty() : tensor<2x16x256xf32>
  %act = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%up : tensor<2x16x256xf32>) outs(%e2 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %cst : f32
    linalg.yield %r : f32
  } -> tensor<2x16x256xf32>
  %e3 = tensor.empty() : tensor<2x16x64xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %down = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%act, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f3 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %e4 = tensor.empty() : tensor<2x16x64xf32>
  %bias = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%down, %b2 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%e4 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %b = arith.addf %in, %in_1 : f32
    linalg.yield %b : f32
  } -> tensor<2x16x64xf32>
  %e5 = tensor.empty() : tensor<2x16x64xf32>
  %res = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%bias, %h : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e5 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  return %res : tensor<2x16x64xf32>
}


// -----

// The same MLP without the residual add: w2's block keeps its all-reduce,
// and nothing is split on the sequence dim.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @negative_no_residual(
// CHECK-NOT: shard.shard %{{[^ ]+}} to %{{[^ ]+}} :
// CHECK: return
func.func @negative_no_residual(%x: tensor<2x16x64xf32> {tp.input = "x"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}, %b2: tensor<64xf32> {tp.weight = "b2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %up = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %e3 = tensor.empty() : tensor<2x16x64xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // expected-warning @below {{tp-plan-sequence-parallel: no residual add after this row-parallel block; it keeps its all-reduce}}
  %down = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%up, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f3 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %e4 = tensor.empty() : tensor<2x16x64xf32>
  %bias = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%down, %b2 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%e4 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %b = arith.addf %in, %in_1 : f32
    linalg.yield %b : f32
  } -> tensor<2x16x64xf32>
  return %bias : tensor<2x16x64xf32>
}

// -----

// A sequence of 15 tokens does not divide by 2 devices: the block keeps its
// all-reduce, and nothing is split on the sequence dim.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @negative_sequence_not_divisible(
// CHECK-NOT: shard.shard %{{[^ ]+}} to %{{[^ ]+}} :
// CHECK: return
func.func @negative_sequence_not_divisible(%x: tensor<2x15x64xf32> {tp.input = "x"}, %pos: tensor<2x15x64xf32> {tp.input = "pos"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}) -> (tensor<2x15x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x15x64xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %pos : tensor<2x15x64xf32>, tensor<2x15x64xf32>) outs(%e0 : tensor<2x15x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x15x64xf32>
  %e1 = tensor.empty() : tensor<2x15x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x15x256xf32>) -> tensor<2x15x256xf32>
  %up = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w1 : tensor<2x15x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x15x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x15x256xf32>
  %e3 = tensor.empty() : tensor<2x15x64xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x15x64xf32>) -> tensor<2x15x64xf32>
  %down = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%up, %w2 : tensor<2x15x256xf32>, tensor<256x64xf32>) outs(%f3 : tensor<2x15x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x15x64xf32>
  %e5 = tensor.empty() : tensor<2x15x64xf32>
  // expected-warning @below {{tp-plan-sequence-parallel: sequence dim of 'tensor<2x15x64xf32>' does not divide by 2 devices; this block keeps its all-reduce}}
  %res = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%down, %h : tensor<2x15x64xf32>, tensor<2x15x64xf32>) outs(%e5 : tensor<2x15x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x15x64xf32>
  return %res : tensor<2x15x64xf32>
}

// -----

// The stream is the embedding lookup itself (no position add, no norm: a
// post-norm model's first layer reads it), and a column-parallel block reads
// it directly. A copy of the lookup carries the sequence split; the lookup
// (whose vocabulary loop the plan splits) and the block read as before.
#ids = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#table = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @embedding_stream(
// CHECK: %[[LOOKUP:.*]] = linalg.generic {{.*}} attrs = {tp.embedding = 64 : i64}
// CHECK: %[[COPY:.*]] = linalg.copy ins(%[[LOOKUP]] : tensor<2x16x64xf32>)
// CHECK-NEXT: %[[SC:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: %[[CS:.*]] = shard.shard %[[COPY]] to %[[SC]] : tensor<2x16x64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[CS]], %{{.*}} : tensor<2x16x64xf32>, tensor<64x256xf32>)
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[CS]] : tensor<2x16x64xf32>, tensor<2x16x64xf32>)
func.func @embedding_stream(%x: tensor<2x16xi64> {tp.input = "input_ids"}, %wte: tensor<64x64xf32> {tp.weight = "wte"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x64xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %h = linalg.generic {indexing_maps = [#ids, #table, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %wte : tensor<2x16xi64>, tensor<64x64xf32>) outs(%f0 : tensor<2x16x64xf32>) attrs = {tp.embedding = 64 : i64} {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %i = arith.index_cast %in : i64 to index
    %j = linalg.index 3 : index
    %eq = arith.cmpi eq, %i, %j : index
    %v = arith.select %eq, %in_1, %cst : f32
    %s = arith.addf %out, %v : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %up = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %e3 = tensor.empty() : tensor<2x16x64xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %down = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%up, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f3 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %e4 = tensor.empty() : tensor<2x16x64xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%down, %h : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e4 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

// Two projections kept whole (their outputs are contracted with each other
// over the features: a shared Q-K bottleneck's scores) read the stream,
// which no column-parallel projection reads (the MLP reads it through an
// elementwise op), and their results are narrower than it (16 + 16
// features of 64): one gather of the stream before them, as a block's one
// gather, not one per result.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#qk = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-LABEL: func.func @whole_projections(
// CHECK: %[[H:.*]] = shard.shard %{{[0-9]+}} to %{{[a-z_0-9]+}} : tensor<2x16x64xf32>
// CHECK: %[[WA:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [], []] : !shard.sharding
// CHECK: %[[GA:.*]] = shard.shard %[[H]] to %[[WA]] annotate_for_users : tensor<2x16x64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[GA]], %{{.*}} : tensor<2x16x64xf32>, tensor<64x16xf32>)
// CHECK: %[[WB:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [], []] : !shard.sharding
// CHECK: %[[GB:.*]] = shard.shard %[[H]] to %[[WB]] annotate_for_users : tensor<2x16x64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[GB]], %{{.*}} : tensor<2x16x64xf32>, tensor<64x16xf32>)
func.func @whole_projections(%x: tensor<2x16x64xf32> {tp.input = "x"}, %pos: tensor<2x16x64xf32> {tp.input = "pos"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}, %wa: tensor<64x16xf32> {tp.weight = "wa"}, %wb: tensor<64x16xf32> {tp.weight = "wb"}) -> (tensor<2x16x64xf32> {tp.output = "y"}, tensor<2x16x16xf32> {tp.output = "s"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x64xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %pos : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  %ea = tensor.empty() : tensor<2x16x16xf32>
  %fa = linalg.fill ins(%cst : f32) outs(%ea : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  // expected-warning @+1 {{contracts the split dim with another activation}}
  %a = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %wa : tensor<2x16x64xf32>, tensor<64x16xf32>) outs(%fa : tensor<2x16x16xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x16x16xf32>
  // expected-warning @+1 {{contracts the split dim with another activation}}
  %b = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %wb : tensor<2x16x64xf32>, tensor<64x16xf32>) outs(%fa : tensor<2x16x16xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x16x16xf32>
  %sc = linalg.generic {indexing_maps = [#bsh, #qk, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%a, %b : tensor<2x16x16xf32>, tensor<2x16x16xf32>) outs(%fa : tensor<2x16x16xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x16x16xf32>
  %hn = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h : tensor<2x16x64xf32>) outs(%e0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    linalg.yield %m : f32
  } -> tensor<2x16x64xf32>
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %up = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%hn, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x16x256xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %down = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%up, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f3 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  %res = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%down, %h : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  return %res, %sc : tensor<2x16x64xf32>, tensor<2x16x16xf32>
}
