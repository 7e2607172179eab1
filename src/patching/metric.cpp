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
    // A quoted answer may be a comma: the comma that parts the two is the first after its closing quote.
    const bool quoted = !tokens.empty() && (tokens[0] == '"' || tokens[0] == '\'');
    const size_t closing = quoted ? tokens.find(tokens[0], 1) : std::string::npos;
    const size_t comma = tokens.find(',', closing == std::string::npos ? 0 : closing + 1);
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
int32_t named_token(std::string given, const tokenizer::Tokenizer& tokenizer, int64_t vocab) {
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
  if (!tokenizer.find_token(static_cast<int32_t>(id))) {
    fail_usage("--metric: token id {} is a row of the model's logits but not a token of its tokenizer", id);
  }
  return static_cast<int32_t>(id);
}

MetricToken spelled(int64_t id, const tokenizer::Tokenizer& tokenizer) {
  return {static_cast<int32_t>(id), tokenizer.find_token(static_cast<int32_t>(id))};
}

// Ids [k] of the k largest logits, the largest first.
at::Tensor top_ids(const at::Tensor& logits, int64_t k) { return std::get<1>(logits.topk(k)); }

}  // namespace

at::Tensor named_token_ids(const MetricSpec& spec, const tokenizer::Tokenizer& tokenizer, int64_t vocab) {
  at::Tensor ids = at::full({2}, -1, at::kLong);
  for (size_t i = 0; i < spec.tokens.size() && i < 2; ++i) {
    ids[static_cast<int64_t>(i)] = named_token(spec.tokens[i], tokenizer, vocab);
  }
  // Regression: the same token twice measured 0 on every run, and left a grid of nothing to compare.
  if (spec.tokens.size() == 2 && ids[0].item<int64_t>() == ids[1].item<int64_t>()) {
    fail_usage("--metric: the answer {} and the foil {} are the same token (id {}): their logit difference is always 0",
               spec.tokens[0], spec.tokens[1], ids[0].item<int64_t>());
  }
  return ids;
}

at::Tensor resolve_token_ids(MetricKind kind, const at::Tensor& named, const at::Tensor& clean_logits,
                             const at::Tensor& corrupted_logits) {
  const at::Tensor given = named.to(clean_logits.device(), at::kLong);
  if (kind == MetricKind::kKl) return at::zeros_like(given);
  const at::Tensor answer = top_ids(clean_logits, 1)[0];
  at::Tensor foil = at::zeros_like(answer);
  if (kind == MetricKind::kLogitDiff) {
    const at::Tensor corrupted_top = top_ids(corrupted_logits, 1)[0];
    foil = at::where(corrupted_top == answer, top_ids(clean_logits, 2)[1], corrupted_top);
  }
  return at::where(given >= 0, given, at::stack({answer, foil}));
}

Metric resolved_metric(MetricKind kind, const at::Tensor& token_ids, const at::Tensor& clean_logits,
                       const tokenizer::Tokenizer& tokenizer) {
  Metric metric;
  metric.kind = kind;
  metric.token_ids = token_ids;
  const at::Tensor ids = token_ids.to(at::kCPU);
  if (kind != MetricKind::kKl) metric.answer = spelled(ids[0].item<int64_t>(), tokenizer);
  if (kind == MetricKind::kLogitDiff) metric.foil = spelled(ids[1].item<int64_t>(), tokenizer);
  if (kind == MetricKind::kKl) metric.clean_log_probs = at::log_softmax(clean_logits.to(at::kFloat), -1);
  return metric;
}

Metric resolve_metric(const MetricSpec& spec, const at::Tensor& clean_logits, const at::Tensor& corrupted_logits,
                      const tokenizer::Tokenizer& tokenizer) {
  const at::Tensor named = named_token_ids(spec, tokenizer, clean_logits.size(-1));
  return resolved_metric(spec.kind, resolve_token_ids(spec.kind, named, clean_logits, corrupted_logits), clean_logits,
                         tokenizer);
}

at::Tensor metric_values(MetricKind kind, const at::Tensor& logits, const at::Tensor& token_ids,
                         const at::Tensor& clean_log_probs) {
  switch (kind) {
    case MetricKind::kLogitDiff: {
      const at::Tensor picked = logits.index_select(-1, token_ids.to(logits.device()));
      return picked.select(-1, 0) - picked.select(-1, 1);
    }
    case MetricKind::kProb:
      return at::softmax(logits, -1).index_select(-1, token_ids.to(logits.device()).narrow(0, 0, 1)).squeeze(-1);
    case MetricKind::kKl: {
      const at::Tensor clean = clean_log_probs.to(logits.device());
      return (clean.exp() * (clean - at::log_softmax(logits, -1))).sum(-1);
    }
  }
  fail_input("no metric of kind {}", static_cast<int>(kind));
}

at::Tensor Metric::operator()(const at::Tensor& logits) const {
  return metric_values(kind, logits, token_ids, clean_log_probs);
}

Json Metric::to_json() const {
  Json out = {{"name", metric_row(kind).name}, {"formula", metric_row(kind).formula}};
  auto token = [](const MetricToken& t) { return Json{{"id", t.id}, {"token", t.text ? Json(*t.text) : Json()}}; };
  if (answer.id >= 0) out["answer"] = token(answer);
  if (foil.id >= 0) out["foil"] = token(foil);
  return out;
}

}  // namespace probekit::patching
