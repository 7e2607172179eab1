// What multi_probe_inference shows: the reference's ranked lists (same layout, so scripts reading its output
// keep working), JSON for programs, and per-token views (terminal, CSV, a self-contained HTML heatmap).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "inference/ranking.h"
#include "sae/latent_reading.h"

namespace probekit::inference {

/// One layer's (or best layers') ranking: "  ✓ 1. label   0.9134567890" lines; with_layer adds
/// "(Layer L, AUC: a)" as the reference's best-layer engine prints.
std::string format_ranking(const std::vector<Prediction>& shown, bool with_layer);
/// Every (label, layer) pair: "  ✓  1. label  (L21)  0.9135".
std::string format_all_layers(const std::vector<Prediction>& shown);
/// Labels aggregated over layers, with their three best layers.
std::string format_by_label(const std::vector<LabelSummary>& summaries, int64_t top_k, Aggregate aggregate);
/// Each layer's top_k most confident labels (the reference shows five: --top-k's default).
std::string format_by_layer(const std::vector<LayerGroup>& groups, int64_t top_k, const std::string& threshold);
/// The biggest differences between two texts.
std::string format_comparison(const std::vector<Difference>& differences, int64_t top_k);

Json predictions_json(const std::vector<Prediction>& predictions);
Json label_summaries_json(const std::vector<LabelSummary>& summaries);

/// Per-token scores as a table of the tokens for one text.
struct TokenTable {
  std::vector<std::string> tokens;  // as the vocabulary spells them (the CSV's token_text, as the reference's)
  std::vector<std::string> texts;   // decoded, for the HTML reading view
  std::vector<ScoreTable> scores;   // one per token position
  // Attention probes: the weight the whole text's pool puts on each token, [t][l][k] (TokenScores::attention);
  // empty for other probes.
  std::vector<std::vector<std::vector<double>>> attention;
  // Ema and rolling probes: each token's own score [t][l][k] (TokenScores::token_probability) beside `scores`, the
  // probe's score of the text up to the token; empty for other probes.
  std::vector<std::vector<std::vector<double>>> token_scores;
  // --sae: each SAE's largest latents at each token, by SAE name (TokenScores::latents); empty without.
  std::map<std::string, std::vector<sae::TopLatents>> latents;
};

/// Each SAE's three largest latents at a token, by SAE name: "  | NAME 17 3.21 \"description\", 200 1.05"; "" for
/// none.
std::string latents_text(const std::map<std::string, sae::TopLatents>& latents);

/// Terminal view: each token with its `top` most confident (label, layer) pairs, and its latents (latents_text).
std::string per_token_terminal(const TokenTable& table, int64_t top);
/// CSV: action_name, token_position, token_text, confidence, layer, is_active (one row per token and probe), and
/// for attention probes a last column `attention` (the token's weight; empty where the probe leaves it out).
std::string per_token_csv(const TokenTable& table);
/// A self-contained HTML page: the text coloured by each token's strongest label, and a token x label heatmap;
/// with attention probes also the text coloured by the attention of the label with the highest peak.
std::string per_token_html(const TokenTable& table, const std::string& title);

}  // namespace probekit::inference
