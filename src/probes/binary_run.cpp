#include "probes/binary_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "device/torch/gpu_utils.h"
#include "probes/comparison.h"
#include "probes/calibration.h"
#include "probes/evaluation.h"
#include "probes/file_scores.h"
#include "probes/probe_files.h"
#include "probes/report_html.h"
#include "probes/training_data.h"

namespace probekit::probes {

namespace {

Json confusion_json(const metrics::ConfusionCounts& c) {
  return {{"true_negative", c.true_negative},
          {"false_positive", c.false_positive},
          {"false_negative", c.false_negative},
          {"true_positive", c.true_positive}};
}

Json balance_json(const ClassBalance& b) { return {{"examples", b.examples}, {"positives", b.positives}}; }

// The weights the test metrics were computed with.
const char* evaluated_weights(const TrainedLabel& t) { return t.solver ? "fitted" : "best_epoch"; }


// The layer of each file, checked before any training: several files need distinct, known layers.
std::vector<int64_t> layers_of(const std::vector<std::string>& files) {
  std::vector<int64_t> layers;
  for (const std::string& file : files) {
    int64_t layer = activations::read_attributes(file).layer;
    if (files.size() > 1) {
      if (layer < 0) {
        fail_input("{}: cannot tell its layer (no 'layer' attribute and the name is not layer_{{L}}_activations.h5)",
                   file);
      }
      for (size_t i = 0; i < layers.size(); ++i) {
        if (layers[i] == layer) fail_input("{} and {} both hold layer {} (by their 'layer' attribute)", files[i], file, layer);
      }
    }
    layers.push_back(layer);
  }
  return layers;
}

Json config_json(const BinaryRunOptions& options, const device::ComputeTarget& target, const std::string& model_name) {
  const BinaryTrainingOptions& t = options.training;
  return {{"model_type", t.kind->name()},
          {"hidden_dim", t.hidden_dim},
          {"num_heads", t.heads.value_or(t.kind->default_heads())},
          {"max_tokens", t.max_tokens},
          {"pool", t.pool},
          {"batch_size", t.batch_size},
          {"epochs", t.epochs},
          {"learning_rate", t.lr},
          {"weight_decay", t.weight_decay},
          {"C", t.C},
          {"early_stopping_patience", t.patience},
          {"use_scheduler", t.cosine_schedule},
          {"eta_min", t.eta_min},
          {"pos_weight", t.balance_classes ? "auto" : "none"},
          {"seed", t.seed},
          {"num_workers", options.num_workers},
          {"pin_activations_to_gpu", target.is_gpu() && t.pin_activations},
          {"device", target.device.str()},
          {"dtype", device::precision_name(target.dtype)},
          {"model_name", model_name},
          {"output_dir", options.output_dir}};
}

Json training_summary_json(const std::vector<LayerOutcome>& layers, const Json& config, int64_t num_workers) {
  Json results = Json::array();
  int64_t probes = 0;
  double minutes = 0.0, auc_sum = 0.0;
  int64_t defined = 0;
  // Over the layers whose mean test AUROC is defined; null where none is.
  Json best_auc, worst_auc, best_layer;
  for (const LayerOutcome& layer : layers) {
    double auc = mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_auc_roc; });
    results.push_back({{"layer", layer.layer},
                       {"avg_auc", auc},
                       {"avg_f1", mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_at_half.f1; })},
                       {"avg_f1_tuned", mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_tuned.f1; })},
                       {"avg_accuracy", mean_over(layer.labels, [](const TrainedLabel& t) { return t.test_at_half.accuracy; })},
                       {"time_minutes", layer.seconds / 60.0},
                       {"num_workers", num_workers},
                       {"num_probes", layer.labels.size()},
                       {"success", true}});
    probes += static_cast<int64_t>(layer.labels.size());
    minutes += layer.seconds / 60.0;
    if (std::isnan(auc)) continue;
    auc_sum += auc;
    ++defined;
    if (best_auc.is_null() || auc > best_auc.get<double>()) {
      best_auc = auc;
      best_layer = layer.layer;
    }
    if (worst_auc.is_null() || auc < worst_auc.get<double>()) worst_auc = auc;
  }
  return {{"total_layers", layers.size()},
          {"total_probes", probes},
          {"total_time_hours", minutes / 60.0},
          {"parallel_training", true},
          {"num_workers", num_workers},
          {"layer_results", results},
          {"config", config},
          {"statistics",
           {{"avg_auc", defined > 0 ? Json(auc_sum / static_cast<double>(defined)) : Json()},
            {"best_auc", best_auc},
            {"worst_auc", worst_auc},
            {"best_layer", best_layer}}}};
}

}  // namespace

std::string fpr_key(double fpr) { return fmt::format("{}", fpr); }

Json interval_json(const metrics::Interval& interval) { return Json::array({interval.low, interval.high}); }

Json recall_at_fpr_json(const std::vector<metrics::RecallAtFpr>& points) {
  Json out = Json::object();
  for (const metrics::RecallAtFpr& p : points) {
    out[fpr_key(p.max_fpr)] = {{"value", p.value},
                               {"ci95", interval_json(p.ci95)},
                               {"threshold", metrics::sigmoid(p.threshold)},
                               {"threshold_logit", p.threshold}};
  }
  return out;
}

Json average_recall_at_fpr(const std::vector<TrainedLabel>& labels) {
  Json out = Json::object();
  if (labels.empty()) return out;
  for (size_t f = 0; f < labels.front().test_figures.recall_at_fpr.size(); ++f) {
    out[fpr_key(labels.front().test_figures.recall_at_fpr[f].max_fpr)] =
        mean_over(labels, [f](const TrainedLabel& t) { return t.test_figures.recall_at_fpr.at(f).value; });
  }
  return out;
}

Json label_metrics_json(const TrainedLabel& t, bool with_history) {
  Json j = {{"action", t.label},
            {"label", t.label},
            {"accuracy", t.test_at_half.accuracy},
            {"precision", t.test_at_half.precision},
            {"recall", t.test_at_half.recall},
            {"f1", t.test_at_half.f1},
            {"auc_roc", t.test_auc_roc},
            {"auc_pr", t.test_auc_pr},
            {"auc_roc_ci95", interval_json(t.test_figures.auc_roc_ci95)},
            {"recall_at_fpr", recall_at_fpr_json(t.test_figures.recall_at_fpr)},
            {"confusion_matrix", confusion_json(t.test_at_half.confusion)},
            {"threshold", 0.5},
            {"tuned_threshold",
             {{"threshold", metrics::sigmoid(t.val_tuned.threshold)},
              {"threshold_logit", t.val_tuned.threshold},
              {"chosen_on", "val"},
              {"criterion", "maximum validation F1 (highest score on ties), moved to the middle of the gap below it"},
              {"val_f1", t.val_tuned.f1},
              {"accuracy", t.test_tuned.accuracy},
              {"precision", t.test_tuned.precision},
              {"recall", t.test_tuned.recall},
              {"f1", t.test_tuned.f1},
              {"f1_ci95", interval_json(t.test_figures.f1_ci95)},
              {"confusion_matrix", confusion_json(t.test_tuned.confusion)}}},
            {"evaluated_weights", evaluated_weights(t)},
            {"pos_weight", t.pos_weight},
            {"class_balance", {{"train", balance_json(t.train)}, {"val", balance_json(t.val)}, {"test", balance_json(t.test)}}}};
  if (with_history) {
    const LabelHistory& h = t.history;
    j["history"] = {{"train_loss", h.train_loss},       {"val_loss", h.val_loss},
                    {"val_auc", h.val_auc},             {"val_accuracy", h.val_accuracy},
                    {"learning_rates", h.learning_rates}, {"best_epoch", h.best_epoch},
                    {"best_val_auc", h.best_val_auc},   {"stopped_early", h.stopped_early}};
  }
  if (t.solver) j["solver"] = solvers::outcome_json(*t.solver);
  if (!t.features.is_null()) j["features"] = t.features;
  return j;
}

Json aggregate_metrics_json(const LayerOutcome& layer, int64_t num_workers) {
  Json per_action = Json::array();
  for (const TrainedLabel& t : layer.labels) per_action.push_back(label_metrics_json(t, false));
  Json skipped = Json::array();
  for (const SkippedLabel& s : layer.skipped) skipped.push_back({{"label", s.label}, {"reason", s.reason}});
  const auto& labels = layer.labels;
  return {{"average_auc_roc", mean_over(labels, [](const TrainedLabel& t) { return t.test_auc_roc; })},
          {"average_auc_pr", mean_over(labels, [](const TrainedLabel& t) { return t.test_auc_pr; })},
          {"average_f1", mean_over(labels, [](const TrainedLabel& t) { return t.test_at_half.f1; })},
          {"average_accuracy", mean_over(labels, [](const TrainedLabel& t) { return t.test_at_half.accuracy; })},
          {"average_precision", mean_over(labels, [](const TrainedLabel& t) { return t.test_at_half.precision; })},
          {"average_recall", mean_over(labels, [](const TrainedLabel& t) { return t.test_at_half.recall; })},
          {"average_f1_tuned", mean_over(labels, [](const TrainedLabel& t) { return t.test_tuned.f1; })},
          {"average_recall_at_fpr", average_recall_at_fpr(labels)},
          {"total_training_time_seconds", layer.seconds},
          {"num_workers", num_workers},
          {"num_probes", labels.size()},
          {"layer", layer.layer},
          {"evaluated_weights", labels.empty() ? "best_epoch" : evaluated_weights(labels.front())},
          {"per_action_metrics", per_action},
          {"skipped_labels", skipped},
          {"labels_without_examples", layer.without_examples}};
}

Json per_action_layer_analysis_json(const std::vector<LayerOutcome>& layers) {
  // label -> layer -> its probe's results, layers ascending as in `layers`.
  std::map<std::string, std::vector<std::pair<int64_t, const TrainedLabel*>>> by_label;
  for (const LayerOutcome& layer : layers) {
    for (const TrainedLabel& t : layer.labels) by_label[t.label].emplace_back(layer.layer, &t);
  }
  Json best_layers = Json::array(), performance = Json::object();
  std::vector<std::pair<int64_t, int64_t>> distribution;  // (layer, count) in first-seen order, as a Counter
  for (const auto& [label, entries] : by_label) {
    // The first layer with the highest validation AUROC: chosen without looking at the test split.
    const std::pair<int64_t, const TrainedLabel*>* best = &entries.front();
    double worst_auc = entries.front().second->test_auc_roc, best_auc = worst_auc;
    Json per_layer = Json::object();
    for (const auto& entry : entries) {
      const TrainedLabel& t = *entry.second;
      if (t.history.best_val_auc > best->second->history.best_val_auc) best = &entry;
      worst_auc = std::min(worst_auc, t.test_auc_roc);
      best_auc = std::max(best_auc, t.test_auc_roc);
      per_layer[std::to_string(entry.first)] = {
          {"auc", t.test_auc_roc}, {"f1", t.test_at_half.f1}, {"f1_tuned", t.test_tuned.f1}, {"val_auc", t.history.best_val_auc}};
    }
    const TrainedLabel& chosen = *best->second;
    best_layers.push_back({{"action", label},
                           {"best_layer", best->first},
                           {"best_auc", chosen.test_auc_roc},
                           {"best_val_auc", chosen.history.best_val_auc},
                           {"best_f1", chosen.test_at_half.f1},
                           {"best_f1_tuned", chosen.test_tuned.f1},
                           {"auc_range", best_auc - worst_auc},
                           {"worst_auc", worst_auc},
                           {"layer_sensitivity", best_auc - worst_auc}});
    performance[label] = per_layer;
    auto seen = std::find_if(distribution.begin(), distribution.end(), [&](const auto& d) { return d.first == best->first; });
    if (seen == distribution.end()) {
      distribution.emplace_back(best->first, 1);
    } else {
      seen->second += 1;
    }
  }
  int64_t most_common = distribution.empty() ? -1 : distribution.front().first, most_count = 0;
  Json layer_distribution = Json::object();
  for (const auto& [layer, count] : distribution) {
    layer_distribution[std::to_string(layer)] = count;
    if (count > most_count) {
      most_count = count;
      most_common = layer;
    }
  }
  return {{"summary",
           {{"total_actions", by_label.size()},
            {"total_layers_tested", layers.size()},
            {"most_common_best_layer", most_common},
            {"layer_distribution", layer_distribution},
            {"selected_by", "best validation AUROC (first layer on ties); best_auc is that probe's test AUROC"}}},
          {"per_action_best_layers", best_layers},
          {"action_layer_performance", performance}};
}

namespace {

// Where a layer's outputs go under `root` (the staged directory while training, the final one in messages).
std::string layer_directory(const std::string& root, int64_t layer, bool several) {
  return several ? fmt::format("{}/layer_{}", root, layer) : root;
}

// Trains every label of one activation file and writes its probes and metrics into `directory`.
LayerOutcome train_layer(const BinaryRunOptions& options, const std::string& file, int64_t layer,
                         const std::string& directory, const device::ComputeTarget& target,
                         const std::string& progress_label, std::string& model_name) {
  make_directories(directory);
  activations::ActivationFile activations = rows_for_kind(activations::read_activation_file(file), options.training);
  model_name = activations.attributes.recipe.model_name;
  BinaryTrainingResult result =
      train_binary_probes(activations, options.training, target.device, target.dtype, progress_label);
  save_binary_probes(directory, result, activations.attributes, file);
  if (!options.calibrate_on.empty()) {
    calibrate_layer(directory, layer_file_of(options.calibrate_on, layer, "--calibrate-on"), options.target_fpr);
  }
  if (!options.eval_file.empty()) {
    evaluate_layer(directory, layer_file_of(options.eval_file, layer, "--eval-file"), options.training.seed);
  }
  LayerOutcome outcome{layer, file, directory, std::move(result.labels), std::move(result.skipped),
                       result.epochs_run, result.seconds, std::move(result.without_examples)};
  for (const TrainedLabel& t : outcome.labels) {
    write_json_file(directory + "/metrics_" + t.label + ".json", label_metrics_json(t, true));
  }
  write_json_file(directory + "/aggregate_metrics.json", aggregate_metrics_json(outcome, options.num_workers));
  return outcome;
}

// The layer's line in the log and its entry of the --json summary.
Json layer_summary(const LayerOutcome& outcome, const std::string& progress_label, const std::string& shown_directory) {
  double auc = mean_over(outcome.labels, [](const TrainedLabel& t) { return t.test_auc_roc; });
  double f1 = mean_over(outcome.labels, [](const TrainedLabel& t) { return t.test_at_half.f1; });
  double f1_tuned = mean_over(outcome.labels, [](const TrainedLabel& t) { return t.test_tuned.f1; });
  spdlog::info("{}: {} probes, mean test AUROC {:.4f}, F1 {:.4f} at 0.5 and {:.4f} at tuned thresholds ({:.1f} s) -> {}",
               progress_label, outcome.labels.size(), auc, f1, f1_tuned, outcome.seconds, shown_directory);
  Json skipped = Json::array();
  for (const SkippedLabel& s : outcome.skipped) skipped.push_back({{"label", s.label}, {"reason", s.reason}});
  return {{"layer", outcome.layer},
          {"activations", outcome.activations_path},
          {"directory", shown_directory},
          {"probes", outcome.labels.size()},
          {"skipped_labels", skipped},
          {"labels_without_examples", outcome.without_examples},
          {"mean_test_auc_roc", auc},
          {"mean_test_f1", f1},
          {"mean_test_f1_tuned", f1_tuned},
          {"epochs_run", outcome.epochs_run},
          {"seconds", outcome.seconds}};
}

// One line for the labels without examples, not one per label and layer: a file of the reference's
// cognitive-action datasets lists all 45 actions, and every layer file of a capture lacks the same ones.
void log_labels_without_examples(const std::vector<LayerOutcome>& outcomes) {
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const std::vector<std::string>& absent = outcomes[i].without_examples;
    if (absent.empty() || (i > 0 && absent == outcomes[i - 1].without_examples)) continue;
    size_t same_after = 0;
    while (i + same_after + 1 < outcomes.size() && outcomes[i + same_after + 1].without_examples == absent) ++same_after;
    spdlog::info("{}{}: {} labels have no example and get no probe: {}", outcomes[i].activations_path,
                 same_after > 0 ? fmt::format(" (and {} more layer file{})", same_after, same_after > 1 ? "s" : "") : "", absent.size(),
                 fmt::join(absent, ", "));
  }
}

// The layers of one run become one probes directory, which inference serves with one pass: their rows must have
// been read the same way.
void check_same_recipe(const std::vector<std::string>& files) {
  const activations::ReadoutRecipe first = activations::read_attributes(files.front()).recipe;
  for (size_t i = 1; i < files.size(); ++i) {
    const std::string difference =
        activations::recipe_difference(first, activations::read_attributes(files[i]).recipe, files.front(), files[i]);
    if (!difference.empty()) {
      fail_input("--activations: {} and {} were read differently ({}); the layers of one run become one probes "
                 "directory, which inference serves with one pass: train them in separate runs",
                 files.front(), files[i], difference);
    }
  }
}

// A capture the probes are scored on after training (--calibrate-on, --eval-file), checked before any training: a
// file for every layer, read as the training file was, and no --pool (the probes would read pooled rows, the file
// per-token ones).
void check_scoring_capture(const std::string& capture, const char* flag, const BinaryRunPlan& plan,
                           const BinaryRunOptions& options) {
  if (capture.empty()) return;
  if (!options.training.pool.empty()) {
    fail_usage("{} scores the probes on the capture's rows as they are, but --pool trains them on pooled rows: capture "
               "at --position {} instead of pooling",
               flag, options.training.pool);
  }
  for (size_t i = 0; i < plan.files.size(); ++i) {
    const std::string file = layer_file_of(capture, plan.layers[i], flag);
    const std::string difference = activations::recipe_difference(activations::read_attributes(plan.files[i]).recipe,
                                                                   activations::read_attributes(file).recipe,
                                                                   plan.files[i], file);
    if (!difference.empty()) fail_input("{} {}: read otherwise than the training data ({})", flag, file, difference);
  }
}

}  // namespace

BinaryRunPlan plan_binary_run(const BinaryRunOptions& options) {
  check_binary_training_options(options.training);
  BinaryRunPlan plan;
  plan.files = activations::find_activation_files(options.activations);
  if (plan.files.empty()) fail_usage("--activations: no activation file given");
  plan.inputs = plan.files;
  plan.inputs.insert(plan.inputs.end(), {options.calibrate_on, options.eval_file});
  refuse_inputs_inside(options.output_dir, plan.inputs);  // before the training, not once it is done
  check_same_recipe(plan.files);
  plan.target = select_training_compute(options.device, options.dtype);
  if (options.num_workers != 8) {
    spdlog::debug("--num-workers {} is accepted for compatibility: all probes train as one batched problem",
                  options.num_workers);
  }
  plan.layers = layers_of(plan.files);
  check_scoring_capture(options.calibrate_on, "--calibrate-on", plan, options);
  check_scoring_capture(options.eval_file, "--eval-file", plan, options);
  return plan;
}

KindRun train_kind(const BinaryRunOptions& options, const BinaryRunPlan& plan, const std::string& directory,
                   const std::string& shown_directory) {
  const std::vector<std::string>& files = plan.files;
  bool several = files.size() > 1;
  KindRun run;
  std::string model_name;
  run.summary_layers = Json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    int64_t layer = plan.layers[i];
    std::string progress_label = several ? fmt::format("layer {} ({}/{})", layer, i + 1, files.size())
                                         : fmt::format("layer {}", layer);
    run.outcomes.push_back(train_layer(options, files[i], layer, layer_directory(directory, layer, several), plan.target,
                                       progress_label, model_name));
    run.outcomes.back().directory = layer_directory(shown_directory, layer, several);
    run.summary_layers.push_back(layer_summary(run.outcomes.back(), progress_label, run.outcomes.back().directory));
  }
  log_labels_without_examples(run.outcomes);
  run.config = config_json(options, plan.target, model_name);
  if (several) {
    write_json_file(directory + "/per_action_layer_analysis.json", per_action_layer_analysis_json(run.outcomes));
    write_json_file(directory + "/training_summary.json",
                    training_summary_json(run.outcomes, run.config, options.num_workers));
  }
  write_file_atomic(directory + "/report.html", render_binary_report(run.outcomes, run.config));
  return run;
}

Json run_binary_training(const BinaryRunOptions& options) {
  auto started = std::chrono::steady_clock::now();
  BinaryRunPlan plan = plan_binary_run(options);
  if (options.kinds.size() > 1) return run_kind_comparison(options, plan);
  StagedDirectory output(options.output_dir, options.overwrite, plan.inputs);
  KindRun run = train_kind(options, plan, output.path(), options.output_dir);
  output.commit();
  std::string report = options.output_dir + "/report.html";
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("wrote {} ({:.1f} s in all)", report, seconds);
  return {{"output_dir", options.output_dir},
          {"report", report},
          {"device", plan.target.device.str()},
          {"dtype", device::precision_name(plan.target.dtype)},
          {"layers", run.summary_layers},
          {"total_seconds", seconds}};
}

}  // namespace probekit::probes
