// patching.html: one heatmap per site and method, tokens along x and layers along y (layer 0 at the bottom, as ROME
// draws its causal traces), each cell coloured by its value on a diverging scale and titled with its numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/html.h"
#include "patching/report.h"

namespace probekit::patching {

namespace {

constexpr int kCell = 22, kLeft = 64, kTop = 12, kTokenRoom = 96;

const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1400px;margin:0 auto;padding:24px}h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:0 0 6px}
.sub{color:#5b6475;margin:0 0 14px}section{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px;margin:14px 0;overflow-x:auto}
svg text{font:11px system-ui,sans-serif;fill:#1d2330}.note{color:#5b6475;font-size:12.5px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}dt{color:#5b6475}dd{margin:0;overflow-wrap:anywhere}
)";

// A diverging colour for v in [-1, 1]: blue below 0, white at 0, red above.
std::string colour(double v) {
  if (!std::isfinite(v)) return "#d9dce2";
  v = std::clamp(v, -1.0, 1.0);
  const auto mix = [&](int towards) { return static_cast<int>(std::lround(255 + (towards - 255) * std::fabs(v))); };
  return v >= 0 ? fmt::format("rgb({},{},{})", mix(190), mix(30), mix(45)) : fmt::format("rgb({},{},{})", mix(35), mix(80), mix(190));
}

double number(const Json& value) { return value.is_number() ? value.get<double>() : std::nan(""); }

// The heatmap of `values` [layer][position], coloured by `shade` [layer][position] in [-1, 1].
std::string heatmap(const Json& patching, const Json& values, const Json& shade, const std::string& value_name) {
  const Json& layers = patching["patched"]["layers"];
  const Json& positions = patching["patched"]["positions"];
  const Json& tokens = patching["tokens"];
  const auto rows = static_cast<int>(layers.size()), columns = static_cast<int>(positions.size());
  const int width = kLeft + columns * kCell + 8, height = kTop + rows * kCell + kTokenRoom;
  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)", width, height);
  for (int r = 0; r < rows; ++r) {
    const int y = kTop + (rows - 1 - r) * kCell;  // layer 0 at the bottom
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", kLeft - 6, y + kCell / 2 + 4, layers[static_cast<size_t>(r)].get<int64_t>());
    for (int c = 0; c < columns; ++c) {
      const double value = number(values[static_cast<size_t>(r)][static_cast<size_t>(c)]);
      const double tint = number(shade[static_cast<size_t>(r)][static_cast<size_t>(c)]);
      const auto position = positions[static_cast<size_t>(c)].get<size_t>();
      svg += fmt::format(R"(<rect class="cell" x="{}" y="{}" width="{}" height="{}" fill="{}"><title>layer {}, token {} {}: {} {:.6g}</title></rect>)",
                         kLeft + c * kCell, y, kCell - 1, kCell - 1, colour(tint), layers[static_cast<size_t>(r)].get<int64_t>(),
                         position, html_escape(tokens[position].get<std::string>()), value_name, value);
    }
  }
  for (int c = 0; c < columns; ++c) {
    const auto position = positions[static_cast<size_t>(c)].get<size_t>();
    const int x = kLeft + c * kCell + kCell / 2, y = kTop + rows * kCell + 8;
    svg += fmt::format(R"svg(<text transform="translate({},{}) rotate(-55)" text-anchor="end">{}</text>)svg", x + 4, y,
                       html_escape(tokens[position].get<std::string>()));
  }
  svg += fmt::format(R"(<text x="4" y="{}">layer</text></svg>)", kTop + 10);
  return svg;
}

// values / unit: grids as shares of the gap between the clean and corrupted metrics; by the largest |value| instead
// where the two metrics agree.
Json as_shares(const Json& values, double unit) {
  double largest = 0;
  for (const Json& row : values) {
    for (const Json& v : row) largest = std::max(largest, std::fabs(number(v)));
  }
  if (!(std::fabs(unit) > 1e-12)) unit = std::max(largest, 1e-30);
  Json out = values;
  for (Json& row : out) {
    for (Json& v : row) v = number(v) / unit;
  }
  return out;
}

// Denoising colours what a patch restores of the clean answer, noising what it takes away: red is the clean run's
// information at work in both.
std::string site_section(const Json& patching, const std::string& site, bool several) {
  auto of = [&](const char* key) -> const Json& { return several ? patching[key][site] : patching[key]; };
  const bool denoise = patching["patched"]["direction"] == "denoise";
  const double clean = number(patching["clean_metric"]), corrupted = number(patching["corrupted_metric"]);
  const double gap = clean - corrupted;
  std::string html;
  if (patching.contains("grid")) {
    Json shifted = of("grid");
    for (Json& row : shifted) {
      for (Json& v : row) v = number(v) - (denoise ? corrupted : clean);
    }
    html += fmt::format("<section><h2>{}: patched metric</h2><p class=\"note\">Colour: {}.</p>{}</section>",
                        html_escape(site),
                        denoise ? "the share of the clean answer restored, (patched - corrupted) / (clean - corrupted)"
                                : "the share of the clean answer taken away, (clean - patched) / (clean - corrupted)",
                        heatmap(patching, of("grid"), as_shares(shifted, denoise ? gap : -gap),
                                patching["metric"]["name"].get<std::string>()));
  }
  if (patching.contains("attribution")) {
    html += fmt::format("<section><h2>{}: attribution patching</h2><p class=\"note\">First-order estimates of each "
                        "cell's change of the metric, (source - base) &middot; d metric / d value; colour: the estimate "
                        "as a share of the clean answer {}.</p>{}</section>",
                        html_escape(site), denoise ? "restored" : "taken away",
                        heatmap(patching, of("attribution"), as_shares(of("attribution"), denoise ? gap : -gap), "estimate"));
  }
  return html;
}

std::string summary(const Json& p) {
  auto item = [](const std::string& name, const std::string& value) {
    return fmt::format("<dt>{}</dt><dd>{}</dd>", html_escape(name), html_escape(value));
  };
  std::string corrupted = p["corrupted"].is_string()
                              ? p["corrupted"].get<std::string>()
                              : fmt::format("noise x{} on \"{}\"", p["corruption"]["noise"].get<double>(),
                                            p["corruption"]["subject"].get<std::string>());
  auto spelled = [&](const char* name) {
    const Json& token = p[name]["token"];
    return token.is_string() ? token.get<std::string>() : fmt::format("id {}", p[name]["id"].get<int64_t>());
  };
  std::string answer = p.contains("answer") ? spelled("answer") : "";
  if (p.contains("foil")) answer += " vs " + spelled("foil");
  std::string html = "<section><dl>" + item("model", p["model"].get<std::string>()) + item("clean", p["clean"].get<std::string>()) +
                     item("corrupted", corrupted) + item("metric", p["metric"]["formula"].get<std::string>());
  if (!answer.empty()) html += item("answer", answer);
  html += item("clean metric", fmt::format("{:.6g}", number(p["clean_metric"]))) +
          item("corrupted metric", fmt::format("{:.6g}", number(p["corrupted_metric"]))) +
          item("patched", p["patched"]["what"].get<std::string>()) +
          item("layer window", std::to_string(p["patched"]["layer_window"].get<int64_t>())) + "</dl></section>";
  return html;
}

}  // namespace

std::string patching_html(const Json& patching) {
  const Json& sites = patching["patched"]["sites"];
  std::string body;
  for (const Json& site : sites) body += site_section(patching, site.get<std::string>(), sites.size() > 1);
  return fmt::format("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Activation patching</title>"
                     "<style>{}</style></head><body><main><h1>Activation patching</h1><p class=\"sub\">Where the "
                     "information that decides the answer lives: each cell patches one (layer, token).</p>{}{}</main></body></html>",
                     kStyle, summary(patching), body);
}

}  // namespace probekit::patching
