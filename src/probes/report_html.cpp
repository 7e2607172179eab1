#include "common/html.h"
#include "probes/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <numeric>

namespace probekit::probes {

namespace {

constexpr int kLabelColumn = 170;  // px for label names left of the bars
constexpr int kBarArea = 300;
constexpr int kRowHeight = 16;

const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1120px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
.sub{color:#5b6475;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:20px}.card span{color:#5b6475;font-size:12px}
section,details{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px;margin:14px 0}
summary{cursor:pointer;font-weight:600;font-size:16px}
.charts{display:flex;flex-wrap:wrap;gap:18px}
.note{color:#5b6475;font-size:12px;margin:4px 0 10px}
table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{padding:3px 7px;border-bottom:1px solid #eceef2;text-align:right;white-space:nowrap}
th{background:#f0f2f5;cursor:pointer;position:sticky;top:0}th:first-child,td:first-child{text-align:left}
tr:hover td{background:#f7f9fc}
svg text{font:11px system-ui,sans-serif;fill:#1d2330}svg .axis{stroke:#b8bfcc}svg .grid{stroke:#eceef2}
.legend span{display:inline-block;width:12px;height:12px;border-radius:2px;margin:0 4px -2px 12px}
section>h2:first-child{margin-top:2px}.warn{color:#9a5b00}.scroll{overflow-x:auto;max-height:640px}
.ci{color:#5b6475;font-size:11px}
)";

// Clicking a header sorts its table by that column (numbers numerically, missing values last).
const char* kScript = R"(
document.querySelectorAll('table.sortable th').forEach(th => th.addEventListener('click', () => {
  const col = th.cellIndex, body = th.closest('table').tBodies[0], rows = [...body.rows];
  const dir = th.dataset.dir === 'desc' ? 1 : -1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
  const key = r => { const t = r.cells[col].dataset.v ?? r.cells[col].textContent; const n = parseFloat(t);
    return isNaN(n) ? t : n; };
  rows.sort((a, b) => { const x = key(a), y = key(b);
    if (typeof x === 'number' && typeof y === 'number') return dir * (x - y);
    return dir * String(x).localeCompare(String(y)); });
  rows.forEach(r => body.appendChild(r));
}));
)";

std::string number(double value, int digits = 4) {
  if (std::isnan(value)) return "–";
  return fmt::format("{:.{}f}", value, digits);
}

// A colour for an AUROC: white at 0.5 (chance) or below, through light blue to dark blue at 1.0.
std::string auc_colour(double auc) {
  if (std::isnan(auc)) return "#e5e7eb";
  double f = std::clamp((auc - 0.5) / 0.5, 0.0, 1.0);
  auto mix = [f](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * f)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(247, 8), mix(251, 48), mix(255, 107));
}

std::string text_colour_on(double auc) { return !std::isnan(auc) && auc > 0.72 ? "#fff" : "#1d2330"; }

// Horizontal bars of one value per label, highest first, on an axis from `low` to 1.
std::string bar_chart(const std::vector<std::pair<std::string, double>>& values, double low, const std::string& colour,
                      const std::string& caption) {
  auto sorted = values;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return (std::isnan(b.second) ? -1.0 : b.second) < (std::isnan(a.second) ? -1.0 : a.second);
  });
  int height = 24 + kRowHeight * static_cast<int>(sorted.size()) + 20;
  int width = kLabelColumn + kBarArea + 50;
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="{}">)", width, height,
                                html_escape(caption));
  svg += fmt::format(R"(<text x="0" y="13" font-weight="600">{}</text>)", html_escape(caption));
  for (int tick = 0; tick <= 5; ++tick) {
    double value = low + (1.0 - low) * tick / 5.0;
    double x = kLabelColumn + kBarArea * tick / 5.0;
    svg += fmt::format(R"(<line class="grid" x1="{0:.1f}" x2="{0:.1f}" y1="20" y2="{1}"/>)"
                       R"(<text x="{0:.1f}" y="{2}" text-anchor="middle">{3:.2f}</text>)",
                       x, height - 16, height - 3, value);
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [label, value] = sorted[i];
    int y = 24 + kRowHeight * static_cast<int>(i);
    double fraction = std::isnan(value) ? 0.0 : std::clamp((value - low) / (1.0 - low), 0.0, 1.0);
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", kLabelColumn - 6, y + 11,
                       html_escape(label));
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{}: {}</title></rect>)",
                       kLabelColumn, y + 2, kBarArea * fraction, kRowHeight - 4, colour, html_escape(label),
                       number(value));
    svg += fmt::format(R"(<text x="{:.1f}" y="{}">{}</text>)", kLabelColumn + kBarArea * fraction + 4, y + 11,
                       number(value, 3));
  }
  return svg + "</svg>";
}

// Two bars per label (F1 at 0.5 and at the tuned threshold), ordered by the tuned F1.
std::string f1_chart(const std::vector<TrainedLabel>& labels) {
  std::vector<const TrainedLabel*> sorted;
  for (const TrainedLabel& t : labels) sorted.push_back(&t);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const TrainedLabel* a, const TrainedLabel* b) { return b->test_tuned.f1 < a->test_tuned.f1; });
  int height = 24 + kRowHeight * static_cast<int>(sorted.size()) + 20;
  int width = kLabelColumn + kBarArea + 50;
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="test F1">)", width, height);
  svg += R"(<text x="0" y="13" font-weight="600">Test F1: at the tuned threshold (dark), at 0.5 (light)</text>)";
  for (int tick = 0; tick <= 5; ++tick) {
    double x = kLabelColumn + kBarArea * tick / 5.0;
    svg += fmt::format(R"(<line class="grid" x1="{0:.1f}" x2="{0:.1f}" y1="20" y2="{1}"/>)"
                       R"(<text x="{0:.1f}" y="{2}" text-anchor="middle">{3:.1f}</text>)",
                       x, height - 16, height - 3, tick / 5.0);
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TrainedLabel& t = *sorted[i];
    int y = 24 + kRowHeight * static_cast<int>(i);
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", kLabelColumn - 6, y + 11,
                       html_escape(t.label));
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="6" fill="#93c5fd"><title>F1 at 0.5: {}</title></rect>)",
                       kLabelColumn, y + 2, kBarArea * t.test_at_half.f1, number(t.test_at_half.f1));
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="6" fill="#1d4ed8"><title>F1 at {}: {}</title></rect>)",
                       kLabelColumn, y + 8, kBarArea * t.test_tuned.f1, number(metrics::sigmoid(t.val_tuned.threshold), 3),
                       number(t.test_tuned.f1));
    svg += fmt::format(R"(<text x="{:.1f}" y="{}">{}</text>)", kLabelColumn + kBarArea * t.test_tuned.f1 + 4, y + 12,
                       number(t.test_tuned.f1, 3));
  }
  return svg + "</svg>";
}

// Validation AUROC per epoch: one thin line per label, and in bold the mean over every label, where a probe
// stopped early counts with its last value (its weights stay as they were), so the mean does not jump when
// weaker probes stop.
std::string validation_curves(const std::vector<TrainedLabel>& labels) {
  size_t epochs = 0;
  double low = 1.0;
  for (const TrainedLabel& t : labels) {
    epochs = std::max(epochs, t.history.val_auc.size());
    for (double v : t.history.val_auc) low = std::min(low, v);
  }
  low = std::max(0.0, std::floor(low * 20.0) / 20.0);
  if (low > 0.95) low = 0.95;
  const int left = 44, top = 24, plot_w = 600, plot_h = 260, width = left + plot_w + 20, height = top + plot_h + 40;
  auto x_of = [&](size_t epoch) {
    return left + (epochs <= 1 ? 0.0 : plot_w * static_cast<double>(epoch) / static_cast<double>(epochs - 1));
  };
  auto y_of = [&](double v) { return top + plot_h * (1.0 - (v - low) / (1.0 - low)); };
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="validation AUROC">)", width, height);
  svg += R"(<text x="0" y="13" font-weight="600">Validation AUROC by epoch (thin: one label; bold: mean, a stopped probe at its last value; dot: best epoch)</text>)";
  for (int tick = 0; tick <= 4; ++tick) {
    double v = low + (1.0 - low) * tick / 4.0;
    svg += fmt::format(R"(<line class="grid" x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}"/>)"
                       R"(<text x="{3}" y="{4:.1f}" text-anchor="end">{5:.2f}</text>)",
                       left, left + plot_w, y_of(v), left - 4, y_of(v) + 4, v);
  }
  size_t step = std::max<size_t>(1, epochs / 10);
  for (size_t e = 0; e < epochs; e += step) {
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)", x_of(e), top + plot_h + 16, e + 1);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">epoch</text>)", left + plot_w / 2, top + plot_h + 32);
  std::vector<double> sum(epochs, 0.0);
  int curves = 0;
  for (const TrainedLabel& t : labels) {
    const std::vector<double>& auc = t.history.val_auc;
    if (auc.empty()) continue;
    ++curves;
    std::string points;
    for (size_t e = 0; e < auc.size(); ++e) points += fmt::format("{:.1f},{:.1f} ", x_of(e), y_of(auc[e]));
    for (size_t e = 0; e < epochs; ++e) sum[e] += auc[std::min(e, auc.size() - 1)];
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="#60a5fa" stroke-opacity="0.45" stroke-width="1">)"
                       R"(<title>{} (best epoch {}, {})</title></polyline>)",
                       points, html_escape(t.label), t.history.best_epoch, number(t.history.best_val_auc));
    if (t.history.best_epoch > 0) {
      auto best = static_cast<size_t>(t.history.best_epoch - 1);
      svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2" fill="#1d4ed8"><title>{}: best epoch {}</title></circle>)",
                         x_of(best), y_of(t.history.best_val_auc), html_escape(t.label), t.history.best_epoch);
    }
  }
  std::string mean_points;
  for (size_t e = 0; e < epochs && curves > 0; ++e) mean_points += fmt::format("{:.1f},{:.1f} ", x_of(e), y_of(sum[e] / curves));
  svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="#0b1f4d" stroke-width="2.5"><title>mean</title></polyline>)",
                     mean_points);
  svg += fmt::format(R"(<line class="axis" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/><line class="axis" x1="{0}" x2="{3}" y1="{2}" y2="{2}"/>)",
                     left, top, top + plot_h, left + plot_w);
  return svg + "</svg>";
}

// Rows: labels in label order; columns: layers; colour: test AUROC; outlined: the best layer by val AUROC.
std::string layer_heatmap(const std::vector<LayerOutcome>& layers) {
  std::vector<std::string> labels;
  for (const LayerOutcome& layer : layers) {
    for (const TrainedLabel& t : layer.labels) {
      if (std::find(labels.begin(), labels.end(), t.label) == labels.end()) labels.push_back(t.label);
    }
  }
  const int cell_w = std::max(22, std::min(48, 700 / std::max<int>(1, static_cast<int>(layers.size())))), cell_h = 16;
  const int left = kLabelColumn, top = 30;
  int width = left + cell_w * static_cast<int>(layers.size()) + 10;
  int height = top + cell_h * static_cast<int>(labels.size() + 1) + 10;
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="AUROC by label and layer">)",
                                width, height);
  for (size_t c = 0; c < layers.size(); ++c) {
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", left + cell_w * c + cell_w / 2,
                       top - 8, layers[c].layer);
  }
  auto cell = [&](size_t row, size_t column, double auc, const std::string& tip, bool outline) {
    int x = left + cell_w * static_cast<int>(column), y = top + cell_h * static_cast<int>(row);
    std::string out = fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"{}><title>{}</title></rect>)", x,
                                  y, cell_w - 1, cell_h - 1, auc_colour(auc),
                                  outline ? R"( stroke="#f59e0b" stroke-width="2")" : "", html_escape(tip));
    if (cell_w >= 30) {
      out += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="9" style="fill:{}">{}</text>)", x + cell_w / 2,
                         y + 11, text_colour_on(auc), number(auc, 2));
    }
    return out;
  };
  for (size_t r = 0; r < labels.size(); ++r) {
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 6, top + cell_h * r + 12,
                       html_escape(labels[r]));
    size_t best_column = layers.size();
    double best_val = -1.0;
    for (size_t c = 0; c < layers.size(); ++c) {
      for (const TrainedLabel& t : layers[c].labels) {
        if (t.label == labels[r] && t.history.best_val_auc > best_val) {
          best_val = t.history.best_val_auc;
          best_column = c;
        }
      }
    }
    for (size_t c = 0; c < layers.size(); ++c) {
      auto found = std::find_if(layers[c].labels.begin(), layers[c].labels.end(),
                                [&](const TrainedLabel& t) { return t.label == labels[r]; });
      double auc = found == layers[c].labels.end() ? std::nan("") : found->test_auc_roc;
      std::string tip = fmt::format("{} at layer {}: test AUROC {}, val AUROC {}", labels[r], layers[c].layer,
                                    number(auc), found == layers[c].labels.end() ? "–" : number(found->history.best_val_auc));
      svg += cell(r, c, auc, tip, c == best_column);
    }
  }
  size_t mean_row = labels.size();
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-weight="600">mean</text>)", left - 6,
                     top + cell_h * mean_row + 12);
  for (size_t c = 0; c < layers.size(); ++c) {
    double mean = mean_over(layers[c].labels, [](const TrainedLabel& t) { return t.test_auc_roc; });
    svg += cell(mean_row, c, mean, fmt::format("layer {}: mean test AUROC {}", layers[c].layer, number(mean)), false);
  }
  return svg + "</svg>";
}

std::string cards(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = R"(<div class="cards">)";
  for (const auto& [value, caption] : items) {
    out += fmt::format(R"(<div class="card"><b>{}</b><span>{}</span></div>)", html_escape(value), html_escape(caption));
  }
  return out + "</div>";
}

// The recall at 1% and 5% FPR (dashes for a label evaluated without them).
std::string recall_cells(const std::vector<metrics::RecallAtFpr>& points) {
  if (points.empty()) return "<td>–</td><td>–</td>";
  std::string out;
  for (const metrics::RecallAtFpr& p : points) out += figure_cell(p.value, p.ci95);
  return out;
}

double recall_at_first_rate(const TrainedLabel& t) {
  const auto& points = t.test_figures.recall_at_fpr;
  return points.empty() ? std::nan("") : points.front().value;
}

std::string metrics_table(const std::vector<TrainedLabel>& labels) {
  std::string out =
      R"(<div class="scroll"><table class="sortable"><thead><tr><th>label</th><th>test AUROC</th><th>AUPRC</th><th>F1 @0.5</th>)"
      R"(<th>tuned threshold</th><th>F1 @tuned</th><th>precision @tuned</th><th>recall @tuned</th><th>best val AUROC</th>)"
      R"(<th>best epoch</th><th>epochs run</th><th>positives train/val/test</th><th>recall @1% FPR</th>)"
      R"(<th>recall @5% FPR</th></tr></thead><tbody>)";
  for (const TrainedLabel& t : labels) {
    out += fmt::format(
        "<tr><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}{}</td><td data-v=\"{}\">{}/{}/{}</td>{}</tr>",
        html_escape(t.label), figure_cell(t.test_auc_roc, t.test_figures.auc_roc_ci95), number(t.test_auc_pr),
        number(t.test_at_half.f1),
        number(metrics::sigmoid(t.val_tuned.threshold)), number(t.test_tuned.f1), number(t.test_tuned.precision),
        number(t.test_tuned.recall), number(t.history.best_val_auc), t.history.best_epoch, t.history.val_auc.size(),
        t.history.stopped_early ? " (stopped)" : "", t.train.positives, t.train.positives, t.val.positives,
        t.test.positives, recall_cells(t.test_figures.recall_at_fpr));
  }
  return out + "</tbody></table></div>";
}

std::string layer_section(const LayerOutcome& layer, bool several, bool open) {
  std::string title = layer.layer >= 0 ? fmt::format("Layer {}", layer.layer) : std::string("Probes");
  double auc = mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_auc_roc; });
  double f1_tuned = mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_tuned.f1; });
  std::string body = cards({{std::to_string(layer.labels.size()), "probes trained"},
                            {number(auc), "mean test AUROC"},
                            {number(mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_at_half.f1; })),
                             "mean test F1 at 0.5"},
                            {number(f1_tuned), "mean test F1 at tuned thresholds"},
                            {number(mean_over(layer.labels, recall_at_first_rate)), "mean test recall at 1% FPR"},
                            {fmt::format("{:.1f} s", layer.seconds), "training time"}});
  body += fmt::format(R"(<p class="note">Activations: {}. Outputs: {}.</p>)", html_escape(layer.activations_path),
                      html_escape(layer.directory));
  if (!layer.skipped.empty()) {
    body += R"(<p class="warn">Skipped labels: )";
    for (size_t i = 0; i < layer.skipped.size(); ++i) {
      body += fmt::format("{}<b>{}</b> ({})", i ? "; " : "", html_escape(layer.skipped[i].label),
                          html_escape(layer.skipped[i].reason));
    }
    body += "</p>";
  }
  std::vector<std::pair<std::string, double>> aucs;
  for (const TrainedLabel& t : layer.labels) aucs.emplace_back(t.label, t.test_auc_roc);
  body += R"(<div class="charts">)" + bar_chart(aucs, 0.5, "#2563eb", "Test AUROC per label (axis from 0.5)") +
          f1_chart(layer.labels) + "</div>";
  body += validation_curves(layer.labels);
  body += "<h3>Per-label metrics</h3>" + metrics_table(layer.labels);
  if (!several) return "<section><h2>" + html_escape(title) + "</h2>" + body + "</section>";
  return fmt::format("<details{}><summary>{} — mean test AUROC {}, mean tuned F1 {}</summary>{}</details>",
                     open ? " open" : "", html_escape(title), number(auc), number(f1_tuned), body);
}

std::string config_table(const Json& config) {
  std::string out = R"(<table><tbody>)";
  for (const auto& [key, value] : config.items()) {
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    out += fmt::format("<tr><td>{}</td><td style=\"text-align:left\">{}</td></tr>", html_escape(key), html_escape(text));
  }
  return out + "</tbody></table>";
}

}  // namespace

std::string render_binary_report(const std::vector<LayerOutcome>& layers, const Json& config) {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  size_t probes = 0, skipped = 0;
  double seconds = 0.0;
  size_t best_layer = 0;
  double best_mean = -1.0;
  for (size_t i = 0; i < layers.size(); ++i) {
    probes += layers[i].labels.size();
    skipped += layers[i].skipped.size();
    seconds += layers[i].seconds;
    double mean = mean_over(layers[i].labels, [](const TrainedLabel& t) { return t.test_auc_roc; });
    if (mean > best_mean) {
      best_mean = mean;
      best_layer = i;
    }
  }
  bool several = layers.size() > 1;
  std::string html = "<h1>Probe training report</h1>";
  html += fmt::format(R"(<p class="sub">One-vs-rest {} probes, {} · generated {}</p>)",
                      html_escape(config.value("model_type", std::string("linear"))),
                      html_escape(config.value("model_name", std::string("?"))), date);
  std::vector<std::pair<std::string, std::string>> summary = {
      {std::to_string(probes), "probes trained"}, {std::to_string(layers.size()), several ? "layers" : "layer"},
      {fmt::format("{:.1f} s", seconds), "training time"}};
  if (skipped > 0) summary.emplace_back(std::to_string(skipped), "labels skipped");
  if (several) summary.emplace_back(std::to_string(layers[best_layer].layer), "layer with the best mean AUROC");
  html += cards(summary);
  html += R"(<p class="note">Test metrics use each probe's best-epoch weights (the saved ones), chosen by validation )"
          R"(AUROC (between equal ones, by the lower validation loss), or the fitted weights of a logistic or mean-diff probe. "Tuned" thresholds maximise F1 on the validation split; F1 at 0.5 is the reference's figure. )"
          R"(Recall at 1% and 5% FPR: at the lowest test threshold that flags at most that share of the negatives. )"
          R"(Brackets: 95% percentile-bootstrap intervals over 1,000 resamples of the test examples.</p>)";
  if (several) {
    html += "<section><h2>Test AUROC by label and layer</h2>";
    html += R"(<p class="note">Outlined: the layer with the best validation AUROC for that label (the one )"
            R"(per_action_layer_analysis.json picks). Hover a cell for its values.</p>)";
    html += R"(<p class="legend">test AUROC )";
    for (double auc : {0.5, 0.6, 0.7, 0.8, 0.9, 1.0}) {
      html += fmt::format(R"(<span style="background:{}"></span>{:.1f})", auc_colour(auc), auc);
    }
    html += "</p>" + layer_heatmap(layers) + "</section>";
  }
  for (size_t i = 0; i < layers.size(); ++i) html += layer_section(layers[i], several, i == best_layer);
  html += "<details><summary>Configuration</summary>" + config_table(config) + "</details>";
  return html_page("Probe training report", html);
}

std::string figure_cell(double value, const metrics::Interval& ci95) {
  return fmt::format(R"(<td data-v="{}" title="95% bootstrap interval">{} <span class="ci">[{}, {}]</span></td>)",
                     number(value), number(value), number(ci95.low, 3), number(ci95.high, 3));
}

std::string html_page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>" +
         html_escape(title) + "</title><style>" + kStyle + "</style></head><body><main>" + body + "</main><script>" +
         kScript + "</script></body></html>\n";
}

}  // namespace probekit::probes
