#include "patching/report.h"

#include <fmt/format.h>

#include <functional>

#include "common/files.h"

namespace probekit::patching {

namespace {

Json grid_json(const at::Tensor& grid) {
  Json rows = Json::array();
  for (int64_t l = 0; l < grid.size(0); ++l) {
    Json row = Json::array();
    for (int64_t p = 0; p < grid.size(1); ++p) row.push_back(grid[l][p].item<double>());
    rows.push_back(row);
  }
  return rows;
}

// One list for a single site, else {site: list}.
Json per_site(const PatchingResult& result, const std::function<at::Tensor(const SiteGrids&)>& pick) {
  if (result.sites.size() == 1) return grid_json(pick(result.sites[0]));
  Json out = Json::object();
  for (const SiteGrids& grids : result.sites) out[site_name(grids.site)] = grid_json(pick(grids));
  return out;
}

Json corruption_json(const PromptPair& pair, const PatchingInputs& inputs) {
  if (!inputs.noise) return {{"kind", "prompt"}};
  return {{"kind", "noise"},
          {"subject", inputs.noise->subject},
          {"positions", pair.noised_positions},
          {"noise", inputs.noise->scale},
          {"seed", inputs.noise->seed},
          {"noise_std", pair.noise_std}};
}

}  // namespace

Json patching_json(const PatchingResult& result, const PromptPair& pair, const PatchRequest& request,
                   const PatchingInputs& inputs, const tokenizer::Tokenizer& tokenizer) {
  const bool denoise = request.direction == Direction::kDenoise;
  Json sites = Json::array(), methods = Json::array();
  for (Site site : request.sites) sites.push_back(site_name(site));
  if (request.exact) methods.push_back("exact");
  if (request.attribution) methods.push_back("attribution");
  Json out = {{"model", inputs.model}, {"device", inputs.device}, {"dtype", inputs.dtype}, {"clean", inputs.clean},
              {"corrupted", inputs.noise ? Json() : Json(inputs.corrupted)}, {"corruption", corruption_json(pair, inputs)},
              {"clean_ids", pair.clean}, {"corrupted_ids", pair.corrupted}, {"tokens", tokenizer.tokens(pair.clean)},
              {"corrupted_tokens", tokenizer.tokens(pair.corrupted)}, {"clean_metric", result.clean_metric},
              {"corrupted_metric", result.corrupted_metric}, {"seconds", result.seconds}};
  const Json metric = result.metric.to_json();
  out["metric"] = {{"name", metric["name"]}, {"formula", metric["formula"]}};
  for (const char* token : {"answer", "foil"}) {
    if (metric.contains(token)) out[token] = metric[token];
  }
  out["patched"] = {{"sites", sites},
                    {"layers", result.layers},
                    {"positions", result.positions},
                    {"layer_window", request.layer_window},
                    {"direction", denoise ? "denoise" : "noise"},
                    {"methods", methods},
                    {"what", denoise ? "the corrupted run with a site's value at (layer, position) replaced by the clean run's"
                                     : "the clean run with a site's value at (layer, position) replaced by the corrupted run's"}};
  const double base = denoise ? result.corrupted_metric : result.clean_metric;
  const double span = result.metrics_agree() ? 0.0 : result.clean_metric - result.corrupted_metric;  // 0: null
  auto restored = [&](const at::Tensor& values) { return (values - result.corrupted_metric) / span; };
  if (request.exact) out["grid"] = per_site(result, [](const SiteGrids& g) { return g.grid; });
  if (request.attribution) out["attribution"] = per_site(result, [](const SiteGrids& g) { return g.attribution; });
  // From the grid where it was computed, else from attribution's estimate of it.
  out["restored_from"] = request.exact ? "grid" : "attribution";
  out["restored"] = per_site(result, [&](const SiteGrids& g) {
    return restored(request.exact ? g.grid : g.attribution + base);
  });
  return out;
}

void write_patching(const std::string& dir, const Json& patching) {
  write_json_file(dir + "/patching.json", patching);
  write_file_atomic(dir + "/patching.html", patching_html(patching));
}

}  // namespace probekit::patching
