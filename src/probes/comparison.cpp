#include "probes/comparison.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "common/html.h"
#include "common/outputs.h"
#include "probes/probe_files.h"
#include "probes/report_html.h"

namespace probekit::probes {

namespace {

Json label_figures(const TrainedLabel& t) {
  return {{"auc_roc", t.test_auc_roc},
          {"auc_roc_ci95", interval_json(t.test_figures.auc_roc_ci95)},
          {"f1_tuned", t.test_tuned.f1},
          {"f1_tuned_ci95", interval_json(t.test_figures.f1_ci95)},
          {"recall_at_fpr", recall_at_fpr_json(t.test_figures.recall_at_fpr)}};
}

Json kind_summary(const LayerOutcome& layer) {
  return {{"directory", layer.directory},
          {"mean_auc_roc", mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_auc_roc; })},
          {"mean_f1_tuned", mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_tuned.f1; })},
          {"mean_recall_at_fpr", average_recall_at_fpr(layer.labels)},
          {"seconds", layer.seconds}};
}

const TrainedLabel* find_label(const LayerOutcome& layer, const std::string& label) {
  for (const TrainedLabel& t : layer.labels) {
    if (t.label == label) return &t;
  }
  return nullptr;
}

// A JSON number, NaN for null (an undefined figure).
double number_in(const Json& value) {
  return value.is_number() ? value.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

metrics::Interval interval_in(const Json& pair) { return {number_in(pair.at(0)), number_in(pair.at(1))}; }

std::string fmt_mean(const Json& value) {
  return value.is_number() ? fmt::format("{:.4f}", value.get<double>()) : std::string("–");
}

// The cards and table of one layer: a row per label, for each kind its AUROC, tuned F1 and recall at the first
// false-positive rate.
std::string layer_table(const Json& layer, const std::vector<std::string>& kinds, const std::string& fpr) {
  std::string html = fmt::format("<section><h2>{}</h2>", layer.at("layer").get<int64_t>() >= 0
                                                             ? fmt::format("Layer {}", layer.at("layer").get<int64_t>())
                                                             : std::string("Probes"));
  html += R"(<div class="cards">)";
  for (const std::string& kind : kinds) {
    const Json& s = layer.at("kinds").at(kind);
    html += fmt::format(R"(<div class="card"><b>{}</b><span>{}: mean AUROC; F1 {}, recall @{} FPR {}</span></div>)",
                        fmt_mean(s.at("mean_auc_roc")), html_escape(kind), fmt_mean(s.at("mean_f1_tuned")), fpr,
                        fmt_mean(s.at("mean_recall_at_fpr").value(fpr, Json())));
  }
  html += R"(</div><div class="scroll"><table class="sortable"><thead><tr><th>label</th>)";
  for (const std::string& kind : kinds) {
    html += fmt::format("<th>{0} AUROC</th><th>{0} F1 @tuned</th><th>{0} recall @{1} FPR</th>", html_escape(kind), fpr);
  }
  html += "</tr></thead><tbody>";
  for (const Json& row : layer.at("labels")) {
    html += "<tr><td>" + html_escape(row.at("label").get<std::string>()) + "</td>";
    for (const std::string& kind : kinds) {
      if (!row.contains(kind)) {
        html += "<td>–</td><td>–</td><td>–</td>";
        continue;
      }
      const Json& f = row.at(kind);
      const Json& recall = f.at("recall_at_fpr").at(fpr);
      html += figure_cell(number_in(f.at("auc_roc")), interval_in(f.at("auc_roc_ci95")));
      html += figure_cell(number_in(f.at("f1_tuned")), interval_in(f.at("f1_tuned_ci95")));
      html += figure_cell(number_in(recall.at("value")), interval_in(recall.at("ci95")));
    }
    html += "</tr>";
  }
  return html + "</tbody></table></div></section>";
}

}  // namespace

Json comparison_json(const KindRuns& runs, const BinaryRunOptions& options) {
  if (runs.empty()) throw std::invalid_argument("comparison_json: no run to compare");
  Json kinds = Json::array(), layers = Json::array();
  for (const auto& run : runs) kinds.push_back(run.first->name());
  const std::vector<LayerOutcome>& first = runs.front().second.outcomes;
  for (size_t i = 0; i < first.size(); ++i) {
    Json per_kind = Json::object(), labels = Json::array();
    for (const auto& [kind, run] : runs) per_kind[kind->name()] = kind_summary(run.outcomes.at(i));
    // Every kind skips the same labels (skipping depends on the splits only); a label missing somewhere stays out.
    for (const TrainedLabel& t : first[i].labels) {
      Json row = {{"label", t.label}};
      for (const auto& [kind, run] : runs) {
        if (const TrainedLabel* match = find_label(run.outcomes.at(i), t.label)) row[kind->name()] = label_figures(*match);
      }
      labels.push_back(row);
    }
    layers.push_back({{"layer", first[i].layer},
                      {"activations", first[i].activations_path},
                      {"kinds", per_kind},
                      {"labels", labels}});
  }
  metrics::IntervalOptions intervals;
  return {{"kinds", kinds},
          {"seed", options.training.seed},
          {"bootstrap_resamples", intervals.resamples},
          {"false_positive_rates", intervals.fprs},
          {"layers", layers}};
}

std::string render_comparison_report(const Json& comparison) {
  auto kinds = comparison.at("kinds").get<std::vector<std::string>>();
  std::string fpr = fpr_key(comparison.at("false_positive_rates").at(0).get<double>());
  std::string html = "<h1>Probe kinds compared</h1>";
  html += fmt::format(R"(<p class="sub">{} on the same activations · seed {}</p>)", html_escape(fmt::format(
                          "{}", fmt::join(kinds, ", "))), comparison.at("seed").dump());
  html += R"(<p class="note">Test split figures of each label's probe of each kind. F1 at the threshold tuned on )"
          R"(the validation split; recall at the lowest test threshold that flags at most )" + fpr +
          R"( of the negatives. Brackets: 95% percentile-bootstrap intervals over )" +
          comparison.at("bootstrap_resamples").dump() +
          R"( resamples of the test examples, the same resamples for every kind. Each kind's full report: )";
  for (size_t k = 0; k < kinds.size(); ++k) {
    html += fmt::format(R"({}<a href="{}/report.html">{}</a>)", k > 0 ? ", " : "", html_escape(kinds[k]),
                        html_escape(kinds[k]));
  }
  html += ".</p>";
  for (const Json& layer : comparison.at("layers")) html += layer_table(layer, kinds, fpr);
  return html_page("Probe kinds compared", html);
}

Json run_kind_comparison(const BinaryRunOptions& options, const BinaryRunPlan& plan) {
  auto started = std::chrono::steady_clock::now();
  for (size_t a = 0; a < options.kinds.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      if (options.kinds[a] == options.kinds[b]) fail_usage("--model-type lists '{}' twice", options.kinds[a]->name());
    }
  }
  StagedDirectory output(options.output_dir, options.overwrite, plan.inputs);
  KindRuns runs;
  Json summaries = Json::object();
  for (const ProbeKind* kind : options.kinds) {
    BinaryRunOptions one = options;
    one.training.kind = kind;
    one.kinds = {kind};
    std::string name = kind->name();
    runs.emplace_back(kind, train_kind(one, plan, output.path() + "/" + name, options.output_dir + "/" + name));
    summaries[name] = {{"directory", options.output_dir + "/" + name}, {"layers", runs.back().second.summary_layers}};
  }
  Json comparison = comparison_json(runs, options);
  write_json_file(output.path() + "/comparison.json", comparison);
  write_file_atomic(output.path() + "/report.html", render_comparison_report(comparison));
  output.commit();
  std::string report = options.output_dir + "/report.html";
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("wrote {} comparing {} kinds ({:.1f} s in all)", report, runs.size(), seconds);
  return {{"output_dir", options.output_dir},
          {"report", report},
          {"comparison", options.output_dir + "/comparison.json"},
          {"device", plan.target.device.str()},
          {"dtype", device::precision_name(plan.target.dtype)},
          {"kinds", summaries},
          {"total_seconds", seconds}};
}

}  // namespace probekit::probes
