//===- PrefillPlan.h - which prefill chunks a prompt runs in ----*- C++ -*-===//
//
// Session::generate runs a prompt in prefill chunks (tp-compile
// --prefill-chunks); this picks them, apart from the running of them, so
// that the choice can be tested on lengths alone.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_PREFILLPLAN_H
#define TP_RUNTIME_PREFILLPLAN_H

#include <cstdint>
#include <vector>

namespace tp::rt {

/// The chunks, in order, that run the first `promptLength` positions of a
/// context of `slots` positions, as indices into `lengths` (the compiled
/// chunk sizes, ascending). A chunk of C tokens at position p needs
/// p + C <= slots; the last one may be right-padded. Of the sequences that
/// take the prompt as far as any chunk fits, the one with the least work,
/// counting a chunk of C tokens as C plus the smallest chunk's length (a
/// chunk's fixed cost, chiefly one read of every weight, which at the
/// smallest chunk is about as much as its tokens); fewer chunks break a
/// tie. So the computed tokens follow the prompt (128 tokens: two chunks
/// of 64, not one of 256) without trading one chunk for several much
/// smaller ones (40 tokens: one chunk of 64, not three of 16). The
/// positions from the sum of the chunks' tokens on, when that is short of
/// `promptLength` (no chunk fits the last positions of the context), are
/// the caller's to run as decode steps.
std::vector<int64_t> planPrefillChunks(const std::vector<int64_t> &lengths,
                                       int64_t promptLength, int64_t slots);

} // namespace tp::rt

#endif // TP_RUNTIME_PREFILLPLAN_H
