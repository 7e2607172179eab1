// multi_probe_inference: loads a model and its trained probes and ranks which labels a text shows, for one
// text, a file of texts, an interactive session, two texts compared, or every token of a text.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>

#include "common/cli.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "device/gpu_utils.h"
#include "inference/engine.h"
#include "inference/ranking.h"
#include "inference/reports.h"

using namespace probekit;
using namespace probekit::inference;

namespace {

struct Display {
  int64_t top_k = 5;
  double threshold = 0.1;
  bool calibrated = false;
  std::string mode = "all";
  Aggregate aggregate = Aggregate::kMax;
  bool json = false;
};

ScoreTable table_of(const Engine& engine, const std::vector<std::vector<double>>& probability, const Display& d) {
  ScoreTable table{engine.layers(), engine.labels(), probability, {}, {}};
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

bool single_layer_view(const Engine& engine, bool best_layer) { return engine.layers().size() == 1 || best_layer; }

// The ranked view of one text, as the reference's engines print it (or as JSON).
Json show(const Engine& engine, const std::string& text, const ScoreTable& table, const Display& d, bool best_layer,
          bool interactive) {
  if (single_layer_view(engine, best_layer)) {
    std::vector<Prediction> shown = shown_predictions(all_predictions(table), d.top_k);
    if (d.json) return {{"text", text}, {"predictions", predictions_json(shown)}};
    if (interactive) {
      fmt::print("\nTop {} predictions:\n", d.top_k);
    } else {
      fmt::print("\nAnalyzing text: \"{}\"\n\n{}\n\nDetected labels (top {}):\n\n", text, std::string(70, '-'), d.top_k);
    }
    fmt::print("{}\n", format_ranking(shown, best_layer));
    return {};
  }
  if (d.mode == "by-action") {
    std::vector<LabelSummary> summaries = by_label(table, d.aggregate);
    if (d.json) return {{"text", text}, {"labels", label_summaries_json({summaries.begin(), summaries.begin() + std::min<size_t>(summaries.size(), static_cast<size_t>(d.top_k))})}};
    fmt::print("\nTop {} actions ({} confidence across layers):\n\n{}\n", d.top_k,
               d.aggregate == Aggregate::kMax ? "max" : "mean", format_by_label(summaries, d.top_k, d.aggregate));
    return {};
  }
  if (d.mode == "by-layer") {
    std::vector<LayerGroup> groups = by_layer(table);
    if (d.json) {
      Json layers = Json::array();
      for (const LayerGroup& g : groups) layers.push_back({{"layer", g.layer}, {"predictions", predictions_json(g.predictions)}});
      return {{"text", text}, {"layers", layers}};
    }
    fmt::print("{}\n", format_by_layer(groups, d.threshold));
    return {};
  }
  std::vector<Prediction> ranked = all_predictions(table);
  ranked.resize(std::min<size_t>(ranked.size(), static_cast<size_t>(d.top_k)));
  if (d.json) return {{"text", text}, {"predictions", predictions_json(ranked)}};
  fmt::print("\nTop {} predictions across all layers:\n\n{}\n", ranked.size(), format_all_layers(ranked));
  return {};
}

// --file: one text per line, or JSON objects with a text field.
std::vector<std::string> read_texts(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open", path);
  std::vector<std::string> texts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line.front() == '{') {
      Json object = parse_json(line, fmt::format("{}:{}", path, number));
      auto text = object.find(field);
      if (text == object.end() || !text->is_string()) fail_input("{}:{}: no string field '{}'", path, number, field);
      texts.push_back(text->get<std::string>());
    } else {
      texts.push_back(line);
    }
  }
  if (texts.empty()) fail_input("{}: no texts", path);
  return texts;
}

}  // namespace

int main(int argc, char** argv) {
  use_passive_openmp_threads(argv);
  CLI::App app{"Rank which labels a text shows, with a model and its trained probes"};
  CommonOptions common;
  add_common_options(app, common);
  EngineOptions options;
  Display display;
  std::string text, file, compare, csv, html, text_field = "text", aggregate = "max";
  bool per_token = false;

  app.add_option("--probes-dir", options.probes_dir, "Probes directory (probes.json, or layer_{L}/ folders)")->required();
  app.add_option("--model", options.model_dir, "Checkpoint directory the probes were trained on")->required();
  app.add_option("--layer", options.layer, "Layer to read (default: the layer recorded in the probes)");
  app.add_option("--layers", options.layers, "Layers of a multi-layer probes directory: 21-30, 8,17 or all (default: all)");
  app.add_option("--text", text, "Text to analyze (without --text or --file: interactive, one text per line)");
  app.add_option("--file", file, "Texts to analyze: one per line, or JSONL with a text field");
  app.add_option("--text-field", text_field, "JSON field of the texts in --file")->capture_default_str();
  app.add_option("--top-k", display.top_k, "How many labels to show")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threshold", display.threshold, "Confidence at which a label is marked")->capture_default_str();
  app.add_flag("--calibrated", display.calibrated, "Mark labels at each probe's validation-tuned threshold instead");
  app.add_option("--compare", compare, "A second text: show the labels that change most from --text to it");
  app.add_option("--mode", display.mode, "Several layers: all (every label and layer), by-action or by-layer")
      ->check(CLI::IsMember({"all", "by-action", "by-layer"}))->capture_default_str();
  app.add_option("--aggregate", aggregate, "by-action and --compare over layers: max or mean")->capture_default_str();
  app.add_flag("--best-layer", options.best_layer, "Score each label at its best layer (per_action_layer_analysis.json)");
  app.add_flag("--per-token", per_token, "Score every token position of --text");
  app.add_option("--csv", csv, "--per-token: write action_name,token_position,token_text,confidence,layer,is_active");
  app.add_option("--html", html, "--per-token: write a self-contained token x label heatmap");
  app.add_option("--batch-size", options.batch_size, "Texts per forward pass with --file")->capture_default_str();
  app.add_option("--device", options.device, "auto|cpu|cuda|cuda:N|rocm|mps")->capture_default_str();
  app.add_option("--dtype", options.dtype, "auto|fp32|bf16|fp16")->capture_default_str();
  app.add_flag("--json", display.json, "Print JSON on stdout");

  return run_tool(app, argc, argv, common, [&] {
    device::configure_threads(common.threads);
    display.aggregate = parse_aggregate(aggregate);
    if (!text.empty() && !file.empty()) fail_usage("--text and --file exclude each other");
    if (!compare.empty() && text.empty()) fail_usage("--compare needs --text");
    if (per_token && text.empty()) fail_usage("--per-token needs --text");
    if ((!csv.empty() || !html.empty()) && !per_token) fail_usage("--csv and --html go with --per-token");
    Engine engine = Engine::load(options);
    auto table_for = [&](const TextScores& s) { return table_of(engine, s.probability, display); };

    if (per_token) {
      TokenScores scores = engine.score_tokens(text);
      TokenTable tokens;
      tokens.tokens = scores.tokens;
      tokens.texts = scores.texts;
      for (const auto& p : scores.probability) tokens.scores.push_back(table_of(engine, p, display));
      if (!csv.empty()) write_file_atomic(csv, per_token_csv(tokens));
      if (!html.empty()) write_file_atomic(html, per_token_html(tokens, "Per-token probe scores"));
      if (display.json) {
        Json rows = Json::array();
        for (size_t t = 0; t < tokens.tokens.size(); ++t) {
          rows.push_back({{"position", t}, {"token", tokens.tokens[t]},
                          {"predictions", predictions_json(all_predictions(tokens.scores[t]))}});
        }
        fmt::print("{}\n", dump_json(Json{{"text", text}, {"tokens", rows}}, 2));
      } else {
        fmt::print("{}", per_token_terminal(tokens, 3));
        if (!csv.empty()) fmt::print("wrote {}\n", csv);
        if (!html.empty()) fmt::print("wrote {}\n", html);
      }
      return;
    }
    if (!compare.empty()) {
      std::vector<TextScores> scores = engine.score({text, compare});
      std::vector<Difference> differences = compare_tables(table_for(scores[0]), table_for(scores[1]), display.aggregate);
      if (display.json) {
        Json rows = Json::array();
        for (size_t i = 0; i < differences.size() && static_cast<int64_t>(i) < display.top_k; ++i) {
          const Difference& d = differences[i];
          rows.push_back({{"label", d.label}, {"text1_confidence", d.first}, {"text2_confidence", d.second},
                          {"difference", d.difference}, {"text1_best_layer", d.first_layer}, {"text2_best_layer", d.second_layer}});
        }
        fmt::print("{}\n", dump_json(Json{{"text1", text}, {"text2", compare}, {"biggest_differences", rows}}, 2));
      } else {
        fmt::print("{}", format_comparison(differences, display.top_k));
      }
      return;
    }
    if (!text.empty() || !file.empty()) {
      std::vector<std::string> texts = text.empty() ? read_texts(file, text_field) : std::vector<std::string>{text};
      std::vector<TextScores> scores = engine.score(texts);
      Json all = Json::array();
      for (size_t i = 0; i < texts.size(); ++i) all.push_back(show(engine, texts[i], table_for(scores[i]), display, options.best_layer, false));
      if (display.json) fmt::print("{}\n", dump_json(texts.size() == 1 && file.empty() ? all[0] : all, 2));
      return;
    }
    fmt::print("\nInteractive mode - enter text to analyze (or 'quit' to exit):\n\n");
    std::string line;
    while (true) {
      fmt::print("Text: ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      auto begin = line.find_first_not_of(" \t\r"), end = line.find_last_not_of(" \t\r");
      std::string input = begin == std::string::npos ? "" : line.substr(begin, end - begin + 1);
      std::string lower = input;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "quit" || lower == "exit" || lower == "q") break;
      if (input.empty()) continue;
      Json shown = show(engine, input, table_for(engine.score({input})[0]), display, options.best_layer, true);
      if (display.json) fmt::print("{}\n", dump_json(shown));
    }
  });
}
