#include "probes/binary_trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "common/error.h"
#include "probes/binary_paths.h"

#ifdef PROBEKIT_WITH_CUDA
#include "probes/fused_training.h"
#endif

namespace probekit::probes {

namespace {

// Test rows whose logits are stored with the probes so that a reader can check it loads them right.
constexpr int64_t kCheckRows = 8;

ClassBalance balance_of(const activations::SplitData& split, int64_t label) {
  ClassBalance b;
  b.examples = split.examples();
  for (int64_t value : split.labels) b.positives += value == label ? 1 : 0;
  return b;
}

// Why a label cannot be trained, or "" when it can: both classes must occur in train and validation.
std::string untrainable_reason(const ClassBalance& train, const ClassBalance& val) {
  if (train.positives == 0) return "no positive example in the train split";
  if (train.positives == train.examples) return "no negative example in the train split";
  if (val.positives == 0) return "no positive example in the val split";
  if (val.positives == val.examples) return "no negative example in the val split";
  return "";
}

}  // namespace

at::Tensor binary_targets(const activations::SplitData& split, const at::Tensor& label_indices) {
  at::Tensor labels = label_tensor(split, label_indices.device());
  return labels.unsqueeze(1).eq(label_indices.unsqueeze(0)).to(at::kFloat);
}

// loss = (1 - y) z + (1 + (w - 1) y) softplus(-z);  d loss / dz = metrics::sigmoid(z) (1 + (w - 1) y) - w y.
std::pair<at::Tensor, at::Tensor> bce_with_logits(const at::Tensor& logits, const at::Tensor& targets,
                                                  const at::Tensor& pos_weight) {
  at::Tensor positive_scale = (pos_weight - 1.0) * targets + 1.0;
  at::Tensor softplus_negative = at::log1p(at::exp(-logits.abs())) + at::relu(-logits);
  at::Tensor loss = (1.0 - targets) * logits + positive_scale * softplus_negative;
  at::Tensor grad = at::sigmoid(logits) * positive_scale - pos_weight * targets;
  return {loss, grad};
}

void check_binary_training_options(const BinaryTrainingOptions& options) {
  check_training_options(options);
  if (options.patience < kNeverStopEarly) {
    fail_usage("--early-stopping-patience must be at least 0, or {} to never stop early; got {}", kNeverStopEarly,
               options.patience);
  }
}

at::Tensor batch_loss_gradient(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& rows,
                               const at::Tensor& pos_weight, at::Tensor& loss_sum) {
#ifdef PROBEKIT_WITH_CUDA
  if (logits.is_cuda()) return fused::bce_with_logits_batch(logits, targets, rows, pos_weight, loss_sum);
#endif
  auto [loss, grad] = bce_with_logits(logits, targets.index_select(0, rows), pos_weight);
  loss_sum += loss.mean(0);
  return grad / static_cast<double>(logits.size(0));
}

std::vector<int> column_labels(const activations::SplitData& split, int64_t label) {
  std::vector<int> out;
  out.reserve(split.labels.size());
  for (int64_t value : split.labels) out.push_back(value == label ? 1 : 0);
  return out;
}

std::vector<double> column_scores(const at::Tensor& logits_cpu, int64_t column) {
  at::Tensor values = logits_cpu.select(1, column).to(at::kDouble).contiguous();
  const double* p = values.data_ptr<double>();
  return std::vector<double>(p, p + values.numel());
}

namespace {

// The selected labels that can be trained, with their class balance, and the ones skipped with the reason.
std::vector<TrainedLabel> plan_labels(const activations::ActivationFile& file, const BinaryTrainingOptions& options,
                                      std::vector<SkippedLabel>& skipped, std::vector<std::string>& without_examples) {
  std::vector<TrainedLabel> trained;
  for (int64_t index : select_labels(file.attributes.label_names, options.labels)) {
    TrainedLabel t;
    t.label = file.attributes.label_names[index];
    t.label_index = index;
    t.train = balance_of(file.split(activations::Split::kTrain), index);
    t.val = balance_of(file.split(activations::Split::kVal), index);
    t.test = balance_of(file.split(activations::Split::kTest), index);
    if (t.train.positives + t.val.positives + t.test.positives == 0) {
      without_examples.push_back(t.label);
      continue;
    }
    std::string reason = untrainable_reason(t.train, t.val);
    if (!reason.empty()) {
      spdlog::warn("{}: label '{}' skipped: {}", file.path, t.label, reason);
      skipped.push_back({t.label, reason});
      continue;
    }
    if (options.balance_classes) {
      t.pos_weight = static_cast<double>(t.train.examples - t.train.positives) / static_cast<double>(t.train.positives);
    }
    trained.push_back(std::move(t));
  }
  if (trained.empty()) {
    std::vector<std::string> reasons;
    for (const std::string& label : without_examples) reasons.push_back(fmt::format("'{}' has no example", label));
    for (const SkippedLabel& s : skipped) reasons.push_back(fmt::format("'{}': {}", s.label, s.reason));
    fail_input("{}: no label can be trained: {}", file.path, fmt::join(reasons, "; "));
  }
  return trained;
}

// Test metrics with their bootstrap intervals, the tuned thresholds and the check logits of every probe, from the
// weights to save.
void evaluate_best(BinaryTrainingResult& result, std::vector<TrainedLabel>& trained, const TrainingSplit& val_x,
                   const TrainingSplit& test_x, const activations::ActivationFile& file, uint64_t seed) {
  auto k = static_cast<int64_t>(trained.size());
  at::Tensor val_logits = val_x.logits(result.best).view({-1, k}).to(at::kFloat).to(at::kCPU);
  at::Tensor test_logits = test_x.logits(result.best).view({-1, k}).to(at::kFloat).to(at::kCPU);
  int64_t check_rows = std::min<int64_t>(kCheckRows, test_x.examples());
  result.check_inputs = test_x.first_inputs(check_rows, result.check_offsets);
  auto check = test_logits.accessor<float, 2>();
  std::vector<std::vector<int>> truths;
  std::vector<std::vector<double>> scores;
  std::vector<double> thresholds;
  for (int64_t p = 0; p < k; ++p) {
    TrainedLabel& t = trained[p];
    std::vector<int> test_truth = column_labels(file.split(activations::Split::kTest), t.label_index);
    std::vector<double> test_scores = column_scores(test_logits, p);
    t.val_tuned = metrics::tune_threshold_for_f1(column_labels(file.split(activations::Split::kVal), t.label_index),
                                                 column_scores(val_logits, p));
    t.test_tuned = metrics::metrics_at(test_truth, test_scores, t.val_tuned.threshold);
    t.test_at_half = metrics::metrics_at(test_truth, test_scores, 0.0);
    t.test_auc_roc = metrics::roc_auc(test_truth, test_scores);
    t.test_auc_pr = metrics::average_precision(test_truth, test_scores);
    if (std::isnan(t.test_auc_roc)) {
      spdlog::warn("{}: label '{}': the test split holds {} positives of {}: AUROC is undefined (written as null)",
                   file.path, t.label, t.test.positives, t.test.examples);
    }
    for (int64_t row = 0; row < check_rows; ++row) t.check_logits.push_back(check[row][p]);
    truths.push_back(std::move(test_truth));
    scores.push_back(std::move(test_scores));
    thresholds.push_back(t.val_tuned.threshold);
    spdlog::debug("{:30s} test AUROC {:.4f}, F1 {:.4f} at 0.5, F1 {:.4f} at {:.4f} (tuned), best epoch {}", t.label,
                  t.test_auc_roc, t.test_at_half.f1, t.test_tuned.f1, metrics::sigmoid(t.val_tuned.threshold),
                  t.history.best_epoch);
  }
  metrics::IntervalOptions intervals;
  intervals.seed = seed;
  std::vector<metrics::TestFigures> figures = metrics::test_figures(truths, scores, thresholds, intervals);
  for (int64_t p = 0; p < k; ++p) trained[p].test_figures = std::move(figures[p]);
}

// The leading special tokens (a BOS) an every-token probe leaves out of each text of a --position all file.
int64_t logged_leading_specials(const activations::ActivationFile& file, const std::string& progress_label) {
  int64_t skip = leading_specials(file);
  spdlog::info("{}: every text starts with {}: the probes read {}", progress_label,
               skip > 0 ? "the same token (a BOS)" : "no common token", skip > 0 ? "the tokens after it" : "every token");
  return skip;
}

}  // namespace

BinaryTrainingResult train_binary_probes(const activations::ActivationFile& file, const BinaryTrainingOptions& options,
                                         at::Device device, at::ScalarType dtype, const std::string& progress_label) {
  auto started = std::chrono::steady_clock::now();
  check_binary_training_options(options);
  check_rows(file, *options.kind);
  std::vector<SkippedLabel> skipped;
  std::vector<std::string> without_examples;
  std::vector<TrainedLabel> trained = plan_labels(file, options, skipped, without_examples);
  ProbeShape shape = probe_shape(options, file.attributes.hidden_size, 1);
  check_bank_memory(shape, static_cast<int64_t>(trained.size()), device, dtype);
  // A conversation's rows are its masked tokens: the mask already leaves the template's tokens (BOS) out.
  if (shape.kind->reads_every_token() && !file.attributes.recipe.mask) {
    shape.skip_leading = logged_leading_specials(file, progress_label);
  }
  at::TensorOptions tensor_options = at::TensorOptions().device(device).dtype(dtype);
  TrainingSplit val_x(file.split(activations::Split::kVal), shape, tensor_options, options.pin_activations);
  BinaryInputs in{file, options, shape, tensor_options, val_x, progress_label};
  TrainedWeights weights = shape.kind->fits_directly() ? fit_by_solver(in, trained) : train_by_steps(in, trained);

  BinaryTrainingResult result{shape, {}, std::move(skipped), std::move(without_examples), std::move(weights.best),
                              std::move(weights.final_values), {}, {}, weights.epochs_run, 0.0};
  TrainingSplit test_x(file.split(activations::Split::kTest), shape, tensor_options, options.pin_activations);
  evaluate_best(result, trained, val_x, test_x, file, options.seed);
  result.labels = std::move(trained);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::debug("{}: mean test AUROC {:.4f}", progress_label,
                mean_over(result.labels, [](const TrainedLabel& t) { return t.test_auc_roc; }));
  return result;
}

}  // namespace probekit::probes
