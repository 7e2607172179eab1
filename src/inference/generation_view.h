// What multi_probe_inference --generate shows while the model generates: each new token with the labels whose
// probes fire on it, as a line per token (a pipe or a file), a live view redrawn in place (a terminal: each
// row's text so far and its latest token's top labels as bars), or a JSON line per token (--json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "inference/engine.h"
#include "inference/ranking.h"

namespace probekit::inference {

/// The streaming line of one token: "[row] index "token" ✓label 0.912, ..." with the labels that fire (at or
/// above their threshold, at most `top_k`, most confident first), "-" when none does; then with --sae each SAE's
/// three largest latents ("  | NAME 17 3.21 "description", ..."); the row only when `with_row`.
std::string generated_token_line(const ScoredToken& token, const ScoreTable& table, int64_t top_k, bool with_row);

/// The JSON line of one token: row, index, position, id, token, text (what it adds), last, and its `top_k` most
/// confident (label, layer) predictions, most confident first (as /v1/generate's events).
Json generated_token_json(const ScoredToken& token, const ScoreTable& table, int64_t top_k);
/// {NAME: [{"latent", "value", "description"}, ...]}: each SAE's largest latents at a token.
Json token_latents_json(const TokenLatents& latents);

/// The JSON line of a finished row: row, done, stop, prompt, prompt_ids, generated_ids, text, and the steering the
/// generation applied (`steering`: its record, null for none).
Json generated_row_json(size_t row, const std::string& prompt, const GeneratedText& text, const Json& steering);

/// One row of the live view: the prompt, the text generated so far and the latest token's table.
struct LiveRow {
  std::string prompt, text;
  std::string token;       // the latest token as the vocabulary spells it
  int64_t tokens = 0;      // how many have come
  ScoreTable latest;       // empty before the first token
  std::string stop;        // once the row has stopped: why
};

/// The live view's frame, each line at most `width` terminal columns: for each row its prompt, its text so far (its
/// last `text_lines` lines, control characters shown as spaces) and its latest token's `top_k` labels as bars.
std::string live_frame(const std::vector<LiveRow>& rows, int64_t top_k, size_t width, size_t text_lines);

/// Prints the tokens as they come in the view the display asks for, and each row's text at the end.
class GenerationPrinter {
 public:
  /// `steering`: what the generation applies (null: none), which the JSON lines of the finished rows record.
  GenerationPrinter(std::vector<std::string> prompts, int64_t top_k, bool json, bool live, Json steering = Json());

  void show(const ScoredToken& token, const ScoreTable& table);
  void finish(const std::vector<GeneratedText>& texts);

 private:
  void redraw();

  std::vector<LiveRow> rows_;
  int64_t top_k_;
  bool json_, live_;
  Json steering_;
  size_t frame_lines_ = 0;  // lines of the frame on screen, which the next one replaces
};

}  // namespace probekit::inference
