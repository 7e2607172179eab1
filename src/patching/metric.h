// What activation patching measures on a run: one number from the next-token logits at the last token. The metrics
// are rows of one table: logit-diff (an answer's logit minus a foil's, the IOI paper's), prob (a token's
// probability, ROME's) and kl (how far the run's distribution lies from the clean run's).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "tokenizer/tokenizer.h"

namespace probekit::patching {

enum class MetricKind { kLogitDiff, kProb, kKl };

/// One row of the table.
struct MetricRow {
  MetricKind kind;
  const char* name;     // --metric's name
  size_t tokens;        // how many tokens it reads (logit-diff: ANSWER,FOIL; prob: TOKEN)
  const char* formula;  // what patching.json says it computes
};
const std::vector<MetricRow>& metric_table();
const MetricRow& metric_row(MetricKind kind);

/// --metric as given: the name, and the tokens after its colon (ids or token strings; none: the defaults).
struct MetricSpec {
  MetricKind kind = MetricKind::kLogitDiff;
  std::vector<std::string> tokens;
};
/// Parses "logit-diff", "logit-diff:ANSWER,FOIL", "prob", "prob:TOKEN" or "kl"; anything else is a usage error.
MetricSpec parse_metric(const std::string& text);

/// A token a metric reads: its id and the tokenizer's spelling of it (none for an id past the tokenizer's tokens,
/// which a model's padded embedding rows can be, and the clean run's top logit can pick).
struct MetricToken {
  int32_t id = -1;
  std::optional<std::string> text;
};

/// A metric with its tokens resolved.
struct Metric {
  MetricKind kind = MetricKind::kLogitDiff;
  MetricToken answer, foil;    // logit-diff reads both, prob the answer
  at::Tensor token_ids;        // int64 [2]: the answer's and the foil's ids (0 where the metric reads none)
  at::Tensor clean_log_probs;  // kl: the clean run's next-token log-probabilities [vocab]

  /// The metric of each row of next-token logits [rows, vocab] (fp32): [rows], differentiable.
  at::Tensor operator()(const at::Tensor& logits) const;
  /// {"name", "formula", "answer": {"id", "token"}, "foil": ...} (the tokens it reads).
  Json to_json() const;
};

/// The metric of `kind` on each row of logits [rows, vocab] reading `token_ids` [2] and (kl) `clean_log_probs`
/// [vocab]: [rows], differentiable; device operations only, as a captured pass needs.
at::Tensor metric_values(MetricKind kind, const at::Tensor& logits, const at::Tensor& token_ids,
                         const at::Tensor& clean_log_probs);

/// The tokens `spec` names (an id, a token of the vocabulary, or a text that encodes to one token) as int64 [2] on the
/// host, {answer, foil}, -1 where it names none (resolve_token_ids' `named`); ids outside a vocabulary of `vocab` are
/// refused.
at::Tensor named_token_ids(const MetricSpec& spec, const tokenizer::Tokenizer& tokenizer, int64_t vocab);

/// The answer's and foil's ids, int64 [2] on the logits' device, without a host synchronisation: `named` [2]'s where
/// it holds one (>= 0), else as the answer the clean run's top token and as the foil the corrupted run's top token
/// (the clean run's second when the two agree); zeros for kl.
at::Tensor resolve_token_ids(MetricKind kind, const at::Tensor& named, const at::Tensor& clean_logits,
                             const at::Tensor& corrupted_logits);

/// The metric of `kind` reading `token_ids` (as resolve_token_ids gives them; brought to the host for their
/// spellings), kl against the clean run's next-token logits [vocab].
Metric resolved_metric(MetricKind kind, const at::Tensor& token_ids, const at::Tensor& clean_logits,
                       const tokenizer::Tokenizer& tokenizer);

/// `spec` resolved against the clean and corrupted runs' next-token logits [vocab]: named_token_ids, then
/// resolve_token_ids.
Metric resolve_metric(const MetricSpec& spec, const at::Tensor& clean_logits, const at::Tensor& corrupted_logits,
                      const tokenizer::Tokenizer& tokenizer);

}  // namespace probekit::patching
