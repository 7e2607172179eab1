// How a capture run is cut into forward passes: fixed windows of the run's example order (the unit that is
// committed to disk and resumed from), each sorted by token count so padding stays small, then cut into
// batches under a token budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace probekit::capture {

/// The batching a run used, kept in its files so a resumed run cuts the same batches (same numbers, bit for
/// bit).
struct Batching {
  int64_t window = 0, token_budget = 0, max_examples = 0;
  bool packed = false;  // the budget counts the batches' own tokens (packed sequences), not padded ones

  std::string encode() const;
  static Batching decode(const std::string& text);
};

/// Batches of window [begin, end): positions into `lengths`, longest first (ties keep their order), each
/// batch with at most `batching.max_examples` examples and at most `batching.token_budget` tokens: padded
/// tokens (examples x longest), or when `batching.packed` (the batch's sequences one after another, nothing
/// padded) the tokens themselves.
std::vector<std::vector<int64_t>> plan_window_batches(const std::vector<int64_t>& lengths, int64_t begin, int64_t end,
                                                      const Batching& batching);

/// `batches` with each of its last `count` batches cut into `parts` batches of consecutive examples (as equal as
/// the examples allow). Replicas sharing a run take its last batches one each: one full batch more on one of them
/// leaves the other idle for up to that long (about a tenth of the benchmark's run on two GPUs); finer last
/// batches let them end closer together.
std::vector<std::vector<int64_t>> with_finer_tail(std::vector<std::vector<int64_t>> batches, size_t count, size_t parts);

}  // namespace probekit::capture
