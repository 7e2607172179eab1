#include "probes/binary_trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>

#include "common/error.h"
#include "common/progress.h"
#include "probes/probe_files.h"
#include "probes/random_streams.h"
#include "probes/training_data.h"

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

// 0/1 targets [N, K] for the labels `label_indices`.
at::Tensor binary_targets(const activations::SplitData& split, const at::Tensor& label_indices) {
  at::Tensor labels = label_tensor(split, label_indices.device());
  return labels.unsqueeze(1).eq(label_indices.unsqueeze(0)).to(at::kFloat);
}

// BCEWithLogitsLoss(pos_weight) per element and its gradient by the logit; logits and targets [B, K] float32.
// loss = (1 - y) z + (1 + (w - 1) y) softplus(-z);  d loss / dz = metrics::sigmoid(z) (1 + (w - 1) y) - w y.
std::pair<at::Tensor, at::Tensor> bce_with_logits(const at::Tensor& logits, const at::Tensor& targets,
                                                  const at::Tensor& pos_weight) {
  at::Tensor positive_scale = (pos_weight - 1.0) * targets + 1.0;
  at::Tensor softplus_negative = at::log1p(at::exp(-logits.abs())) + at::relu(-logits);
  at::Tensor loss = (1.0 - targets) * logits + positive_scale * softplus_negative;
  at::Tensor grad = at::sigmoid(logits) * positive_scale - pos_weight * targets;
  return {loss, grad};
}

}  // namespace

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

namespace {

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


// The activations every group reads.
struct TrainingData {
  SplitActivations train_x, val_x;  // [N, H]
  int64_t batch_size = 0;
};

// A contiguous range of the trained probes that trains as one batched problem. On a CPU the probes are split
// into one group per thread and each group steps through an epoch on its own thread: probes never interact,
// so this costs one synchronisation per epoch instead of several per step (many small parallel regions per
// step are slow, and very slow on a CPU shared with other work).
struct ProbeGroup {
  int64_t first = 0;  // index of its first probe among the trained labels
  ProbeBank bank;
  AdamW optimizer;
  at::Tensor train_y, val_y;  // its columns of the 0/1 targets, [N, count] float32
  at::Tensor pos_weight;      // [count] float32
  at::Tensor best_values;     // laid out as bank.values()
  at::Tensor active_elements;  // bool, laid out as bank.values(); undefined while all of its probes train
  std::vector<uint8_t> active;
  std::vector<int64_t> epochs_without_improvement;
  int64_t active_count = 0;
  at::Tensor epoch_results;  // CPU doubles of the last epoch: val logits [Nv, count], val loss, train loss
};

ProbeGroup make_group(const ProbeShape& shape, const BinaryTrainingOptions& options,
                      const std::vector<TrainedLabel>& trained, int64_t first, int64_t count,
                      const activations::SplitData& train_split, const activations::SplitData& val_split,
                      at::TensorOptions tensor_options) {
  ProbeBank bank(shape, count, tensor_options);
  std::vector<int64_t> indices;
  std::vector<float> pos_weights;
  for (int64_t p = 0; p < count; ++p) {
    const TrainedLabel& t = trained[first + p];
    bank.initialize_probe(p, stream_key(options.seed, Stream::kInitialization, static_cast<uint64_t>(t.label_index)));
    indices.push_back(t.label_index);
    pos_weights.push_back(static_cast<float>(t.pos_weight));
  }
  at::Device device = tensor_options.device();
  at::Tensor label_indices = at::tensor(indices, at::kLong).to(device);
  AdamW optimizer(bank.values(), AdamW::Options{options.weight_decay});
  at::Tensor best_values = bank.values().clone();
  return ProbeGroup{first,
                    std::move(bank),
                    std::move(optimizer),
                    binary_targets(train_split, label_indices),
                    binary_targets(val_split, label_indices),
                    at::tensor(pos_weights, at::kFloat).to(device),
                    std::move(best_values),
                    {},
                    std::vector<uint8_t>(static_cast<size_t>(count), 1),
                    std::vector<int64_t>(static_cast<size_t>(count), 0),
                    count,
                    {}};
}

// One epoch of one group: its training steps, then one batched validation pass and one copy to the host.
void train_epoch(ProbeGroup& group, const TrainingData& data, const EpochBatches& batches, double lr) {
  int64_t count = group.bank.probes();
  at::ScalarType dtype = group.bank.values().scalar_type();
  at::Tensor train_loss_sum = at::zeros({count}, group.pos_weight.options());
  for (int64_t step = 0; step < batches.steps(); ++step) {
    at::Tensor rows = batches.rows(step);
    int64_t batch = rows.size(0);
    TrainActivations saved = group.bank.forward_train(data.train_x.rows(rows), batches.keep(step));
    at::Tensor grad = batch_loss_gradient(saved.logits.view({batch, count}).to(at::kFloat), group.train_y, rows,
                                          group.pos_weight, train_loss_sum);
    group.bank.backward(saved, grad.to(dtype).view({batch, count, 1}));
    group.optimizer.step(group.bank.values(), group.bank.gradients(), lr, group.active_elements);
  }
  at::Tensor val_logits = group.bank.forward(data.val_x.all()).view({-1, count}).to(at::kFloat);
  at::Tensor val_loss = batch_mean(bce_with_logits(val_logits, group.val_y, group.pos_weight).first, data.batch_size);
  group.epoch_results = at::cat({val_logits.flatten(), val_loss, train_loss_sum / static_cast<double>(batches.steps())})
                            .to(at::kCPU)
                            .to(at::kDouble);
}


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
  if (trained.empty()) fail_input("{}: no label can be trained (every selected label was skipped)", file.path);
  return trained;
}

// Records the epoch of a group's probes that still train: history, best epoch and weights, early stopping.
// Appends their validation AUROCs to `aucs`.
void record_epoch(ProbeGroup& group, std::vector<TrainedLabel>& trained, const std::vector<std::vector<int>>& val_truth,
                  int64_t epoch, double lr, int64_t patience, std::vector<double>& aucs) {
  int64_t count = group.bank.probes();
  auto val_rows = static_cast<int64_t>(val_truth.front().size());
  const double* val_loss = group.epoch_results.data_ptr<double>() + val_rows * count;
  const double* train_loss = val_loss + count;
  at::Tensor val_logits = group.epoch_results.narrow(0, 0, val_rows * count).view({val_rows, count});
  std::vector<uint8_t> improved(static_cast<size_t>(count), 0);
  bool any_improved = false, any_stopped = false;
  for (int64_t p = 0; p < count; ++p) {
    if (!group.active[p]) continue;
    TrainedLabel& t = trained[group.first + p];
    const std::vector<int>& truth = val_truth[group.first + p];
    std::vector<double> scores = column_scores(val_logits, p);
    double auc = metrics::roc_auc(truth, scores);
    if (!std::isfinite(train_loss[p])) {
      // A diverged probe's weights are meaningless; the run stops before anything is written.
      fail_input("training of '{}' diverged at epoch {} (training loss {}); nothing was saved. Lower --lr (the rate "
                 "was {} at that epoch), use --dtype fp32, or check the activations for extreme values",
                 t.label, epoch + 1, train_loss[p], lr);
    }
    LabelHistory& h = t.history;
    h.train_loss.push_back(train_loss[p]);
    h.val_loss.push_back(val_loss[p]);
    h.val_auc.push_back(auc);
    h.val_accuracy.push_back(metrics::metrics_at(truth, scores, 0.0).accuracy);
    h.learning_rates.push_back(lr);
    aucs.push_back(auc);
    // The reference's rule: strictly better than the best so far (which starts at 0), else one more epoch
    // without improvement; the probe stops once `patience` of them are counted, a check made after every epoch
    // (so patience 0 stops it after the first). The first epoch always counts as the best so far,
    // so a probe whose validation AUROC stays at exactly 0 still has weights to save (the reference saved none).
    // An equal AUROC with a lower validation loss also improves: once AUROC reaches 1 (common on separable
    // activations) the reference kept its first such epoch, an undertrained probe, while the loss still fell.
    bool first = h.best_epoch == 0;
    bool ties_with_lower_loss =
        !first && auc == h.best_val_auc && val_loss[p] < h.val_loss[static_cast<size_t>(h.best_epoch - 1)];
    if (first || auc > h.best_val_auc || ties_with_lower_loss) {
      h.best_val_auc = auc;
      h.best_epoch = epoch + 1;
      group.epochs_without_improvement[p] = 0;
      improved[p] = 1;
      any_improved = true;
    } else {
      ++group.epochs_without_improvement[p];
    }
    if (patience != kNeverStopEarly && group.epochs_without_improvement[p] >= patience) {
      h.stopped_early = true;
      group.active[p] = 0;
      --group.active_count;
      any_stopped = true;
      spdlog::debug("'{}' stopped at epoch {} (best epoch {}, val AUROC {:.4f})", t.label, epoch + 1, h.best_epoch,
                    h.best_val_auc);
    }
  }
  at::Device device = group.bank.values().device();
  if (any_improved) {
    at::Tensor mask = at::tensor(at::ArrayRef<uint8_t>(improved)).to(device).to(at::kBool);
    group.best_values = at::where(group.bank.per_element(mask), group.bank.values(), group.best_values);
  }
  if (any_stopped) {
    at::Tensor mask = at::tensor(at::ArrayRef<uint8_t>(group.active)).to(device).to(at::kBool);
    group.active_elements = group.bank.per_element(mask);
  }
}

// Test metrics, the tuned thresholds and the check logits of every probe, from the best-epoch weights.
void evaluate_best(BinaryTrainingResult& result, std::vector<TrainedLabel>& trained, const at::Tensor& val_x,
                   const at::Tensor& test_x, const activations::ActivationFile& file) {
  auto k = static_cast<int64_t>(trained.size());
  at::Tensor val_logits = result.best.forward(val_x).view({-1, k}).to(at::kFloat).to(at::kCPU);
  at::Tensor test_logits = result.best.forward(test_x).view({-1, k}).to(at::kFloat).to(at::kCPU);
  int64_t check_rows = std::min<int64_t>(kCheckRows, test_x.size(0));
  result.check_inputs = test_x.narrow(0, 0, check_rows).to(at::kFloat).to(at::kCPU);
  auto check = test_logits.accessor<float, 2>();
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
    spdlog::debug("{:30s} test AUROC {:.4f}, F1 {:.4f} at 0.5, F1 {:.4f} at {:.4f} (tuned), best epoch {}", t.label,
                  t.test_auc_roc, t.test_at_half.f1, t.test_tuned.f1, metrics::sigmoid(t.val_tuned.threshold),
                  t.history.best_epoch);
  }
}

}  // namespace

BinaryTrainingResult train_binary_probes(const activations::ActivationFile& file, const BinaryTrainingOptions& options,
                                         at::Device device, at::ScalarType dtype, const std::string& progress_label) {
  auto started = std::chrono::steady_clock::now();
  check_binary_training_options(options);
  check_per_example(file);
  const auto& train_split = file.split(activations::Split::kTrain);
  const auto& val_split = file.split(activations::Split::kVal);
  std::vector<SkippedLabel> skipped;
  std::vector<std::string> without_examples;
  std::vector<TrainedLabel> trained = plan_labels(file, options, skipped, without_examples);
  std::vector<std::vector<int>> val_truth;
  for (const TrainedLabel& t : trained) val_truth.push_back(column_labels(val_split, t.label_index));

  auto k = static_cast<int64_t>(trained.size());
  ProbeShape shape = probe_shape(options, file.attributes.hidden_size, 1);
  at::TensorOptions tensor_options = at::TensorOptions().device(device).dtype(dtype);
  TrainingData data{SplitActivations(train_split, tensor_options, options.pin_activations),
                    SplitActivations(val_split, tensor_options, options.pin_activations), options.batch_size};

  // On a CPU one group per thread, each stepping through an epoch alone; on a GPU one group of every probe.
  int64_t group_count = device.is_cpu() ? std::min<int64_t>(at::get_num_threads(), k) : 1;
  std::vector<ProbeGroup> groups;
  for (int64_t g = 0; g < group_count; ++g) {
    int64_t first = k * g / group_count, count = k * (g + 1) / group_count - first;
    groups.push_back(make_group(shape, options, trained, first, count, train_split, val_split, tensor_options));
  }
  std::vector<double> rates = epoch_learning_rates(options.lr, options.epochs, options.cosine_schedule, options.eta_min);
  spdlog::info("{}: training {} {} probes on {} examples x {} ({}, {}{}{}), batch {}, up to {} epochs", progress_label, k,
               shape.kind->name(), train_split.examples(), shape.input_dim, device.str(), dtype_label(dtype),
               group_count > 1 ? fmt::format(", {} groups of probes in parallel", group_count) : "",
               data.train_x.held_on() != device ? ", activations in host memory" : "", options.batch_size, options.epochs);

  int64_t active_count = k, epochs_run = 0;
  ProgressBar bar(progress_label, options.epochs, "epochs");
  for (int64_t epoch = 0; epoch < options.epochs && active_count > 0; ++epoch) {
    EpochBatches batches(shape, options.seed, epoch, train_split.examples(), options.batch_size, device);
    // One parallel region per epoch: groups share nothing but the read-only data and batches.
    at::parallel_for(0, group_count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        if (groups[g].active_count > 0) train_epoch(groups[g], data, batches, rates[epoch]);
      }
    });
    std::vector<double> aucs;
    active_count = 0;
    for (ProbeGroup& group : groups) {
      if (group.active_count > 0) record_epoch(group, trained, val_truth, epoch, rates[epoch], options.patience, aucs);
      active_count += group.active_count;
    }
    epochs_run = epoch + 1;
    bar.update(epochs_run, fmt::format("mean val AUROC {:.4f}, {}/{} probes training", metrics::mean_of_defined(aucs), active_count, k));
  }

  BinaryTrainingResult result{shape, {}, std::move(skipped), std::move(without_examples),
                              ProbeBank(shape, k, tensor_options), {}, {}, epochs_run, 0.0};
  ProbeBank final_bank(shape, k, tensor_options);
  for (const ProbeGroup& group : groups) {
    for (size_t i = 0; i < result.best.specs().size(); ++i) {
      result.best.parameter(i).narrow(0, group.first, group.bank.probes()).copy_(group.bank.parameter_in(group.best_values, i));
      final_bank.parameter(i).narrow(0, group.first, group.bank.probes()).copy_(group.bank.parameter(i));
    }
  }
  result.final_values = final_bank.values();
  SplitActivations test_x(file.split(activations::Split::kTest), tensor_options, options.pin_activations);
  evaluate_best(result, trained, data.val_x.all(), test_x.all(), file);
  std::vector<double> test_aucs;
  for (const TrainedLabel& t : trained) {
    if (!std::isnan(t.test_auc_roc)) test_aucs.push_back(t.test_auc_roc);
  }
  result.labels = std::move(trained);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  bar.finish(fmt::format("mean test AUROC {:.4f}", metrics::mean_of_defined(test_aucs)));
  return result;
}

}  // namespace probekit::probes
