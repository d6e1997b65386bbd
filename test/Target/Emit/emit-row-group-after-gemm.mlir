// RUN: tp-translate --emit-cuda %s | FileCheck %s --check-prefix=CUDA
// RUN: tp-translate --emit-cpp %s | FileCheck %s --check-prefix=CPP

// A row group may open with the only reader of a product: here
// tp-convert-dtype's rounding of a bf16 product's f32 sum to bf16, then an
// RMS-norm-like pair of nests over the same 4 rows that read the rounded
// rows (under --dtype bf16: the V projections of the zoo's GPT-J, Llama and
// Mistral, whose roundings open groups with the nests that move their
// heads; GPT-NeoX's attention output at 1 rank, with the residual adds and
// norms). The product computes that op with itself, which is decided when
// the product is emitted, after the groups were found: cuBLAS writes the
// sum in bf16 (CUDA), the packed kernel runs it as its epilogue (C++). The
// group then leaves it out and reads its result as an input. It did not:
// on CUDA the group's kernel read the f32 sum, which no buffer held
// (tp-compile aborted, "out of memory" while naming the kernel's
// arguments); on the CPU the op ran twice, as the epilogue and in the
// group, and the epilogue's buffer was never released.

#id = affine_map<(d0, d1) -> (d0, d1)>
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// CUDA: // a row group: 2 loop nests, a warp per row of [4]
// CUDA-NEXT: __global__ void [[K:kernel[0-9]+]](const BFloat16 *__restrict__ n0_p0,
// CUDA-LABEL: void fn_main(
// CUDA: BFloat16 *[[SUM:v[0-9]+]] = tp::cuda::allocate<BFloat16>(context, 256,
// CUDA: cublasGemmStridedBatchedEx({{.*}}, &beta, [[SUM]], CUDA_R_16BF,
// CUDA: // 2 loop nests as one kernel, a warp per row of [4] (a row group)
// CUDA-NEXT: // linalg.generic
// CUDA-NEXT: // written in bf16 by cuBLAS above
// CUDA: [[K]]<<<tp::cuda::blocksForWarps(4), tp::cuda::threadsForWarps(4), 0, context->stream>>>([[SUM]],
// CUDA-NOT: <<<

// CPP-LABEL: void fn_main(
// CPP: auto [[EPI:epilogue_v[0-9]+]] = [&]
// CPP: BFloat16 *__restrict p1 = [[ROUNDED:v[0-9]+]];
// CPP: tp::rt::Epilogue::of([[EPI]])
// CPP: // 2 loop nests as one pass per row of [4] (a row group)
// CPP-NEXT: // linalg.generic
// CPP-NEXT: // computed in the epilogue of the product above
// CPP-NOT: allocate({{.*}}BFloat16
// CPP: TP_LOOP_NEST {
// CPP: const BFloat16 *p0 = [[ROUNDED]];
func.func @main(%x: tensor<4x64xbf16> {tp.input = "x"},
                %w: tensor<64x64xbf16> {tp.weight = "w"},
                %g: tensor<64xbf16> {tp.weight = "g"})
    -> (tensor<4x64xbf16> {tp.output = "y"}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x64xf32>) -> tensor<4x64xf32>
  %sum = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                         iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x64xbf16>, tensor<64x64xbf16>) outs(%init : tensor<4x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x64xf32>
  %rempty = tensor.empty() : tensor<4x64xbf16>
  %rounded = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%sum : tensor<4x64xf32>) outs(%rempty : tensor<4x64xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %hi = arith.constant 3.38953139E+38 : f32
    %lo = arith.constant -3.38953139E+38 : f32
    %inf = arith.constant 0x7F800000 : f32
    %max = arith.maximumf %v, %lo : f32
    %min = arith.minimumf %max, %hi : f32
    %abs = math.absf %v : f32
    %isinf = arith.cmpf oeq, %abs, %inf : f32
    %sat = arith.select %isinf, %v, %min : f32
    %t = arith.truncf %sat : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x64xbf16>
  %sempty = tensor.empty() : tensor<4xf32>
  %sinit = linalg.fill ins(%zero : f32) outs(%sempty : tensor<4xf32>) -> tensor<4xf32>
  %squares = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%rounded : tensor<4x64xbf16>) outs(%sinit : tensor<4xf32>) {
  ^bb0(%v: bf16, %acc: f32):
    %ve = arith.extf %v : bf16 to f32
    %sq = arith.mulf %ve, %ve : f32
    %s = arith.addf %acc, %sq : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %y = linalg.generic {indexing_maps = [#id, #row, affine_map<(d0, d1) -> (d1)>, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%rounded, %squares, %g : tensor<4x64xbf16>, tensor<4xf32>, tensor<64xbf16>)
      outs(%rempty : tensor<4x64xbf16>) {
  ^bb0(%v: bf16, %ss: f32, %gv: bf16, %o: bf16):
    %ve = arith.extf %v : bf16 to f32
    %ge = arith.extf %gv : bf16 to f32
    %r = math.rsqrt %ss : f32
    %n = arith.mulf %ve, %r : f32
    %m = arith.mulf %n, %ge : f32
    %t = arith.truncf %m : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x64xbf16>
  return %y : tensor<4x64xbf16>
}
