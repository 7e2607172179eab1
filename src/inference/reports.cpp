#include "inference/reports.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>

#include "common/html.h"
#include "common/terminal_text.h"

namespace probekit::inference {

namespace {

const char* mark(bool active) { return active ? "✓" : " "; }

// A label (or other name) in a column of a terminal table, its control characters escaped, left-aligned to `width`
// terminal columns (a CJK character or an emoji takes two).
std::string pad(const std::string& name, size_t width) {
  std::string text = terminal_text(name);
  const size_t columns = display_columns(text);
  return columns >= width ? text : text + std::string(width - columns, ' ');
}

// A text field (a label, a token) as RFC 4180 quotes it. One that a spreadsheet would read as a formula (starting with
// = + - @, a tab or a carriage return: "=HYPERLINK(...)" in a text) gets a leading ' and is quoted, as OWASP advises.
std::string csv_field(const std::string& value) {
  const bool formula = !value.empty() && std::string_view("=+-@\t\r").find(value.front()) != std::string_view::npos;
  if (!formula && value.find_first_of(",\"\n\r") == std::string::npos) return value;
  std::string out = formula ? "\"'" : "\"";
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Background of a confidence: white to deep blue.
std::string heat(double confidence) {
  double c = std::clamp(confidence, 0.0, 1.0);
  return fmt::format("rgba(37,99,235,{:.3f})", c * 0.9);
}

}  // namespace

std::string format_ranking(const std::vector<Prediction>& shown, bool with_layer) {
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i) {
    const Prediction& p = shown[i];
    out += fmt::format("  {} {}. {} {:.10f}", mark(p.active), i + 1, pad(p.label, 30), p.confidence);
    if (with_layer) out += fmt::format("  (Layer {}, AUC: {:.3f})", p.layer, p.auc);
    out += "\n";
  }
  return out;
}

std::string format_all_layers(const std::vector<Prediction>& shown) {
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i) {
    const Prediction& p = shown[i];
    out += fmt::format("  {} {:2}. {} (L{:2})  {:.4f}\n", mark(p.active), i + 1, pad(p.label, 30), p.layer, p.confidence);
  }
  return out;
}

std::string format_by_label(const std::vector<LabelSummary>& summaries, int64_t top_k, Aggregate aggregate) {
  std::string out;
  const char* name = aggregate == Aggregate::kMax ? "max" : "mean";
  for (size_t i = 0; i < summaries.size() && static_cast<int64_t>(i) < top_k; ++i) {
    const LabelSummary& s = summaries[i];
    out += fmt::format("  {} {:2}. {} {}={:.4f} @ L{}\n", mark(s.active), i + 1, pad(s.label, 30), name, s.aggregate, s.best_layer);
    std::vector<std::string> layers;
    for (size_t j = 0; j < s.by_layer.size() && j < 3; ++j) {
      layers.push_back(fmt::format("L{}:{:.3f}", s.by_layer[j].first, s.by_layer[j].second));
    }
    out += fmt::format("       Layers: {}\n", fmt::join(layers, ", "));
  }
  return out;
}

std::string format_by_layer(const std::vector<LayerGroup>& groups, int64_t top_k, const std::string& threshold) {
  std::string out = fmt::format("\nPredictions by layer (threshold={}):\n", threshold);
  for (const LayerGroup& group : groups) {
    out += fmt::format("\n  Layer {} ({} active actions):\n", group.layer, group.active);
    for (size_t i = 0; i < group.predictions.size() && i < static_cast<size_t>(top_k); ++i) {
      out += fmt::format("    {}. {} {:.4f}\n", i + 1, pad(group.predictions[i].label, 30), group.predictions[i].confidence);
    }
  }
  return out;
}

std::string format_comparison(const std::vector<Difference>& differences, int64_t top_k) {
  std::string out = fmt::format("\nBiggest differences (text 2 - text 1):\n\n");
  for (size_t i = 0; i < differences.size() && static_cast<int64_t>(i) < top_k; ++i) {
    const Difference& d = differences[i];
    out += fmt::format("  {:2}. {} {:+.4f}  ({:.4f} -> {:.4f})\n", i + 1, pad(d.label, 30), d.difference, d.first, d.second);
  }
  return out;
}

Json predictions_json(const std::vector<Prediction>& predictions) {
  Json out = Json::array();
  for (const Prediction& p : predictions) {
    out.push_back({{"label", p.label}, {"layer", p.layer}, {"confidence", p.confidence}, {"is_active", p.active},
                   {"val_auc", p.auc}});
  }
  return out;
}

Json label_summaries_json(const std::vector<LabelSummary>& summaries) {
  Json out = Json::array();
  for (const LabelSummary& s : summaries) {
    Json layers = Json::object();
    for (const auto& [layer, confidence] : s.by_layer) layers[std::to_string(layer)] = confidence;
    out.push_back({{"label", s.label}, {"aggregate", s.aggregate}, {"best_layer", s.best_layer}, {"is_active", s.active},
                   {"confidences", layers}});
  }
  return out;
}

namespace {

// Every-token probes, for the prediction `p` of token t: the token's own score (ema, rolling) and the weight the
// whole text's pool puts on it; empty for other probes.
std::string token_note(const TokenTable& table, size_t t, const Prediction& p) {
  if (table.attention.empty() && table.token_scores.empty()) return "";
  const ScoreTable& s = table.scores[t];
  const auto l = static_cast<size_t>(std::find(s.layers.begin(), s.layers.end(), p.layer) - s.layers.begin());
  const auto k = static_cast<size_t>(std::find(s.labels.begin(), s.labels.end(), p.label) - s.labels.begin());
  if (l >= s.layers.size() || k >= s.labels.size()) return "";
  std::string note;
  if (!table.token_scores.empty() && !std::isnan(table.token_scores[t][l][k])) {
    note = fmt::format("  (token {:.3f})", table.token_scores[t][l][k]);
  }
  if (table.attention.empty()) return note;
  const double w = table.attention[t][l][k];
  return note + (std::isnan(w) ? "  (not read)" : fmt::format("  (attention {:.3f})", w));
}

}  // namespace

std::string latents_text(const std::map<std::string, sae::TopLatents>& latents) {
  constexpr size_t kShown = 3;
  std::string out;
  for (const auto& [name, top] : latents) {
    std::vector<std::string> shown;
    for (size_t i = 0; i < top.size() && i < kShown; ++i) {
      const std::string description = top[i].description.empty() ? "" : " " + dump_json(terminal_text(top[i].description));
      shown.push_back(fmt::format("{} {:.2f}{}", top[i].index, top[i].value, description));
    }
    out += fmt::format("  | {} {}", terminal_text(name), shown.empty() ? std::string("-") : fmt::format("{}", fmt::join(shown, ", ")));
  }
  return out;
}

std::string per_token_terminal(const TokenTable& table, int64_t top) {
  std::string out = fmt::format("{:>4}  {:<18}  top labels\n", "pos", "token");
  for (size_t t = 0; t < table.tokens.size(); ++t) {
    std::vector<Prediction> ranked = all_predictions(table.scores[t]);
    std::vector<std::string> parts;
    for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < top; ++i) {
      const Prediction& p = ranked[i];
      parts.push_back(fmt::format("{}{}{} {:.3f}", p.active ? "✓" : "", terminal_text(p.label),
                                  table.scores[t].layers.size() > 1 ? fmt::format("@L{}", p.layer) : "", p.confidence));
    }
    std::map<std::string, sae::TopLatents> latents;
    for (const auto& [name, per_token] : table.latents) {
      if (t < per_token.size()) latents[name] = per_token[t];
    }
    out += fmt::format("{:>4}  {}  {}{}{}\n", t, pad(dump_json(table.tokens[t]), 18), fmt::join(parts, ", "),
                       ranked.empty() ? "" : token_note(table, t, ranked.front()), latents_text(latents));
  }
  return out;
}

std::string per_token_csv(const TokenTable& table) {
  const bool attention = !table.attention.empty();
  const bool own = !table.token_scores.empty();
  std::string out = std::string("action_name,token_position,token_text,confidence,layer,is_active") +
                    (own ? ",token_score" : "") + (attention ? ",attention\n" : "\n");
  for (size_t t = 0; t < table.tokens.size(); ++t) {
    const ScoreTable& s = table.scores[t];
    for (size_t l = 0; l < s.layers.size(); ++l) {
      for (size_t k = 0; k < s.labels.size(); ++k) {
        double p = s.probability[l][k];
        if (std::isnan(p)) continue;
        out += fmt::format("{},{},{},{:.6f},{},{}", csv_field(s.labels[k]), t, csv_field(table.tokens[t]), p, s.layers[l],
                           p >= s.threshold[l][k] ? "True" : "False");
        if (own) {
          const double score = table.token_scores[t][l][k];
          out += std::isnan(score) ? "," : fmt::format(",{:.6f}", score);
        }
        if (attention) {
          const double w = table.attention[t][l][k];
          out += std::isnan(w) ? "," : fmt::format(",{:.6f}", w);
        }
        out += "\n";
      }
    }
  }
  return out;
}

namespace {

std::string legend_html() {
  std::string legend;
  for (double v : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    legend += fmt::format("<span style=\"background:{}\">{:.2f}</span>", heat(v), v);
  }
  return legend;
}

// Attention probes: the text coloured by the weight the whole text's pool of (layer l, label k) puts on each token,
// relative to its largest; empty for other probes.
std::string attention_section(const TokenTable& table, size_t l, size_t k) {
  if (table.attention.empty()) return "";
  double largest = 0.0;
  for (const auto& weights : table.attention) largest = std::max(largest, std::isnan(weights[l][k]) ? 0.0 : weights[l][k]);
  std::string reading;
  for (size_t t = 0; t < table.tokens.size(); ++t) {
    const double w = table.attention[t][l][k];
    const double shade = std::isnan(w) || largest <= 0.0 ? 0.0 : w / largest;
    reading += fmt::format("<span class=\"tok\" style=\"background:{}\" title=\"attention {:.4f}\">{}</span>", heat(shade),
                           std::isnan(w) ? 0.0 : w, html_escape(table.texts[t]));
  }
  const ScoreTable& s = table.scores.front();
  return fmt::format("<h2>Attention of {} (layer {}) over the whole text</h2><div class=\"reading\">{}</div>\n",
                     html_escape(s.labels[k]), s.layers[l], reading);
}

}  // namespace

std::string per_token_html(const TokenTable& table, const std::string& title) {
  if (table.tokens.empty()) return "<!doctype html><title>empty</title>";
  // Columns: (label, layer) pairs, the 30 with the highest peak over the text; a pair no token has a score for
  // (best-layer mode) is none. A token may have none (the BOS before a text read without a suffix): its cells are empty.
  struct Column {
    size_t l, k;
    double peak;
  };
  std::vector<Column> columns;
  const ScoreTable& first = table.scores.front();
  for (size_t l = 0; l < first.layers.size(); ++l) {
    for (size_t k = 0; k < first.labels.size(); ++k) {
      double peak = std::numeric_limits<double>::quiet_NaN();
      for (const ScoreTable& s : table.scores) {
        if (!std::isnan(s.probability[l][k])) peak = std::isnan(peak) ? s.probability[l][k] : std::max(peak, s.probability[l][k]);
      }
      if (!std::isnan(peak)) columns.push_back({l, k, peak});
    }
  }
  std::stable_sort(columns.begin(), columns.end(), [](const Column& a, const Column& b) { return a.peak > b.peak; });
  if (columns.size() > 30) columns.resize(30);
  bool several_layers = first.layers.size() > 1;
  auto column_name = [&](const Column& c) {
    return several_layers ? fmt::format("{} (L{})", first.labels[c.k], first.layers[c.l]) : first.labels[c.k];
  };

  std::string reading, rows;
  for (size_t t = 0; t < table.tokens.size(); ++t) {
    const ScoreTable& s = table.scores[t];
    const Column* best = nullptr;
    for (const Column& c : columns) {
      if (std::isnan(s.probability[c.l][c.k])) continue;
      if (best == nullptr || s.probability[c.l][c.k] > s.probability[best->l][best->k]) best = &c;
    }
    double top = best ? s.probability[best->l][best->k] : 0.0;
    reading += fmt::format("<span class=\"tok\" style=\"background:{}\" title=\"{}: {:.3f}\">{}</span>", heat(top),
                           html_escape(best ? column_name(*best) : ""), top, html_escape(table.texts[t]));
    rows += fmt::format("<tr><td class=\"pos\">{}</td><td class=\"token\">{}</td>", t, html_escape(dump_json(table.tokens[t])));
    for (const Column& c : columns) {
      double p = s.probability[c.l][c.k];
      if (std::isnan(p)) {
        rows += "<td></td>";
        continue;
      }
      bool active = p >= s.threshold[c.l][c.k];
      rows += fmt::format("<td style=\"background:{}\" class=\"{}\" title=\"{} at token {}: {:.4f}\">{:.2f}</td>", heat(p),
                          active ? "on" : "", html_escape(column_name(c)), t, p, p);
    }
    rows += "</tr>\n";
  }
  std::string header;
  for (const Column& c : columns) header += fmt::format("<th><div>{}</div></th>", html_escape(column_name(c)));
  return fmt::format(R"(<!doctype html>
<html><head><meta charset="utf-8"><title>{0}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #111; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
.reading {{ line-height: 2.1; font-family: ui-monospace, monospace; white-space: pre-wrap; border: 1px solid #ddd; padding: 12px; }}
.tok {{ border-radius: 3px; padding: 1px 0; }}
table {{ border-collapse: collapse; font-size: 12px; }}
th {{ height: 150px; vertical-align: bottom; padding: 0 2px; }}
th div {{ writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }}
td {{ padding: 2px 5px; text-align: right; border: 1px solid #eee; }}
td.token {{ text-align: left; font-family: ui-monospace, monospace; white-space: pre; }}
td.pos {{ color: #888; }} td.on {{ font-weight: bold; outline: 1px solid #1d4ed8; }}
.legend span {{ display: inline-block; width: 40px; text-align: center; font-size: 11px; }}
</style></head><body>
<h1>{0}</h1>
<p>Each token's colour is the confidence of its strongest label when the probes read the text up to that token
(followed by the prompt suffix). Hover for values. Bold cells are at or above the probe's threshold.</p>
<div class="legend">{2}</div>
<h2>Text</h2><div class="reading">{1}</div>
{5}<h2>Token x label</h2>
<table><thead><tr><th>pos</th><th>token</th>{3}</tr></thead><tbody>
{4}</tbody></table>
</body></html>
)",
                     html_escape(title), reading, legend_html(), header, rows,
                     columns.empty() ? "" : attention_section(table, columns.front().l, columns.front().k));
}

}  // namespace probekit::inference
