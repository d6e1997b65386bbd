// RUN: tp-translate --emit-cpp %s -split-input-file | FileCheck %s

// Reductions on the C++ target: a sum, product, max or min over the
// innermost loop into one f32 accumulator, of at least 32 elements and a
// multiple of 16, runs in 16 partial results (lanes) that the host
// compiler vectorises: lane l takes every 16th element from l, from the
// combiner's identity; the lanes combine pairwise (8, 4, 2, 1), then into
// the accumulator, which holds the init. A C++ compiler keeps a plain
// float reduction loop scalar (it may not reorder the additions).

// CHECK-LABEL: // linalg.generic
// CHECK: for (std::int64_t [[ROW:i[0-9]+_0]] = 0; [[ROW]] < 4; ++[[ROW]])
// CHECK-NEXT: {
// CHECK-NEXT: float [[L:i[0-9]+_1_lanes]][16];
// CHECK-NEXT: std::fill_n([[L]], 16, float(0));
// CHECK-NEXT: for (std::int64_t [[B:i[0-9]+_1_block]] = 0; [[B]] < 64; [[B]] += 16)
// CHECK-NEXT: for (std::int64_t [[LANE:i[0-9]+_1_lane]] = 0; [[LANE]] < 16; ++[[LANE]]) {
// CHECK-NEXT: const std::int64_t [[J:i[0-9]+_1]] = [[B]] + [[LANE]];
// CHECK-NEXT: const float [[X:s[0-9]+]] = p0[[[ROW]] * 64LL + [[J]]];
// CHECK-NEXT: const float [[SQ:v[0-9]+]] = [[X]] * [[X]];
// CHECK-NEXT: const float [[S:v[0-9]+]] = [[L]][[[LANE]]] + [[SQ]];
// CHECK-NEXT: [[L]][[[LANE]]] = [[S]];
// CHECK-NEXT: }
// CHECK-NEXT: for (std::int64_t [[LANE]] = 8; [[LANE]] > 0; [[LANE]] /= 2)
// CHECK-NEXT: for (std::int64_t l = 0; l < [[LANE]]; ++l)
// CHECK-NEXT: [[L]][l] = [[L]][l] + [[L]][l + [[LANE]]];
// CHECK-NEXT: p1[[[ROW]]] = p1[[[ROW]]] + [[L]][0];

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<4x64xf32> {tp.input = "x"},
                %init: tensor<4xf32> {tp.input = "init"})
    -> (tensor<4xf32> {tp.output = "s"}) {
  %s = linalg.generic {indexing_maps = [#id, #row],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x64xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %sq = arith.mulf %v, %v : f32
    %r = arith.addf %acc, %sq : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// A NaN-propagating max (a softmax's) starts its lanes from -inf and
// combines them with maximumF.

// CHECK-LABEL: // linalg.generic
// CHECK: std::fill_n([[L:i[0-9]+_1_lanes]], 16, -std::numeric_limits<float>::infinity());
// CHECK: = maximumF([[L]][[[LANE:i[0-9]+_1_lane]]], {{s[0-9]+}});
// CHECK: [[L]][l] = maximumF([[L]][l], [[L]][l + [[LANE]]]);
// CHECK-NEXT: p1[{{.*}}] = maximumF(p1[{{.*}}], [[L]][0]);

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<2x32xf32> {tp.input = "x"},
                %init: tensor<2xf32> {tp.input = "init"})
    -> (tensor<2xf32> {tp.output = "m"}) {
  %m = linalg.generic {indexing_maps = [#id, #row],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<2x32xf32>) outs(%init : tensor<2xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.maximumf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<2xf32>
  return %m : tensor<2xf32>
}

// -----

// Too few elements (24), or a reduced dim that is not the innermost loop:
// the sequential loop.

// CHECK-LABEL: // linalg.generic
// CHECK-NOT: _lanes
// CHECK: for (std::int64_t [[J:i[0-9]+_1]] = 0; [[J]] < 24; ++[[J]])
// CHECK: p1[{{.*}}] = {{v[0-9]+}};
// CHECK-LABEL: // linalg.generic
// CHECK-NOT: _lanes
// CHECK: for (std::int64_t [[K:i[0-9]+_0]] = 0; [[K]] < 64; ++[[K]])
// CHECK-NOT: _lanes
// CHECK-LABEL: tp::rt::modelEntries()

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<4x24xf32> {tp.input = "x"},
                %y: tensor<64x4xf32> {tp.input = "y"},
                %init: tensor<4xf32> {tp.input = "init"})
    -> (tensor<4xf32> {tp.output = "s"}, tensor<4xf32> {tp.output = "t"}) {
  %s = linalg.generic {indexing_maps = [#id, #row],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x24xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %t = linalg.generic {indexing_maps = [#id, #col],
                       iterator_types = ["reduction", "parallel"]}
      ins(%y : tensor<64x4xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %s, %t : tensor<4xf32>, tensor<4xf32>
}
