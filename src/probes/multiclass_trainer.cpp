#include "probes/multiclass_trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "common/progress.h"
#include "probes/probe_files.h"
#include "probes/random_streams.h"
#include "probes/training_data.h"

namespace probekit::probes {

namespace {

// Test rows whose logits are stored with the probes so that a reader can check it loads them right.
constexpr int64_t kCheckRows = 8;

// CrossEntropyLoss per example and its gradient by the logits (before the mean): softmax - onehot.
std::pair<at::Tensor, at::Tensor> cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  at::Tensor log_probs = at::log_softmax(logits, 1);
  at::Tensor loss = -log_probs.gather(1, labels.unsqueeze(1)).squeeze(1);
  at::Tensor grad = log_probs.exp();
  grad.scatter_add_(1, labels.unsqueeze(1), at::full({labels.size(0), 1}, -1.0, grad.options()));
  return {loss, grad};
}

// torch.argmax's choice: the first of equal maxima.
std::vector<int64_t> argmax_rows(const at::Tensor& logits_cpu) {
  at::Tensor values = logits_cpu.to(at::kDouble).contiguous();
  int64_t rows = values.size(0), classes = values.size(1);
  const double* p = values.data_ptr<double>();
  std::vector<int64_t> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (p[r * classes + c] > p[r * classes + best]) best = c;
    }
    out[r] = best;
  }
  return out;
}

// NaN without examples: no accuracy, not a zero one.
double accuracy_of(const std::vector<int64_t>& predicted, const std::vector<int64_t>& truth) {
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i] ? 1 : 0;
  return truth.empty() ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(correct) / static_cast<double>(truth.size());
}

// Throws unless the file has two labels or more. Says in one line which labels have no example at all (a
// reference file lists all 45 actions: their outputs stay, as in the reference) and warns in one line about
// those present without a train example.
void check_classes(const activations::ActivationFile& file) {
  const auto& names = file.attributes.label_names;
  if (names.size() < 2) fail_input("{}: a multiclass probe needs at least 2 labels, the file has {}", file.path, names.size());
  if (file.split(activations::Split::kTrain).examples() == 0) {
    fail_input("{}: the train split has no examples (capture with a train share in --split)", file.path);
  }
  if (file.split(activations::Split::kVal).examples() == 0) {
    spdlog::warn("{}: the validation split has no examples: no epoch can be chosen on it, so best_probe is the last "
                 "epoch's (as final_probe)", file.path);
  }
  if (file.split(activations::Split::kTest).examples() == 0) {
    spdlog::warn("{}: the test split has no examples: the test metrics are undefined (nan, null in test_metrics.json)",
                 file.path);
  }
  std::vector<int64_t> train_counts(names.size(), 0), other_counts(names.size(), 0);
  for (int64_t label : file.split(activations::Split::kTrain).labels) ++train_counts[label];
  for (activations::Split split : {activations::Split::kVal, activations::Split::kTest}) {
    for (int64_t label : file.split(split).labels) ++other_counts[label];
  }
  std::vector<std::string> absent, untrained;
  for (size_t c = 0; c < names.size(); ++c) {
    if (train_counts[c] == 0) (other_counts[c] == 0 ? absent : untrained).push_back(names[c]);
  }
  if (!absent.empty()) {
    spdlog::info("{}: {} of the {} labels have no example; their outputs are never trained: {}", file.path,
                 absent.size(), names.size(), fmt::join(absent, ", "));
  }
  if (!untrained.empty()) {
    spdlog::warn("{}: {} labels have no train example; their outputs are never trained: {}", file.path,
                 untrained.size(), fmt::join(untrained, ", "));
  }
}

// The three splits: activations where --pin-activations-to-gpu keeps them, labels on the training device.
struct SplitTensors {
  SplitActivations train_x, val_x, test_x;  // [N, H] in the training dtype
  at::Tensor train_y, val_y, test_y;        // [N] int64
};

SplitTensors split_tensors(const activations::ActivationFile& file, at::TensorOptions options, bool pinned) {
  const auto& train = file.split(activations::Split::kTrain);
  const auto& val = file.split(activations::Split::kVal);
  const auto& test = file.split(activations::Split::kTest);
  at::Device device = options.device();
  return {SplitActivations(train, options, pinned), SplitActivations(val, options, pinned),
          SplitActivations(test, options, pinned),  label_tensor(train, device),
          label_tensor(val, device),                label_tensor(test, device)};
}

// What changes as the probe trains.
struct ProbeTraining {
  ProbeBank bank;
  AdamW optimizer;
  MulticlassHistory history;
  at::Tensor best_values;  // the weights of the best validation accuracy so far, laid out as bank.values()
};

// The training steps of one epoch; returns the mean over its batches of their mean loss (float32 scalar on
// the device, not copied to the host).
at::Tensor train_epoch(ProbeTraining& training, const SplitTensors& data, const EpochBatches& batches, double lr) {
  ProbeBank& bank = training.bank;
  int64_t classes = bank.shape().outputs;
  at::Tensor train_loss_sum = at::zeros({}, at::TensorOptions().device(data.train_y.device()).dtype(at::kFloat));
  for (int64_t step = 0; step < batches.steps(); ++step) {
    at::Tensor rows = batches.rows(step);
    int64_t batch = rows.size(0);
    TrainActivations saved = bank.forward_train(data.train_x.rows(rows), batches.keep(step));
    auto [loss, grad] = cross_entropy(saved.logits.view({batch, classes}).to(at::kFloat), data.train_y.index_select(0, rows));
    train_loss_sum += loss.mean();
    bank.backward(saved, (grad / static_cast<double>(batch)).to(bank.values().scalar_type()).view({batch, 1, classes}));
    training.optimizer.step(bank.values(), bank.gradients(), lr);
  }
  return train_loss_sum / static_cast<double>(batches.steps());
}

// Validates the probe after epoch `epoch` (0-based) with one copy to the host, appends the epoch to the
// history and keeps the weights when their validation accuracy is the best so far. Returns that accuracy.
double record_epoch(ProbeTraining& training, const SplitTensors& data, const std::vector<int64_t>& val_labels,
                    const at::Tensor& train_loss, int64_t batch_size, int64_t epoch) {
  int64_t classes = training.bank.shape().outputs;
  at::Tensor val_logits = training.bank.forward(data.val_x.all()).view({-1, classes}).to(at::kFloat);
  at::Tensor val_loss = batch_mean(cross_entropy(val_logits, data.val_y).first, batch_size);
  at::Tensor host = at::cat({val_logits.flatten(), val_loss.view({1}), train_loss.view({1})}).to(at::kCPU).to(at::kDouble);
  double val_accuracy = accuracy_of(argmax_rows(host.narrow(0, 0, val_logits.numel()).view({-1, classes})), val_labels);
  MulticlassHistory& history = training.history;
  double loss = host[val_logits.numel() + 1].item<double>();
  if (!std::isfinite(loss)) {
    fail_input("training diverged at epoch {} (training loss {}); nothing was saved. Lower --lr, use --dtype fp32, or "
               "check the activations for extreme values",
               epoch + 1, loss);
  }
  history.train_loss.push_back(loss);
  history.val_loss.push_back(host[val_logits.numel()].item<double>());
  history.val_accuracy.push_back(val_accuracy);
  // The first epoch is the best so far whatever it scores (an accuracy of 0), so a best epoch is always saved; without
  // validation examples (NaN) every epoch replaces the one before: the best is the last.
  if (history.best_epoch == 0 || val_accuracy > history.best_val_accuracy || std::isnan(val_accuracy)) {
    history.best_val_accuracy = val_accuracy;
    history.best_epoch = epoch + 1;
    training.best_values.copy_(training.bank.values());
  }
  return val_accuracy;
}

// The test metrics and loss of the final weights, as the reference evaluates, and the check logits.
void evaluate_final(MulticlassTrainingResult& result, const SplitTensors& data, const activations::SplitData& test_split) {
  int64_t classes = result.final_probe.shape().outputs;
  at::Tensor test_x = data.test_x.all();
  at::Tensor test_logits = result.final_probe.forward(test_x).view({-1, classes}).to(at::kFloat);
  result.test_loss = cross_entropy(test_logits, data.test_y).first.mean().item<double>();
  int64_t check_rows = std::min<int64_t>(kCheckRows, test_split.examples());
  result.check_inputs = test_x.narrow(0, 0, check_rows).to(at::kCPU).to(at::kFloat);
  result.check_logits = test_logits.narrow(0, 0, check_rows).to(at::kCPU);
  at::Tensor test_host = test_logits.to(at::kCPU).to(at::kDouble).contiguous();
  std::vector<double> scores(test_host.data_ptr<double>(), test_host.data_ptr<double>() + test_host.numel());
  result.test = metrics::multiclass_metrics(test_split.labels, argmax_rows(test_host), scores, classes, 3);
  if (test_split.examples() == 0) {  // regression: reported as 0.0, a probe always wrong
    metrics::MulticlassMetrics& m = result.test;
    const double undefined = std::numeric_limits<double>::quiet_NaN();
    for (double* value : {&m.accuracy, &m.precision_macro, &m.recall_macro, &m.f1_macro, &m.precision_micro,
                          &m.recall_micro, &m.f1_micro, &m.top_k_accuracy}) {
      *value = undefined;
    }
  }
}

}  // namespace

namespace {

// The epochs of AdamW steps, each validated.
void train_by_steps(ProbeTraining& training, const activations::ActivationFile& file, const SplitTensors& data,
                    const MulticlassTrainingOptions& options, const std::string& progress_label) {
  const ProbeShape& shape = training.bank.shape();
  at::Device device = data.train_y.device();
  const auto& train_split = file.split(activations::Split::kTrain);
  spdlog::info("{}: training a {} probe over {} classes on {} examples x {} ({}, {}{}), batch {}, {} epochs",
               progress_label, shape.kind->name(), shape.outputs, train_split.examples(), shape.input_dim,
               device.str(), device::precision_name(training.bank.values().scalar_type()),
               data.train_x.held_on() != device ? ", activations in host memory" : "", options.batch_size, options.epochs);
  ThreadCountGuard step_threads(device.is_cpu() ? threads_for_steps(shape, options.batch_size) : at::get_num_threads());
  ProgressBar bar(progress_label, options.epochs, "epochs");
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    EpochBatches batches(shape, options.seed, epoch, train_split.examples(), options.batch_size, device);
    at::Tensor train_loss = train_epoch(training, data, batches, options.lr);
    double val_accuracy = record_epoch(training, data, file.split(activations::Split::kVal).labels, train_loss,
                                       options.batch_size, epoch);
    bar.update(epoch + 1, fmt::format("val accuracy {:.4f} (best {:.4f})", val_accuracy, training.history.best_val_accuracy));
  }
  bar.finish(fmt::format("best val accuracy {:.4f}", training.history.best_val_accuracy));
}

// The kind's own solver (ProbeKind::fit) on the whole train split in double precision, recorded as epoch 1.
solvers::ProblemOutcome fit_by_solver(ProbeTraining& training, const activations::ActivationFile& file,
                                      const SplitTensors& data, const MulticlassTrainingOptions& options,
                                      const std::string& progress_label) {
  const ProbeShape& shape = training.bank.shape();
  const auto& train_split = file.split(activations::Split::kTrain);
  at::Device device = data.train_y.device();
  spdlog::info("{}: fitting a {} probe over {} classes on {} examples x {} ({}, float32 products, float64 solver, C {})", progress_label,
               shape.kind->name(), shape.outputs, train_split.examples(), shape.input_dim, device.str(), options.C);
  FitData fit;
  fit.inputs = SplitActivations(train_split, at::TensorOptions().device(device).dtype(at::kFloat), true).all();
  fit.targets = data.train_y;
  fit.C = options.C;
  fit.solver = options.solver;
  solvers::ProblemOutcome outcome = shape.kind->fit(training.bank, fit).at(0);
  int64_t classes = shape.outputs;
  at::Tensor train_logits = training.bank.forward(data.train_x.all()).view({-1, classes}).to(at::kFloat);
  at::Tensor train_loss = cross_entropy(train_logits, data.train_y).first.mean();
  double val_accuracy = record_epoch(training, data, file.split(activations::Split::kVal).labels, train_loss,
                                     options.batch_size, 0);
  spdlog::log(outcome.converged ? spdlog::level::info : spdlog::level::warn,
      "{}: the fit {} after {} L-BFGS iterations ({}, gradient at {:.1e} of its start); val accuracy {:.4f}",
      progress_label, outcome.converged ? "converged" : "stopped", outcome.iterations, outcome.stop_reason,
      outcome.relative_gradient, val_accuracy);
  return outcome;
}

}  // namespace

MulticlassTrainingResult train_multiclass_probe(const activations::ActivationFile& file,
                                                const MulticlassTrainingOptions& options, at::Device device,
                                                at::ScalarType dtype, const std::string& progress_label) {
  auto started = std::chrono::steady_clock::now();
  check_training_options(options);
  if (options.kind->reads_every_token()) {
    fail_usage("{} probes train one-vs-rest: use train_binary_probes --model-type {}", options.kind->name(),
               options.kind->name());
  }
  check_rows(file, *options.kind);
  check_classes(file);
  const auto& names = file.attributes.label_names;
  ProbeShape shape = probe_shape(options, file.attributes.hidden_size, static_cast<int64_t>(names.size()));
  check_bank_memory(shape, 1, device, dtype);
  at::TensorOptions tensor_options = at::TensorOptions().device(device).dtype(dtype);
  SplitTensors data = split_tensors(file, tensor_options, options.pin_activations);

  ProbeBank bank(shape, 1, tensor_options);
  // Coordinate label_names.size(): one that no binary probe's label index uses.
  bank.initialize_probe(0, stream_key(options.seed, Stream::kInitialization, static_cast<uint64_t>(names.size())));
  AdamW optimizer(bank.values(), AdamW::Options{options.weight_decay});
  at::Tensor best_values = bank.values().clone();
  ProbeTraining training{std::move(bank), std::move(optimizer), {}, std::move(best_values)};
  std::optional<solvers::ProblemOutcome> solver;
  if (shape.kind->fits_directly()) {
    solver = fit_by_solver(training, file, data, options, progress_label);
  } else {
    train_by_steps(training, file, data, options, progress_label);
  }

  ProbeBank best(shape, 1, tensor_options);
  best.values().copy_(training.best_values);
  MulticlassTrainingResult result{std::move(training.bank), std::move(best), names, training.history, {}, 0.0, {}, {},
                                  0.0, solver};
  evaluate_final(result, data, file.split(activations::Split::kTest));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::debug("{}: test accuracy {:.4f}, macro F1 {:.4f}", progress_label, result.test.accuracy, result.test.f1_macro);
  return result;
}

Json multiclass_metrics_json(const MulticlassTrainingResult& result) {
  const metrics::MulticlassMetrics& m = result.test;
  Json per_class = Json::object();
  std::vector<std::string> labels;
  for (const metrics::ClassMetrics& c : m.per_class) {
    const std::string& name = result.class_names.at(static_cast<size_t>(c.label));
    per_class[name] = {{"precision", c.precision}, {"recall", c.recall}, {"f1", c.f1}, {"support", c.support}};
    labels.push_back(name);
  }
  return {{"accuracy", m.accuracy},
          {"precision_macro", m.precision_macro},
          {"recall_macro", m.recall_macro},
          {"f1_macro", m.f1_macro},
          {"precision_micro", m.precision_micro},
          {"recall_micro", m.recall_micro},
          {"f1_micro", m.f1_micro},
          {"top_3_accuracy", m.top_k_accuracy},
          {"per_class", per_class},
          {"confusion_matrix", m.confusion},
          {"confusion_matrix_labels", labels},
          {"test_loss", result.test_loss},
          {"evaluated_weights", "final_epoch"}};
}

Json run_multiclass_training(const MulticlassRunOptions& options) {
  check_training_options(options.training);
  device::ComputeTarget target = select_training_compute(options.device, options.dtype);
  refuse_inputs_inside(options.output_dir, {options.activations});  // before the file is read
  if (is_directory(options.activations)) {
    fail_usage("--activations {}: a directory; train_probes trains on one layer's file, as "
               "{}/layer_{{L}}_activations.h5 (train_binary_probes takes a directory)",
               options.activations, options.activations);
  }
  activations::ActivationFile file = activations::read_activation_file(options.activations);
  StagedDirectory output(options.output_dir, options.overwrite, {options.activations});
  const std::string& directory = output.path();
  std::string progress_label = fmt::format("layer {}", file.attributes.layer);
  MulticlassTrainingResult result =
      train_multiclass_probe(file, options.training, target.device, target.dtype, progress_label);

  std::map<std::string, std::string> metadata = model_config_metadata(result.final_probe.shape(), false);
  metadata["layer"] = std::to_string(file.attributes.layer);
  metadata["label_names"] = dump_json(result.class_names);
  std::map<std::string, std::string> best_metadata = metadata;
  auto best = static_cast<size_t>(result.history.best_epoch - 1);
  best_metadata["epoch"] = std::to_string(result.history.best_epoch);
  best_metadata["val_accuracy"] = fmt::format("{}", result.history.best_val_accuracy);
  best_metadata["val_loss"] = fmt::format("{}", result.history.val_loss.at(best));
  metadata["test_accuracy"] = fmt::format("{}", result.test.accuracy);
  metadata["test_f1_macro"] = fmt::format("{}", result.test.f1_macro);
  save_probe(directory + "/" + kMulticlassProbeFile, result.best_probe, 0, best_metadata);
  save_probe(directory + "/final_probe.safetensors", result.final_probe, 0, metadata);
  write_logits_check(directory + "/logits_check.safetensors", result.check_inputs, result.check_logits,
                     result.class_names);
  write_json_file(directory + "/test_metrics.json", multiclass_metrics_json(result));
  const MulticlassHistory& h = result.history;
  save_multiclass_index(directory, result.best_probe.shape(), result.best_probe.values().scalar_type(), result.class_names,
                        h.best_epoch, file.attributes, options.activations);
  Json history = {{"train_loss", h.train_loss},
                  {"val_loss", h.val_loss},
                  {"val_accuracy", h.val_accuracy},
                  {"best_epoch", h.best_epoch},
                  {"best_val_accuracy", h.best_val_accuracy}};
  if (result.solver) history["solver"] = solvers::outcome_json(*result.solver);
  write_json_file(directory + "/training_history.json", history);
  output.commit();
  spdlog::info("test accuracy {:.4f}, macro F1 {:.4f}, micro F1 {:.4f}, top-3 accuracy {:.4f} ({:.1f} s) -> {}",
               result.test.accuracy, result.test.f1_macro, result.test.f1_micro, result.test.top_k_accuracy,
               result.seconds, options.output_dir);
  return {{"output_dir", options.output_dir},
          {"device", target.device.str()},
          {"dtype", device::precision_name(target.dtype)},
          {"layer", file.attributes.layer},
          {"classes", result.class_names.size()},
          {"best_epoch", h.best_epoch},
          {"best_val_accuracy", h.best_val_accuracy},
          {"test_accuracy", result.test.accuracy},
          {"test_f1_macro", result.test.f1_macro},
          {"test_f1_micro", result.test.f1_micro},
          {"test_top_3_accuracy", result.test.top_k_accuracy},
          {"seconds", result.seconds}};
}

}  // namespace probekit::probes
