#include "sweep/sweep_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/html.h"

namespace probekit::sweep {

namespace {

constexpr int kWidth = 340, kHeight = 200, kLeft = 44, kRight = 12, kTop = 24, kBottom = 34;

const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1180px;margin:0 auto;padding:24px}h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:0 0 8px}
.sub{color:#5b6475;margin:0 0 16px}section{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px;margin:14px 0}
.charts{display:flex;flex-wrap:wrap;gap:18px}svg text{font:11px system-ui,sans-serif;fill:#1d2330}
svg .axis{stroke:#b8bfcc}svg .grid{stroke:#eceef2}.note{color:#5b6475;font-size:12px}
table{border-collapse:collapse;font-size:12.5px;width:100%}th,td{padding:4px 7px;border-bottom:1px solid #eceef2;vertical-align:top;text-align:left}
th{background:#f0f2f5}td.text{white-space:pre-wrap;overflow-wrap:anywhere;max-width:360px}.score{color:#5b6475;font-size:11.5px;display:block}
summary{cursor:pointer;font-weight:600}
)";

// Scales x (the coefficients) and y (a value range) into the plot area.
struct Plot {
  double x_low, x_high, y_low, y_high;
  double x(double value) const {
    return kLeft + (value - x_low) / std::max(1e-12, x_high - x_low) * (kWidth - kLeft - kRight);
  }
  double y(double value) const {
    return kTop + (1.0 - (value - y_low) / std::max(1e-12, y_high - y_low)) * (kHeight - kTop - kBottom);
  }
};

std::string axes(const Plot& plot, const std::vector<double>& xs, const std::string& y_label) {
  std::string svg;
  for (int i = 0; i <= 4; ++i) {
    const double value = plot.y_low + (plot.y_high - plot.y_low) * i / 4.0;
    svg += fmt::format(R"(<line class="grid" x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}"/><text x="4" y="{:.1f}">{:.3g}</text>)",
                       kLeft, kWidth - kRight, plot.y(value), plot.y(value), plot.y(value) + 4, value);
  }
  for (double x : xs) {
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{:g}</text>)", plot.x(x), kHeight - kBottom + 14, x);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">coefficient</text>)", (kLeft + kWidth) / 2, kHeight - 4);
  svg += fmt::format(R"(<text x="{}" y="11">{}</text>)", kLeft, html_escape(y_label));
  return svg;
}

std::string polyline(const Plot& plot, const std::vector<double>& xs, const std::vector<double>& ys, const char* colour) {
  std::string points, dots;
  for (size_t i = 0; i < xs.size(); ++i) {
    points += fmt::format("{:.1f},{:.1f} ", plot.x(xs[i]), plot.y(ys[i]));
    dots += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"><title>{:g}: {:.4f}</title></circle>)",
                        plot.x(xs[i]), plot.y(ys[i]), colour, xs[i], ys[i]);
  }
  return fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>)", colour, points) + dots;
}

// The label's score against the coefficient, over the band the other labels' scores span (none with one label).
std::string dose_response(const std::vector<Json>& points) {
  std::vector<double> xs, score;
  for (const Json& p : points) {
    xs.push_back(p["coefficient"].get<double>());
    score.push_back(p["score_mean"].get<double>());
  }
  const Plot plot{xs.front(), xs.back(), 0.0, 1.0};
  std::string band;
  if (!points.front()["off_target_score_min"].is_null()) {
    std::string corners;
    for (size_t i = 0; i < xs.size(); ++i) corners += fmt::format("{:.1f},{:.1f} ", plot.x(xs[i]), plot.y(points[i]["off_target_score_max"].get<double>()));
    for (size_t i = xs.size(); i-- > 0;) corners += fmt::format("{:.1f},{:.1f} ", plot.x(xs[i]), plot.y(points[i]["off_target_score_min"].get<double>()));
    band = fmt::format(R"(<polygon points="{}" fill="#c9ced8" opacity="0.6"><title>other labels' scores</title></polygon>)", corners);
  }
  return fmt::format(R"(<svg width="{}" height="{}" role="img" class="dose">{}{}{}</svg>)", kWidth, kHeight,
                     axes(plot, xs, "probe score (mean over generated tokens)"), band, polyline(plot, xs, score, "#2563eb"));
}

std::string fluency_chart(const std::vector<Json>& points) {
  std::vector<double> xs, kl;
  for (const Json& p : points) xs.push_back(p["coefficient"].get<double>()), kl.push_back(p["kl_mean"].get<double>());
  const double top = std::max(1e-6, *std::max_element(kl.begin(), kl.end())) * 1.1;
  const Plot plot{xs.front(), xs.back(), 0.0, top};
  return fmt::format(R"(<svg width="{}" height="{}" role="img" class="fluency">{}{}</svg>)", kWidth, kHeight,
                     axes(plot, xs, "KL from the unsteered model (nats per token)"), polyline(plot, xs, kl, "#d97706"));
}

std::string texts_table(const Json& sweep, const std::string& label) {
  const size_t prompts = sweep["prompts"].size();
  std::string head = "<tr><th>coefficient</th>", rows;
  for (size_t p = 0; p < prompts; ++p) head += fmt::format("<th>prompt {}</th>", p + 1);
  for (const Json& c : sweep["coefficients"]) {
    const double coefficient = c.get<double>();
    rows += fmt::format("<tr><td>{:g}</td>", coefficient);
    for (size_t p = 0; p < prompts; ++p) {
      for (const Json& cell : sweep["cells"]) {
        const bool baseline = cell["label"].is_null();
        if (cell["prompt"] != p || (coefficient == 0 ? !baseline : baseline || cell["label"] != label ||
                                                                       cell["coefficient"].get<double>() != coefficient)) {
          continue;
        }
        rows += fmt::format(R"(<td class="text">{}<span class="score">score {:.3f} · KL {:.3f} · ppl {:.2f}</span></td>)",
                            html_escape(cell["text"].get<std::string>()), cell["mean_scores"][label].get<double>(),
                            cell["kl_mean"].get<double>(), cell["perplexity"].get<double>());
      }
    }
    rows += "</tr>";
  }
  return "<table>" + head + "</tr>" + rows + "</table>";
}

std::string label_section(const Json& sweep, const std::string& label) {
  std::vector<Json> points;
  for (const Json& p : sweep["summary"]) {
    if (p["label"] == label) points.push_back(p);
  }
  std::sort(points.begin(), points.end(),
            [](const Json& a, const Json& b) { return a["coefficient"].get<double>() < b["coefficient"].get<double>(); });
  return fmt::format(R"(<section class="label"><h2>{}</h2><div class="charts">{}{}</div><details><summary>texts</summary>{}</details></section>)",
                     html_escape(label), dose_response(points), fluency_chart(points), texts_table(sweep, label));
}

}  // namespace

std::string render_sweep_report(const Json& sweep) {
  std::string sections;
  for (const Json& label : sweep["labels"]) sections += label_section(sweep, label.get<std::string>());
  const std::string prompts = html_escape(fmt::format("{}", sweep["prompts"].size()));
  return fmt::format(R"(<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Steering sweep</title><style>{}</style></head><body><main>
<h1>Steering sweep</h1><p class="sub">{} · layer {} ({}) · {} labels × {} coefficients × {} prompts · {:.1f} cells/s</p>
<p class="note">Blue: the steered label's probe score, averaged over the generated tokens and the prompts; grey band: the
range of the other labels' scores (selectivity); orange: the mean KL divergence of each step's next-token distribution
from the unsteered model's on the same text. Coefficient 0 is the unsteered generation.</p>{}</main></body></html>
)",
                     kStyle, html_escape(sweep["model"].get<std::string>()), sweep["layer"].get<int64_t>(),
                     html_escape(sweep["site"].get<std::string>()), sweep["labels"].size(), sweep["coefficients"].size(),
                     prompts, sweep["cells_per_s"].get<double>(), sections);
}

}  // namespace probekit::sweep
