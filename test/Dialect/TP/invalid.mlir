// RUN: tp-opt %s -split-input-file -verify-diagnostics

// Malformed #tp.layout: caught when it is parsed.

// expected-error @below {{unknown split role 'diagonal'}}
func.func private @bad_role(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = diagonal, dim = 0>})

// -----

// expected-error @below {{unknown key 'axis' (expected role, dim, block, slice, padded or repeat)}}
func.func private @bad_key(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, axis = 0>})

// -----

// expected-error @below {{'dim' appears twice}}
func.func private @twice(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, dim = 0, dim = 1>})

// -----

// expected-error @below {{#tp.layout needs a role and a dim}}
func.func private @no_dim(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row>})

// -----

// expected-error @below {{#tp.layout dim must be non-negative, got -1}}
func.func private @negative_dim(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, dim = -1>})

// -----

// expected-error @below {{#tp.layout block must be -1 (none) or non-negative, got -2}}
func.func private @bad_block(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, dim = 0, block = -2>})

// -----

// expected-error @below {{#tp.layout slice must be [offset, size] with offset >= 0 and size > 0}}
func.func private @bad_slice(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, dim = 0, slice = [0, 0]>})

// -----

// expected-error @below {{#tp.layout slice must be [offset, size] with offset >= 0 and size > 0}}
func.func private @slice_of_three(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, dim = 0, slice = [0, 4, 8]>})

// -----

// expected-error @below {{#tp.layout padded must be [V, P] with 0 < V <= P}}
func.func private @bad_padded(%w: tensor<8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = vocab, dim = 0, padded = [12, 10]>})

// -----

// expected-error @below {{#tp.layout of a replicated weight cannot be padded}}
func.func private @replicated_padded(%w: tensor<12xf32> {tp.weight = "w", tp.layout = #tp.layout<role = replicated, dim = 0, padded = [10, 12]>})

// -----

// expected-error @below {{#tp.layout padded = [5, 6] must pad the slice's 4 rows}}
func.func private @padded_not_slice(%w: tensor<3xf32> {tp.weight = "w", tp.layout = #tp.layout<role = column, dim = 0, slice = [0, 4], padded = [5, 6]>})

// -----

// Well-formed layouts in the wrong place: caught by the tp dialect.

// expected-error @below {{'tp.layout' must be a #tp.layout}}
func.func private @not_a_layout(%w: tensor<8xf32> {tp.weight = "w", tp.layout = "column"})

// -----

// expected-error @below {{argument 0 has a #tp.layout but no 'tp.weight'}}
func.func private @not_a_weight(%x: tensor<8xf32> {tp.input = "x", tp.layout = #tp.layout<role = row, dim = 0>})

// -----

// expected-error @below {{argument 0 has a #tp.layout but no static tensor type}}
func.func private @dynamic(%w: tensor<?xf32> {tp.weight = "w", tp.layout = #tp.layout<role = row, dim = 0>})

// -----

// expected-error @below {{argument 0 has a #tp.layout on dim 2 but rank 2}}
func.func private @dim_out_of_range(%w: tensor<8x4xf32> {tp.weight = "w", tp.layout = #tp.layout<role = column, dim = 2>})

// -----

// expected-error @below {{argument 0 has 3 rows on dim 1, which is not all of the 4 rows its #tp.layout holds}}
func.func private @replicated_piece(%w: tensor<8x3xf32> {tp.weight = "w", tp.layout = #tp.layout<role = replicated, dim = 1, slice = [4, 4]>})

// -----

// expected-error @below {{argument 0 has 3 rows on dim 1, which is not a share of the 4 rows its #tp.layout holds}}
func.func private @uneven_piece(%w: tensor<8x3xf32> {tp.weight = "w", tp.layout = #tp.layout<role = column, dim = 1, slice = [4, 4]>})

// -----

// expected-error @below {{argument 0 has 5 rows on dim 0, which is not a share of the 12 rows its #tp.layout holds}}
func.func private @uneven_padding(%w: tensor<5x8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = vocab, dim = 0, padded = [10, 12]>})

// -----

func.func @op_slice(%w: tensor<8x4xf32> {tp.weight = "w"}) -> tensor<8x2xf32> {
  // expected-error @below {{'tp.layout' on an op must be a #tp.layout without slice, padding or repeat, on a dim of its one tensor result}}
  %s = tensor.extract_slice %w[0, 0] [8, 2] [1, 1] {tp.layout = #tp.layout<role = column, dim = 2>} : tensor<8x4xf32> to tensor<8x2xf32>
  return %s : tensor<8x2xf32>
}

// -----

// The other tp attributes.

// expected-error @below {{'tp.weight' must be a non-empty string}}
func.func private @empty_name(%w: tensor<8xf32> {tp.weight = ""})

// -----

// expected-error @below {{unknown argument attribute 'tp.parallel'}}
func.func private @old_role(%w: tensor<8xf32> {tp.weight = "w", tp.parallel = "row"})

// -----

// expected-error @below {{unknown result attribute 'tp.input'}}
func.func private @bad_result() -> (tensor<8xf32> {tp.input = "y"})

// -----

// expected-error @below {{'tp.stage' must be a non-negative integer}}
func.func private @bad_stage() attributes {tp.stage = -1 : i64}

// -----

// expected-error @below {{'tp.pipeline' must be a dictionary with integer 'stages' and 'microbatches'}}
module attributes {tp.pipeline = {stages = 2 : i64}} {}

// -----

func.func @bad_loop_sizes(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'tp.loop_sizes' must be an array of one static size per loop of a linalg op}}
  %0 = arith.negf %x {tp.loop_sizes = array<i64: 4>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @bad_split_loop(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'tp.split_loop' must be the index of a loop of a linalg op}}
  %0 = arith.negf %x {tp.split_loop = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @bad_local_callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'tp.local_callee' must be a symbol on a call}}
  %0 = arith.negf %x {tp.local_callee = @f} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{'tp.opset' must be an integer}}
module attributes {tp.opset = "17"} {}

// -----

// expected-error @below {{'tp.external_data' must be an array of file names}}
module attributes {tp.external_data = [1]} {}

// -----

// expected-error @below {{unknown attribute 'tp.color'}}
module attributes {tp.color = "blue"} {}

// -----

// expected-error @below {{result 0 has a 'tp.split_output' that is not a #tp.split_output of a dim of its static, non-empty tensor type, on a 'tp.output' result}}
func.func @split_dim_past_rank(%x: tensor<2x4xf32>) -> (tensor<2x4xf32> {tp.output = "logits", tp.split_output = #tp.split_output<dim = 2, size = 8>}) {
  return %x : tensor<2x4xf32>
}

// -----

// expected-error @below {{result 0 has a 'tp.split_output' that is not a #tp.split_output}}
func.func @split_without_output(%x: tensor<2x4xf32>) -> (tensor<2x4xf32> {tp.split_output = #tp.split_output<dim = 1, size = 8>}) {
  return %x : tensor<2x4xf32>
}

// -----

// expected-error @below {{#tp.layout repeat must be [H, R] with H > 0 and R > 1}}
func.func @repeat_once(%w: tensor<8x8xf32> {tp.weight = "w", tp.layout = #tp.layout<role = replicated, dim = 1, repeat = [2, 1]>}) {
  return
}

// -----

// expected-error @below {{#tp.layout repeat = [3, 2] needs the slice's 8 rows in 3 equal blocks}}
func.func @repeat_uneven(%w: tensor<8x16xf32> {tp.weight = "w", tp.layout = #tp.layout<role = replicated, dim = 1, slice = [0, 8], repeat = [3, 2]>}) {
  return
}

// -----

// expected-error @below {{'tp.grid_role' must be a #tp.grid_role on a shard.grid}}
func.func @grid_role_on_a_function() attributes {tp.grid_role = #tp.grid_role<tensor>} {
  return
}

// -----

// expected-error @below {{'tp.grid_role' must be a #tp.grid_role on a shard.grid}}
shard.grid @pipeline(shape = 2) {tp.grid_role = "pipeline"}

// -----

// expected-error @below {{expected ::mlir::tp::GridRole to be one of: tensor, pipeline}}
// expected-error @below {{failed to parse TP_GridRoleAttr parameter 'value'}}
shard.grid @pipeline(shape = 2) {tp.grid_role = #tp.grid_role<data>}
