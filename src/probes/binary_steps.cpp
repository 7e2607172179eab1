// Training a bank of one-vs-rest probes by gradient steps (the reference's way): AdamW over shuffled batches with
// dropout, the learning-rate schedule, the best epoch by validation AUROC and early stopping per probe.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <ATen/Parallel.h>

#include <cmath>

#include "common/error.h"
#include "common/progress.h"
#include "probes/binary_paths.h"
#include "probes/probe_files.h"
#include "probes/random_streams.h"

namespace probekit::probes {

namespace {

// The activations every group reads.
struct TrainingData {
  TrainingSplit train_x;
  const TrainingSplit& val_x;
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
void train_epoch(ProbeGroup& group, const TrainingData& data, const EpochBatches& batches,
                 const std::optional<TokenEpoch>& tokens, double lr) {
  int64_t count = group.bank.probes();
  at::ScalarType dtype = group.bank.values().scalar_type();
  at::Tensor train_loss_sum = at::zeros({count}, group.pos_weight.options());
  for (int64_t step = 0; step < batches.steps(); ++step) {
    at::Tensor rows = batches.rows(step);
    int64_t batch = rows.size(0);
    TrainActivations saved = data.train_x.forward_train(group.bank, batches, tokens, step);
    at::Tensor grad = batch_loss_gradient(saved.logits.view({batch, count}).to(at::kFloat), group.train_y, rows,
                                          group.pos_weight, train_loss_sum);
    group.bank.backward(saved, grad.to(dtype).view({batch, count, 1}));
    group.optimizer.step(group.bank.values(), group.bank.gradients(), lr, group.active_elements);
  }
  at::Tensor val_logits = data.val_x.logits(group.bank).view({-1, count}).to(at::kFloat);
  at::Tensor val_loss = batch_mean(bce_with_logits(val_logits, group.val_y, group.pos_weight).first, data.batch_size);
  group.epoch_results = at::cat({val_logits.flatten(), val_loss, train_loss_sum / static_cast<double>(batches.steps())})
                            .to(at::kCPU)
                            .to(at::kDouble);
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

// One group per thread on a CPU, each stepping through an epoch alone; one group of every probe on a GPU.
std::vector<ProbeGroup> make_groups(const BinaryInputs& in, const std::vector<TrainedLabel>& trained) {
  auto k = static_cast<int64_t>(trained.size());
  at::Device device = in.tensor_options.device();
  int64_t group_count = device.is_cpu() ? std::min<int64_t>(at::get_num_threads(), k) : 1;
  std::vector<ProbeGroup> groups;
  for (int64_t g = 0; g < group_count; ++g) {
    int64_t first = k * g / group_count, count = k * (g + 1) / group_count - first;
    groups.push_back(make_group(in.shape, in.options, trained, first, count, in.file.split(activations::Split::kTrain),
                                in.file.split(activations::Split::kVal), in.tensor_options));
  }
  return groups;
}

// The best-epoch and the final weights of every group, as one bank each.
TrainedWeights collect_weights(const BinaryInputs& in, const std::vector<ProbeGroup>& groups, int64_t k,
                               int64_t epochs_run) {
  TrainedWeights weights{ProbeBank(in.shape, k, in.tensor_options), {}, epochs_run};
  ProbeBank final_bank(in.shape, k, in.tensor_options);
  for (const ProbeGroup& group : groups) {
    for (size_t i = 0; i < weights.best.specs().size(); ++i) {
      weights.best.parameter(i).narrow(0, group.first, group.bank.probes()).copy_(group.bank.parameter_in(group.best_values, i));
      final_bank.parameter(i).narrow(0, group.first, group.bank.probes()).copy_(group.bank.parameter(i));
    }
  }
  weights.final_values = final_bank.values();
  return weights;
}

}  // namespace

TrainedWeights train_by_steps(const BinaryInputs& in, std::vector<TrainedLabel>& trained) {
  const BinaryTrainingOptions& options = in.options;
  const auto& train_split = in.file.split(activations::Split::kTrain);
  std::vector<std::vector<int>> val_truth;
  for (const TrainedLabel& t : trained) val_truth.push_back(column_labels(in.file.split(activations::Split::kVal), t.label_index));
  auto k = static_cast<int64_t>(trained.size());
  at::Device device = in.tensor_options.device();
  TrainingData data{TrainingSplit(train_split, in.shape, in.tensor_options, options.pin_activations), in.val_x,
                    options.batch_size};
  std::vector<ProbeGroup> groups = make_groups(in, trained);
  auto group_count = static_cast<int64_t>(groups.size());
  std::vector<double> rates = epoch_learning_rates(options.lr, options.epochs, options.cosine_schedule, options.eta_min);
  spdlog::info("{}: training {} {} probes on {} examples x {} ({}, {}{}{}), batch {}, up to {} epochs", in.progress_label,
               k, in.shape.kind->name(), train_split.examples(), in.shape.input_dim, device.str(),
               device::precision_name(in.tensor_options.dtype().toScalarType()),
               group_count > 1 ? fmt::format(", {} groups of probes in parallel", group_count) : "",
               data.train_x.activations().held_on() != device ? ", activations in host memory" : "", options.batch_size, options.epochs);

  int64_t active_count = k, epochs_run = 0;
  ProgressBar bar(in.progress_label, options.epochs, "epochs");
  for (int64_t epoch = 0; epoch < options.epochs && active_count > 0; ++epoch) {
    EpochBatches batches(in.shape, options.seed, epoch, train_split.examples(), options.batch_size, device);
    const std::optional<TokenEpoch> tokens = data.train_x.token_epoch(batches);
    // One parallel region per epoch: groups share nothing but the read-only data and batches.
    at::parallel_for(0, group_count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        if (groups[g].active_count > 0) train_epoch(groups[g], data, batches, tokens, rates[epoch]);
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
  std::vector<double> best_aucs;
  for (const TrainedLabel& t : trained) best_aucs.push_back(t.history.best_val_auc);
  bar.finish(fmt::format("mean best val AUROC {:.4f}", metrics::mean_of_defined(best_aucs)));
  return collect_weights(in, groups, k, epochs_run);
}

}  // namespace probekit::probes
