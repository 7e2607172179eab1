#include "patching/metric.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <tuple>

#include "common/error.h"

namespace probekit::patching {

const std::vector<MetricRow>& metric_table() {
  static const std::vector<MetricRow> table = {
      {MetricKind::kLogitDiff, "logit-diff", 2, "logits[last, answer] - logits[last, foil]"},
      {MetricKind::kProb, "prob", 1, "softmax(logits[last])[answer]"},
      {MetricKind::kKl, "kl", 0, "KL(clean run's next-token distribution || this run's) at the last token, in nats"},
  };
  return table;
}

const MetricRow& metric_row(MetricKind kind) {
  for (const MetricRow& row : metric_table()) {
    if (row.kind == kind) return row;
  }
  fail_input("no metric of kind {}", static_cast<int>(kind));
}

MetricSpec parse_metric(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  std::vector<std::string> names;
  for (const MetricRow& row : metric_table()) {
    names.push_back(row.name);
    if (name != row.name) continue;
    MetricSpec spec{row.kind, {}};
    if (colon == std::string::npos) return spec;
    if (row.tokens == 0) fail_usage("--metric {}: {} takes nothing after a colon", text, row.name);
    const std::string tokens = text.substr(colon + 1);
    const size_t comma = tokens.find(',');
    if (row.tokens == 2 && comma != std::string::npos) spec.tokens = {tokens.substr(0, comma), tokens.substr(comma + 1)};
    if (row.tokens == 1) spec.tokens = {tokens};
    if (spec.tokens.size() != row.tokens) {
      fail_usage("--metric {}: {} takes ANSWER,FOIL after a colon (ids or token strings)", text, row.name);
    }
    return spec;
  }
  fail_usage("--metric {}: expected one of {} (logit-diff:ANSWER,FOIL and prob:TOKEN name their tokens)", text,
             fmt::join(names, ", "));
}

namespace {

// An id (digits), else a token of the vocabulary or a text of one token; quotes ('4' or "4") make digits a string.
MetricToken named_token(std::string given, const tokenizer::Tokenizer& tokenizer, int64_t vocab) {
  int64_t id = -1;
  const bool quoted = given.size() >= 2 && (given.front() == '"' || given.front() == '\'') && given.back() == given.front();
  if (quoted) given = given.substr(1, given.size() - 2);
  if (!quoted && !given.empty() &&
      std::all_of(given.begin(), given.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    id = given.size() <= 9 ? std::stoll(given) : vocab;
  } else if (std::optional<int32_t> token = tokenizer.token_to_id(given)) {
    id = *token;
  } else {
    const std::vector<int32_t> ids = tokenizer.encode(given, false);
    if (ids.size() != 1) {
      fail_usage("--metric: \"{}\" is not one token: it is not in the vocabulary and encodes to {} tokens ({})", given,
                 ids.size(), fmt::join(tokenizer.tokens(ids), " "));
    }
    id = ids[0];
  }
  if (id < 0 || id >= vocab) fail_usage("--metric: token id {} is outside the model's vocabulary of {}", given, vocab);
  const auto token = static_cast<int32_t>(id);
  return {token, tokenizer.id_to_token(token)};
}

MetricToken top_token(const at::Tensor& logits, int64_t rank, const tokenizer::Tokenizer& tokenizer) {
  const auto id = static_cast<int32_t>(std::get<1>(logits.topk(rank + 1))[rank].item<int64_t>());
  return {id, tokenizer.id_to_token(id)};
}

}  // namespace

Metric resolve_metric(const MetricSpec& spec, const at::Tensor& clean_logits, const at::Tensor& corrupted_logits,
                      const tokenizer::Tokenizer& tokenizer) {
  Metric metric;
  metric.kind = spec.kind;
  const int64_t vocab = clean_logits.size(-1);
  if (!spec.tokens.empty()) {
    metric.answer = named_token(spec.tokens[0], tokenizer, vocab);
    if (spec.tokens.size() > 1) metric.foil = named_token(spec.tokens[1], tokenizer, vocab);
  } else if (spec.kind != MetricKind::kKl) {
    metric.answer = top_token(clean_logits, 0, tokenizer);
    if (spec.kind == MetricKind::kLogitDiff) {
      metric.foil = top_token(corrupted_logits, 0, tokenizer);
      if (metric.foil.id == metric.answer.id) metric.foil = top_token(clean_logits, 1, tokenizer);
    }
  }
  if (spec.kind == MetricKind::kKl) metric.clean_log_probs = at::log_softmax(clean_logits.to(at::kFloat), -1);
  return metric;
}

at::Tensor Metric::operator()(const at::Tensor& logits) const {
  switch (kind) {
    case MetricKind::kLogitDiff:
      return logits.select(-1, answer.id) - logits.select(-1, foil.id);
    case MetricKind::kProb:
      return at::softmax(logits, -1).select(-1, answer.id);
    case MetricKind::kKl: {
      const at::Tensor clean = clean_log_probs.to(logits.device());
      return (clean.exp() * (clean - at::log_softmax(logits, -1))).sum(-1);
    }
  }
  fail_input("no metric of kind {}", static_cast<int>(kind));
}

Json Metric::to_json() const {
  Json out = {{"name", metric_row(kind).name}, {"formula", metric_row(kind).formula}};
  auto token = [](const MetricToken& t) { return Json{{"id", t.id}, {"token", t.text}}; };
  if (answer.id >= 0) out["answer"] = token(answer);
  if (foil.id >= 0) out["foil"] = token(foil);
  return out;
}

}  // namespace probekit::patching
