// multi_probe_inference as a library: its flags (declared once) and what it shows for each way it is run
// (one text or a file of texts, two texts compared, every token of a text, or an interactive session), so
// the tool is a thin main and tests reach every view.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "cli/app_fwd.h"
#include "common/json.h"
#include "generation/flags.h"
#include "inference/engine.h"
#include "inference/ranking.h"
#include "monitor/monitor_flags.h"

namespace probekit::inference {

/// How results are shown.
struct Display {
  int64_t top_k = 5;
  double threshold = 0.1;
  bool calibrated = false;
  std::string mode = "all";  // several layers: all | by-action | by-layer
  Aggregate aggregate = Aggregate::kMax;
  bool json = false;
};

/// The display of a JSON answer (probe_server's and the Python package's): the aggregate by its name.
Display json_display(int64_t top_k, double threshold, bool calibrated, const std::string& mode, const std::string& aggregate);

/// Everything multi_probe_inference is asked to do.
struct InferenceRequest {
  EngineOptions engine;
  Display display;
  std::string text, file, compare, csv, html, text_field = "text", aggregate = "max";
  std::vector<int> devices;  // --devices: GPU indices, into engine.devices
  bool per_token = false;
  bool overwrite = false;   // replace existing --csv / --html files
  bool generate = false;    // --generate: generate after --text (or each --file text) while the probes score
  bool chat = false;        // --chat: each text is a user message, rendered with the model's chat template
  std::string messages;     // --messages FILE: a conversation (JSON list of messages) rendered as the one prompt
  std::string file_bytes;   // --file's contents, read once before the model loads ("-": standard input, or a pipe)
  generation::GenerationFlags generation;
  monitor::MonitorFlags monitors;  // --monitor and its flags, with --generate
  bool live_view = false;   // --generate redraws a live view in place (the tool sets it when stdout is a terminal)
};

/// Declares multi_probe_inference's flags on `app`, writing into `request`.
void add_inference_flags(CLI::App& app, InferenceRequest& request);

/// The engine's flags that multi_probe_inference and probe_server share: --best-layer, --force, --batch-size
/// (`batch_help` says what a batch is to the tool), --device and --dtype.
void add_engine_flags(CLI::App& app, EngineOptions& engine, const std::string& batch_help);

/// multi_probe_inference --generate: generates after the request's texts while the probes score each new token,
/// printing the tokens as they come; writes --csv / --html of the prompt and its generation at the end.
void show_generation(const Engine& engine, const InferenceRequest& request);

/// Checks the flags, loads the engine and prints what the request asks for on stdout; reads texts from
/// `input` when neither --text nor --file is given.
void run_inference(InferenceRequest& request, std::istream& input, bool input_is_terminal);

/// The probabilities of one text as a table with the display's thresholds.
ScoreTable table_of(const Engine& engine, const std::vector<std::vector<double>>& probability, const Display& display);

/// What --json shows for one text: the single-layer (or best-layer) ranking (`single_layer`; the top k classes of
/// a multiclass probe), or over several layers the display's mode (all, by-action, by-layer); `cut_tokens`, the
/// tokens cut from its start to fit the probes' prompt limit (TextScores::cut).
Json ranking_json(const ScoreTable& table, const std::string& text, int64_t cut, const Display& display,
                  bool single_layer, bool multiclass);

/// What --json shows for one text's scores in the engine's layout (its one layer, or --best-layer: the ranking;
/// several layers: the display's mode), with the steering the engine applies.
Json text_json(const Engine& engine, const std::string& text, const TextScores& scores, const Display& display,
               bool best_layer);

/// `out` with the steering the engine applies, when it applies any: every JSON output records it.
Json with_steering(Json out, const Engine& engine);

/// What --per-token --json shows: each token (as the vocabulary spells it, and decoded) with every (label, layer)
/// prediction of its table, most confident first.
Json per_token_json(const std::string& text, const TokenScores& scores, const std::vector<ScoreTable>& tables);

/// Refuses (a usage error) calibrated thresholds for a multiclass probe, whose classes have none of their own;
/// `calibrated` and `threshold` name the options as the caller spells them (--calibrated, or a keyword argument).
void check_calibrated(const Engine& engine, bool calibrated, const std::string& probes_dir,
                      const std::string& calibrated_name = "--calibrated", const std::string& threshold_name = "--threshold");

/// --file's contents (`source` names them in messages): one text per line, or JSON objects with a text field; blank
/// lines skipped.
std::vector<std::string> read_texts(const std::string& contents, const std::string& source, const std::string& field);

/// One row of a --file of conversations: its 1-based line and its conversation (chat::conversation_text: the
/// messages with any tools the row offers).
struct ConversationRow {
  int64_t line = 0;
  std::string conversation;
};

/// Whether a --file holds conversations: its first row has "messages" and no text field (`field`). It is not read
/// as a template would read it: a text row's other fields may hold what a template refuses.
bool holds_conversations(const std::string& contents, const std::string& source, const std::string& field);

/// --file of conversations (JSONL rows with "messages" and no text field, as capture reads them); empty when the file
/// holds texts. A later row without messages is an error naming its line.
std::vector<ConversationRow> read_conversation_rows(const std::string& contents, const std::string& source,
                                                   const std::string& field);

}  // namespace probekit::inference
