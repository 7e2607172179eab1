// Text generation with a KV cache: prompts are run once, then one forward pass per new token feeds each row its
// latest token (and the probes' prompt suffix after it, when probes read the tokens: see
// readout/incremental.h). Tokens are handed to a callback as they come, so a terminal view, a JSON stream and an
// HTTP server's event stream are all callers of the same loop.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "generation/sampling.h"
#include "model/transformer.h"
#include "readout/readout.h"

namespace probekit::generation {

/// The eos ids generation stops at: generation_config.json's eos_token_id (a number or a list), else
/// config.json's (or its text_config's); none when no file sets one.
std::vector<int32_t> read_stop_ids(const std::string& model_dir);

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  Sampling sampling;
  std::vector<int32_t> stop_ids;  // a row stops after one of these (which it keeps); empty: at max_new_tokens only
  // Never chosen nor reported: their logits are set to -inf first (--no-stop's eos ids, as transformers'
  // min_new_tokens does, so that every row runs max_new_tokens tokens).
  std::vector<int32_t> suppressed_ids;
  int64_t top_logits = 0;         // how many of each step's largest logits to report
  uint64_t first_row = 0;         // the first prompt's index among all prompts: a row samples as itself, however batched
  std::vector<uint64_t> row_keys;  // or each row's own: rows with one key draw the same numbers (a sweep's prompt)
  const model::StreamWrites* writes = nullptr;  // steering, on every pass of the prompts and the new tokens

  /// These options for rows [first, end) of their prompts (a --batch-size part, or one stream): each row keeps its
  /// number or its key.
  GenerationOptions rows(size_t first, size_t end) const;
};

/// What probes read at each new token: the request (position last) at the token followed by the suffix.
struct ProbeReadout {
  readout::Request request;
  readout::Sequence suffix;
  /// Optional: turns a step's rows [B, layers, width] into what the tokens carry ([B, ...], e.g. the probes'
  /// probabilities), on the device, before the one copy to the host per step.
  std::function<at::Tensor(const at::Tensor& rows)> score;
};

/// One new token of one row, handed over as soon as it (and its probes' rows) are known.
struct GeneratedToken {
  size_t row = 0;        // the prompt's index
  int64_t index = 0;     // among the row's new tokens, from 0
  int64_t position = 0;  // in the row's sequence (prompt included)
  int32_t id = 0;
  bool last = false;     // the row stops here: an eos id, or max_new_tokens reached
  std::vector<int32_t> top_ids;  // the step's largest logits (GenerationOptions::top_logits), largest first
  std::vector<float> top_logits;
  at::Tensor rows;  // on the host: what the probes read, [layers, width] fp32 (or ProbeReadout::score's row for it);
                    // undefined without a ProbeReadout
};

/// Called for each new token in order (rows of one step in row order). Returning false stops that row (its
/// reader went away); the other rows go on.
using TokenCallback = std::function<bool(const GeneratedToken&)>;

enum class StopReason { kEos, kLength, kCancelled, kMonitor };  // kMonitor: a monitor policy stopped it
const char* stop_reason_name(StopReason reason);

struct Generation {
  std::vector<int32_t> ids;  // the new tokens
  StopReason stop = StopReason::kLength;
};

/// Generates up to options.max_new_tokens tokens after each prompt, all prompts in one batch. The model must
/// hold every layer, the final norm and the LM head. `probes` may be null.
std::vector<Generation> generate(const model::TransformerModel& model, const std::vector<readout::Sequence>& prompts,
                                 const GenerationOptions& options, const ProbeReadout* probes,
                                 const TokenCallback& on_token);

}  // namespace probekit::generation
