#include "inference/session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "chat/conversation.h"
#include "cli/cli.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/outputs.h"
#include "common/terminal_text.h"
#include "common/utf8_text.h"
#include "inference/generation_view.h"
#include "steering/steering_flags.h"
#include "inference/reports.h"

namespace probekit::inference {

namespace {

bool single_layer_view(const Engine& engine, bool best_layer) { return engine.layers().size() == 1 || best_layer; }

// What the single-layer (or best-layer) layout of the reference's engines shows: the labels the binary probes
// detect, each on its own (multi_probe_inference.py: the active ones of the top k, or the top k when none is), or
// the top k classes of a multiclass probe by their softmax probabilities (probe_inference.py).
std::vector<Prediction> single_layer_shown(const ScoreTable& table, const Display& d, bool multiclass) {
  if (!multiclass) return shown_predictions(all_predictions(table), d.top_k);
  return top_predictions(table, d.top_k);
}

// The ranked view of one text in the single-layer (or best-layer) layout.
void show_single_layer(const Engine& engine, const std::string& text, const ScoreTable& table, const Display& d,
                       bool best_layer, bool interactive) {
  std::vector<Prediction> shown = single_layer_shown(table, d, engine.multiclass());
  if (interactive) {
    fmt::print("\nTop {} predictions:\n", d.top_k);
  } else {
    std::string heading = engine.multiclass() ? fmt::format("Predicted classes (top {} of {}, softmax probabilities)",
                                                            d.top_k, engine.labels().size())
                                              : fmt::format("Detected labels (top {})", d.top_k);
    fmt::print("\nAnalyzing text: \"{}\"\n\n{}\n\n{}:\n\n", terminal_text(text, true), std::string(70, '-'), heading);
  }
  fmt::print("{}\n", format_ranking(shown, best_layer));
}

// The ranked view of one text over several layers, in the display's mode.
void show_layers(const ScoreTable& table, const Display& d) {
  if (d.mode == "by-action") {
    fmt::print("\nTop {} actions ({} confidence across layers):\n\n{}\n", d.top_k,
               d.aggregate == Aggregate::kMax ? "max" : "mean",
               format_by_label(by_label(table, d.aggregate), d.top_k, d.aggregate));
  } else if (d.mode == "by-layer") {
    fmt::print("{}\n", format_by_layer(by_layer(table), d.top_k,
                                       d.calibrated ? "each probe's own" : fmt::format("{}", d.threshold)));
  } else {
    std::vector<Prediction> ranked = top_predictions(table, d.top_k);
    fmt::print("\nTop {} predictions across all layers:\n\n{}\n", ranked.size(), format_all_layers(ranked));
  }
}

// The ranked view of one text, or its JSON.
Json show(const Engine& engine, const std::string& text, const TextScores& scores, const Display& d, bool best_layer,
          bool interactive) {
  if (d.json) return text_json(engine, text, scores, d, best_layer);
  const ScoreTable table = table_of(engine, scores.probability, d);
  if (single_layer_view(engine, best_layer)) {
    show_single_layer(engine, text, table, d, best_layer, interactive);
  } else {
    show_layers(table, d);
  }
  return {};
}

// The conversation of --messages for scoring: its messages, with the tools it offers (rendered as capture renders a
// dataset row's).
std::string scored_messages(const std::string& path) { return chat::conversation_text(chat::read_conversation(path)); }

void show_per_token(const Engine& engine, const InferenceRequest& r) {
  const bool conversation = !r.messages.empty();
  TokenScores scores = conversation ? engine.score_conversation_tokens(scored_messages(r.messages), "--messages " + r.messages)
                                    : engine.score_tokens(r.text);
  TokenTable tokens{scores.tokens, scores.texts, {}, scores.attention, scores.token_probability, scores.latents};
  for (const auto& p : scores.probability) tokens.scores.push_back(table_of(engine, p, r.display));
  if (!r.csv.empty()) write_file_atomic(r.csv, per_token_csv(tokens));
  if (!r.html.empty()) write_file_atomic(r.html, per_token_html(tokens, "Per-token probe scores"));
  std::string cut_note = fmt::format("The text is longer than {}: its first {} tokens were cut and are not scored.\n",
                                     engine.prompt_limit().description, scores.cut);
  if (r.display.json) {
    const std::string shown = conversation ? "conversation" : r.text;
    Json out = with_steering(per_token_json(shown, scores, tokens.scores), engine);
    if (r.display.calibrated) out["thresholds"] = engine.threshold_source();
    fmt::print("{}\n", dump_json(out, 2));
    return;
  }
  if (scores.cut > 0) fmt::print("{}", cut_note);
  fmt::print("{}", per_token_terminal(tokens, r.display.top_k));
  if (!r.csv.empty()) fmt::print("wrote {}\n", r.csv);
  if (!r.html.empty()) fmt::print("wrote {}\n", r.html);
}

void show_comparison(const Engine& engine, const InferenceRequest& r) {
  std::vector<TextScores> scores = engine.score({r.text, r.compare});
  std::vector<Difference> differences = compare_tables(table_of(engine, scores[0].probability, r.display),
                                                       table_of(engine, scores[1].probability, r.display),
                                                       r.display.aggregate);
  if (!r.display.json) {
    fmt::print("{}", format_comparison(differences, r.display.top_k));
    return;
  }
  Json rows = Json::array();
  for (size_t i = 0; i < differences.size() && static_cast<int64_t>(i) < r.display.top_k; ++i) {
    const Difference& d = differences[i];
    rows.push_back({{"label", d.label}, {"text1_confidence", d.first}, {"text2_confidence", d.second},
                    {"difference", d.difference}, {"text1_best_layer", d.first_layer}, {"text2_best_layer", d.second_layer}});
  }
  Json comparison = {{"text1", r.text}, {"text2", r.compare}, {"biggest_differences", rows}};
  fmt::print("{}\n", dump_json(with_steering(std::move(comparison), engine), 2));
}

void show_conversation(const Engine& engine, const InferenceRequest& r) {
  const std::vector<TextScores> scores =
      engine.score_conversations({scored_messages(r.messages)}, [&r](size_t) { return "--messages " + r.messages; });
  // "conversation" where a text's ranking holds the text, as probe_server's /v1/rank answers "messages".
  Json shown = show(engine, "conversation", scores[0], r.display, r.engine.best_layer, false);
  if (r.display.json) fmt::print("{}\n", dump_json(shown, 2));
}

// --text as given, or --file's texts (read before the model loaded).
std::vector<std::string> request_texts(const InferenceRequest& r) {
  if (!r.text.empty()) return {r.text};
  return read_texts(r.file_bytes, input_name(r.file), r.text_field);
}

// --file of conversations: each ranked at the probes' token mask, shown as "conversation N" (N its line).
void show_conversation_file(const Engine& engine, const InferenceRequest& r, const std::vector<ConversationRow>& rows) {
  std::vector<std::string> conversations;
  for (const ConversationRow& row : rows) conversations.push_back(row.conversation);
  const std::vector<TextScores> scores = engine.score_conversations(
      conversations, [&](size_t i) { return fmt::format("{}:{}", input_name(r.file), rows[i].line); });
  Json all = Json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string name = fmt::format("conversation {}", rows[i].line);
    all.push_back(show(engine, name, scores[i], r.display, r.engine.best_layer, false));
  }
  if (r.display.json) fmt::print("{}\n", dump_json(all, 2));
}

void show_texts(const Engine& engine, const InferenceRequest& r) {
  if (!r.file.empty()) {
    const std::vector<ConversationRow> conversations =
        read_conversation_rows(r.file_bytes, input_name(r.file), r.text_field);
    if (!conversations.empty()) return show_conversation_file(engine, r, conversations);
  }
  std::vector<std::string> texts = request_texts(r);
  std::vector<TextScores> scores = engine.score(texts);
  Json all = Json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    all.push_back(show(engine, texts[i], scores[i], r.display, r.engine.best_layer, false));
  }
  if (r.display.json) fmt::print("{}\n", dump_json(texts.size() == 1 && r.file.empty() ? all[0] : all, 2));
}

// Texts read line by line until "quit" (or the end of the input). The prompts are for a person at a terminal:
// they are not written when stdin is a pipe, nor ever into --json output.
void interactive_session(const Engine& engine, const InferenceRequest& r, std::istream& input, bool prompt) {
  prompt = prompt && !r.display.json;
  if (prompt) fmt::print("\nInteractive mode - enter text to analyze (or 'quit' to exit):\n\n");
  std::string line;
  while (true) {
    if (prompt) fmt::print("Text: ");
    std::fflush(stdout);
    if (!std::getline(input, line)) break;
    std::string text(trimmed(line)), lower = text;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "quit" || lower == "exit" || lower == "q") break;
    if (text.empty()) continue;
    Json shown = show(engine, text, engine.score({text})[0], r.display, r.engine.best_layer, true);
    if (r.display.json) fmt::print("{}\n", dump_json(shown));
  }
}

void check_request(InferenceRequest& r) {
  r.display.aggregate = parse_aggregate(r.aggregate);
  if (!r.text.empty() && !r.file.empty()) fail_usage("--text and --file exclude each other");
  if (!r.messages.empty()) {  // before the model loads
    try {
      require_input_file(r.messages);
    } catch (const std::exception&) {
      rethrow_with_context("--messages");
    }
  }
  if (!r.compare.empty() && r.text.empty()) fail_usage("--compare needs --text");
  if (r.per_token && r.text.empty() && r.messages.empty()) fail_usage("--per-token needs --text or --messages");
  if (r.chat && !r.generate) fail_usage("--chat goes with --generate (--messages ranks a conversation without it)");
  if (!r.messages.empty() && !r.compare.empty()) fail_usage("--compare takes --text: --messages ranks one conversation");
  if (!r.messages.empty() && (!r.text.empty() || !r.file.empty())) {
    fail_usage("--messages is the whole prompt: it excludes --text and --file");
  }
  if (r.generate && r.text.empty() && r.file.empty() && r.messages.empty()) {
    fail_usage("--generate needs --text, --file or --messages");
  }
  // A generation's report scores its prompt as --per-token --text does; a conversation's tokens, --per-token --messages.
  if ((!r.csv.empty() || !r.html.empty()) && r.generate && (r.chat || !r.messages.empty())) {
    fail_usage("--csv and --html report a generation after a plain prompt: leave out --chat and --messages (--per-token "
               "--messages reports a conversation's tokens)");
  }
  if (r.generate && (r.per_token || !r.compare.empty())) fail_usage("--generate excludes --per-token and --compare");
  if (r.per_token && !r.compare.empty()) fail_usage("--per-token excludes --compare");
  if (r.engine.best_layer && (r.engine.layer >= 0 || !r.engine.layers.empty())) {
    fail_usage("--best-layer scores each label at its best layer: it excludes --layer and --layers");
  }
  if (!r.monitors.empty() && !r.generate) fail_usage("--monitor watches a generation: it goes with --generate");
  monitor::monitor_policies(r.monitors);  // a malformed --monitor is refused before the model loads
  if ((!r.csv.empty() || !r.html.empty()) && !r.per_token && !r.generate) {
    fail_usage("--csv and --html go with --per-token or --generate");
  }
  if ((!r.csv.empty() || !r.html.empty()) && r.generate && !r.file.empty()) {
    fail_usage("--csv and --html with --generate report one prompt: give it with --text");
  }
  std::vector<std::string> where;  // each report's path, its folder resolved: ./F and F are one file
  for (const std::string* output : {&r.csv, &r.html}) {
    if (output->empty()) continue;
    check_output_file(*output, r.overwrite);
    check_output_folder(*output);  // before the model loads
    const std::string folder = parent_directory(*output);
    const size_t slash = output->rfind('/');
    where.push_back(absolute_path(folder.empty() ? "." : folder) + "/" +
                    (slash == std::string::npos ? *output : output->substr(slash + 1)));
    if (is_directory(r.engine.probes_dir) && where.back().rfind(absolute_path(r.engine.probes_dir) + "/", 0) == 0) {
      fail_usage("{}: it is inside --probes-dir {}, whose files a report must not replace", *output, r.engine.probes_dir);
    }
  }
  if (where.size() == 2 && where[0] == where[1]) fail_usage("--csv and --html name the same file {}", r.csv);
  // Last, once every flag is known good (standard input or a pipe is consumed), and before the model loads.
  if (!r.file.empty()) r.file_bytes = read_flag_input(r.file, "--file").bytes;
  // Probes trained on conversations refuse texts before the model loads (Engine::require_texts). A generation
  // reads a --file's rows as texts.
  const bool conversations = !r.messages.empty() || r.chat ||
                             (!r.generate && !r.file.empty() && holds_conversations(r.file_bytes, input_name(r.file), r.text_field));
  r.engine.texts_only = !conversations;
}

// A probability: a finite number from 0 to 1 (CLI::Range lets NaN through).
CLI::Validator unit_interval() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double value = std::strtod(text.c_str(), &end);
        bool ok = end != text.c_str() && *end == '\0' && std::isfinite(value) && value >= 0 && value <= 1;
        return ok ? "" : "must be a number from 0 to 1, got " + text;
      },
      "[0, 1]");
}

// The conversations to generate after: --messages' one, or with --chat each text a user message; none for texts.
std::vector<chat::Conversation> generation_conversations(const InferenceRequest& r) {
  if (!r.messages.empty()) return {chat::read_conversation(r.messages)};
  std::vector<chat::Conversation> conversations;
  if (r.chat) {
    for (const std::string& text : request_texts(r)) conversations.push_back({chat::user_message(text), OrderedJson()});
  }
  return conversations;
}

}  // namespace

Display json_display(int64_t top_k, double threshold, bool calibrated, const std::string& mode, const std::string& aggregate) {
  Display display;
  display.top_k = top_k;
  display.threshold = threshold;
  display.calibrated = calibrated;
  display.mode = mode;
  display.aggregate = parse_aggregate(aggregate);
  display.json = true;
  return display;
}

Json with_steering(Json out, const Engine& engine) {
  if (!engine.steering().empty() && out.is_object()) out["steering"] = engine.steering().record();
  return out;
}

Json text_json(const Engine& engine, const std::string& text, const TextScores& scores, const Display& display,
               bool best_layer) {
  return with_steering(ranking_json(table_of(engine, scores.probability, display), text, scores.cut, display,
                                    single_layer_view(engine, best_layer), engine.multiclass()),
                       engine);
}

void show_generation(const Engine& engine, const InferenceRequest& r) {
  const std::vector<chat::Conversation> conversations = generation_conversations(r);
  // The texts as given, or the conversations rendered with the model's chat template.
  const ChatPrompts given =
      conversations.empty() ? ChatPrompts{request_texts(r), {}, false} : engine.chat_prompts(conversations);
  generation::GenerationOptions options = generation::resolve_generation_flags(r.generation, engine.model_dir());
  const bool report = !r.csv.empty() || !r.html.empty();
  // The report covers the prompt's tokens (scored as --per-token scores them) and then the new ones.
  TokenTable tokens;
  if (report) {
    TokenScores prompt = engine.score_tokens(r.text);
    tokens = TokenTable{prompt.tokens, prompt.texts, {}};
    for (const auto& p : prompt.probability) tokens.scores.push_back(table_of(engine, p, r.display));
  }
  GenerationPrinter printer(given.prompts, r.display.top_k, r.display.json, r.live_view,
                           engine.steering().empty() ? Json() : engine.steering().record());
  std::shared_ptr<const monitor::MonitorSet> monitors;
  try {
    monitors = engine.resolve_monitors(monitor::monitor_policies(r.monitors));
  } catch (const monitor::PolicyError& e) {
    throw monitor::as_flag_error(r.monitors, e);
  }
  auto show = [&](const ScoredToken& token) {
    ScoreTable table = table_of(engine, token.probability, r.display);
    printer.show(token, table);
    if (report) {
      tokens.tokens.push_back(token.token);
      tokens.texts.push_back(token.text);
      tokens.scores.push_back(std::move(table));
    }
    return true;
  };
  std::vector<GeneratedText> texts = engine.generate_watched(given, options, monitors, show);
  printer.finish(texts);
  if (!r.csv.empty()) write_file_atomic(r.csv, per_token_csv(tokens));
  if (!r.html.empty()) write_file_atomic(r.html, per_token_html(tokens, "Probe scores of a generation"));
  if (!r.display.json) {
    if (!r.csv.empty()) fmt::print("wrote {}\n", r.csv);
    if (!r.html.empty()) fmt::print("wrote {}\n", r.html);
  }
}

ScoreTable table_of(const Engine& engine, const std::vector<std::vector<double>>& probability, const Display& d) {
  ScoreTable table{engine.layers(), engine.labels(), probability, {}, {}, d.calibrated ? engine.threshold_source() : ""};
  for (size_t l = 0; l < table.layers.size(); ++l) {
    table.threshold.emplace_back();
    table.auc.emplace_back();
    for (size_t k = 0; k < table.labels.size(); ++k) {
      table.threshold.back().push_back(d.calibrated ? engine.calibrated_threshold(l, k) : d.threshold);
      table.auc.back().push_back(engine.validation_auc(l, k));
    }
  }
  return table;
}

namespace {

// The ranking of one text as the display lays it out.
Json ranking_view(const ScoreTable& table, const std::string& text, const Display& d, bool single_layer, bool multiclass) {
  if (single_layer) return {{"text", text}, {"predictions", predictions_json(single_layer_shown(table, d, multiclass))}};
  if (d.mode == "by-action") {
    std::vector<LabelSummary> summaries = by_label(table, d.aggregate);
    summaries.resize(std::min<size_t>(summaries.size(), static_cast<size_t>(d.top_k)));
    return {{"text", text}, {"labels", label_summaries_json(summaries)}};
  }
  if (d.mode == "by-layer") {
    Json layers = Json::array();
    for (const LayerGroup& g : by_layer(table)) {
      layers.push_back({{"layer", g.layer}, {"predictions", predictions_json(g.predictions)}});
    }
    return {{"text", text}, {"layers", layers}};
  }
  return {{"text", text}, {"predictions", predictions_json(top_predictions(table, d.top_k))}};
}

}  // namespace

Json ranking_json(const ScoreTable& table, const std::string& text, int64_t cut, const Display& d, bool single_layer,
                  bool multiclass) {
  Json out = ranking_view(table, text, d, single_layer, multiclass);
  out["cut_tokens"] = cut;
  if (!table.threshold_source.empty()) out["thresholds"] = table.threshold_source;
  return out;
}

namespace {

// An every-token probe's values on one token (attention weights, a token's own scores): {label, layer, `key`}
// where defined.
Json token_values_json(const std::vector<std::vector<double>>& values, const ScoreTable& table, const char* key) {
  Json out = Json::array();
  for (size_t l = 0; l < values.size(); ++l) {
    for (size_t k = 0; k < values[l].size(); ++k) {
      if (std::isnan(values[l][k])) continue;
      out.push_back({{"label", table.labels[k]}, {"layer", table.layers[l]}, {key, values[l][k]}});
    }
  }
  return out;
}

}  // namespace

Json per_token_json(const std::string& text, const TokenScores& scores, const std::vector<ScoreTable>& tables) {
  Json rows = Json::array();
  for (size_t t = 0; t < tables.size(); ++t) {
    rows.push_back({{"position", t}, {"token", scores.tokens[t]}, {"text", scores.texts[t]},
                    {"predictions", predictions_json(all_predictions(tables[t]))}});
    if (!scores.mask.empty()) rows.back()["in_mask"] = scores.mask[t] != 0;
    if (!scores.token_probability.empty()) {
      rows.back()["token_scores"] = token_values_json(scores.token_probability[t], tables[t], "score");
    }
    if (!scores.attention.empty()) rows.back()["attention"] = token_values_json(scores.attention[t], tables[t], "weight");
    for (const auto& [name, per_token] : scores.latents) rows.back()["latents"][name] = sae::latents_json(per_token[t]);
  }
  Json out = {{"text", text}, {"cut_tokens", scores.cut}, {"tokens", rows}};
  if (!scores.suffix_attention.empty() && !tables.empty()) {
    Json suffix = Json::array();
    for (const auto& weights : scores.suffix_attention) suffix.push_back(token_values_json(weights, tables.front(), "weight"));
    out["suffix_attention"] = suffix;
  }
  return out;
}

void check_calibrated(const Engine& engine, bool calibrated, const std::string& probes_dir,
                      const std::string& calibrated_name, const std::string& threshold_name) {
  if (!calibrated || !engine.multiclass()) return;
  fail_usage("{}: {} holds a multiclass probe (train_probes), whose classes have no thresholds of their own; use {}",
             calibrated_name, probes_dir, threshold_name);
}

std::vector<std::string> read_texts(const std::string& contents, const std::string& path, const std::string& field) {
  std::istringstream in(contents);
  std::vector<std::string> texts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (number == 1) line = std::string(without_byte_order_mark(line));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line.front() != '{') {
      texts.push_back(line);
      continue;
    }
    Json object = parse_json(line, fmt::format("{}:{}", path, number));
    auto text = object.find(field);
    if (text == object.end() || !text->is_string()) {
      std::vector<std::string> fields;
      if (object.is_object()) {
        for (const auto& item : object.items()) fields.push_back(item.key());
      }
      fail_input("{}:{}: no string field '{}' (fields: {}; choose another with --text-field)", path, number, field,
                 fmt::join(fields, ", "));
    }
    texts.push_back(text->get<std::string>());
  }
  if (texts.empty()) fail_input("{}: no texts", path);
  return texts;
}

namespace {

// A text row may carry messages too: a conversation's row has no text field.
template <typename Object>
bool is_conversation_row(const Object& object, const std::string& field) {
  return object.is_object() && object.contains("messages") && !object.contains(field);
}

}  // namespace

bool holds_conversations(const std::string& contents, const std::string& path, const std::string& field) {
  std::istringstream in(contents);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (number == 1) line = std::string(without_byte_order_mark(line));
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    // Told without reading the row as a template would: a text row's other fields may hold what a template refuses.
    return line[first] == '{' && is_conversation_row(parse_json(line, fmt::format("{}:{}", path, number)), field);
  }
  return false;
}

std::vector<ConversationRow> read_conversation_rows(const std::string& contents, const std::string& path,
                                                   const std::string& field) {
  if (!holds_conversations(contents, path, field)) return {};
  std::istringstream in(contents);
  std::vector<ConversationRow> rows;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (number == 1) line = std::string(without_byte_order_mark(line));
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // Each row is read once as capture reads a dataset's row: its messages with the tools it offers, in the order
    // written.
    const std::string where = fmt::format("{}:{}", path, number);
    const OrderedJson ordered = parse_ordered_json(line, where, {"messages", "tools"});
    if (!is_conversation_row(ordered, field)) fail_input("{}: no \"messages\" (the rows before it are conversations)", where);
    rows.push_back(ConversationRow{number, chat::conversation_text(chat::conversation_of(ordered, where))});
  }
  return rows;
}

void add_inference_flags(CLI::App& app, InferenceRequest& r) {
  EngineOptions& e = r.engine;
  Display& d = r.display;
  app.add_option("--probes-dir", e.probes_dir,
                 "Probes directory (probes.json, or layer_{L}/ folders) of train_binary_probes, or of train_probes")
      ->required();
  add_model_options(app, e.model_dir, "The checkpoint the probes were trained on (default: the one recorded with them)");
  app.add_option("--layer", e.layer, "Layer to read (default: the layer recorded in the probes)");
  add_layers_option(app, e.layers, "Layers of a multi-layer probes directory: 8 17, 8,17, 21-30 or all (default: all)");
  app.add_option("--text", r.text, "Text to analyze (without --text or --file: texts are read from stdin, one per line)");
  app.add_option("--file", r.file, "Texts to analyze: one per line, or JSONL with a text field (- reads stdin)");
  app.add_option("--text-field", r.text_field, "JSON field of the texts in --file")->capture_default_str();
  app.add_option("--top-k", d.top_k, "How many labels to show")->capture_default_str()->check(at_least(1));
  app.add_option("--threshold", d.threshold, "Confidence at which a label is marked")
      ->capture_default_str()
      ->check(unit_interval());
  app.add_flag("--calibrated", d.calibrated,
               "Mark labels at each probe's own threshold instead: the one set at a target false-positive rate "
               "(calibrate_probes) where there is one, else the validation-tuned one; JSON says which (thresholds)");
  app.add_option("--compare", r.compare, "A second text: show the labels that change most from --text to it");
  app.add_option("--mode", d.mode, "Several layers: all (every label and layer), by-action or by-layer")
      ->check(CLI::IsMember({"all", "by-action", "by-layer"}))->capture_default_str();
  app.add_option("--aggregate", r.aggregate, "by-action and --compare over layers: max or mean")->capture_default_str();
  app.add_flag("--per-token", r.per_token, "Score every token position of --text");
  app.add_option("--csv", r.csv, "--per-token: write action_name,token_position,token_text,confidence,layer,is_active");
  app.add_option("--html", r.html, "--per-token: write a self-contained token x label heatmap");
  app.add_flag("--overwrite", r.overwrite, "Replace existing --csv / --html files");
  add_engine_flags(app, e, "Texts per forward pass with --file");
  add_placement_options(app, r.devices, e.placement,
                        "Several GPUs, e.g. 0,1: a model too big for one GPU split over them (--placement)");
  app.add_flag("--json", d.json, "Print JSON on stdout (with --generate: one line per token)");
  app.add_flag("--generate", r.generate,
               "Generate after --text (or each --file text, --batch-size at a time) while the probes score every new token");
  app.add_flag("--chat", r.chat,
               "With --generate: each text is a user message, rendered with the model's chat template (and its reply prompt)");
  app.add_option("--messages", r.messages,
                 "A file holding a conversation (a JSON list of {\"role\", \"content\"} messages, or an object with \"messages\" and "
                 "\"tools\") rendered with the model's chat template: ranked at the probes' token mask "
                 "(the assistant's tokens for probes trained on texts), or with --generate the prompt")
      ->type_name("FILE");
  generation::add_generation_flags(app, r.generation);
  monitor::add_monitor_flags(app, r.monitors);
  steering::add_steering_flags(app, e.steering, false, true);
}

void add_engine_flags(CLI::App& app, EngineOptions& e, const std::string& batch_help) {
  app.add_flag("--best-layer", e.best_layer, "Score each label at its best layer (per_action_layer_analysis.json)");
  app.add_flag("--force", e.force, "Run probes recorded for another model than --model (a warning, not an error)");
  app.add_option("--batch-size", e.batch_size, batch_help)->capture_default_str()->check(at_least(1));
  add_device_options(app, e.device, e.dtype);
  add_fp8_products_option(app, e.fp8_products);
  sae::add_sae_flags(app, e.saes, nullptr, &e.sae_labels);
}

void run_inference(InferenceRequest& r, std::istream& input, bool input_is_terminal) {
  check_request(r);
  r.engine.generate = r.generate;
  for (int index : r.devices) r.engine.devices.push_back(fmt::format("cuda:{}", index));
  Engine engine = Engine::load(r.engine);
  check_calibrated(engine, r.display.calibrated, r.engine.probes_dir);
  if (r.per_token) return show_per_token(engine, r);
  if (r.generate) return show_generation(engine, r);
  if (!r.compare.empty()) return show_comparison(engine, r);
  if (!r.messages.empty()) return show_conversation(engine, r);
  if (!r.text.empty() || !r.file.empty()) return show_texts(engine, r);
  interactive_session(engine, r, input, input_is_terminal);
}

}  // namespace probekit::inference
