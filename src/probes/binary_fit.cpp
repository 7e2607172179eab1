// Fitting a bank of one-vs-rest probes with their kind's own solver (ProbeKind::fit): the whole train split at
// once, the solver in double precision whatever the training dtype (its tolerance is tighter than float32 can
// hold) and its products over the file's float32 activations in float32, held on the training device
// (--no-pin-activations cannot apply: every solver step reads every row). No epochs, dropout or early stopping: the fitted weights are the
// ones saved and the final ones, and the history holds one entry (epoch 1) with their losses and validation
// figures, so the files and reports read them as any probe's.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.h"
#include "probes/binary_paths.h"
#include "probes/probe_files.h"

namespace probekit::probes {

namespace {

// Writes each probe's history of one entry and its solver's outcome; warns about a fit that did not converge.
void record_fit(const ProbeBank& bank, const BinaryInputs& in, const FitData& data, const at::Tensor& label_indices,
                const std::vector<solvers::ProblemOutcome>& outcomes, std::vector<TrainedLabel>& trained) {
  const auto k = static_cast<int64_t>(trained.size());
  const auto& val_split = in.file.split(activations::Split::kVal);
  at::Tensor pos_weight = data.pos_weight.to(at::kFloat);
  at::Tensor train_logits = bank.forward(data.inputs.to(bank.values().scalar_type())).view({-1, k}).to(at::kFloat);
  at::Tensor train_loss = bce_with_logits(train_logits, data.targets.to(at::kFloat), pos_weight).first.mean(0);
  at::Tensor val_logits = in.val_x.logits(bank).view({-1, k}).to(at::kFloat);
  at::Tensor val_loss = batch_mean(bce_with_logits(val_logits, binary_targets(val_split, label_indices), pos_weight).first,
                                   in.options.batch_size);
  at::Tensor losses = at::stack({train_loss, val_loss}).to(at::kCPU).to(at::kDouble);
  at::Tensor val_host = val_logits.to(at::kCPU);
  for (int64_t p = 0; p < k; ++p) {
    TrainedLabel& t = trained[p];
    double train = losses[0][p].item<double>();
    if (!std::isfinite(train)) {
      fail_input("the {} fit of '{}' gave a training loss of {}; nothing was saved. Check the activations for extreme "
                 "values",
                 in.shape.kind->name(), t.label, train);
    }
    std::vector<int> truth = column_labels(val_split, t.label_index);
    std::vector<double> scores = column_scores(val_host, p);
    LabelHistory& h = t.history;
    h.train_loss = {train};
    h.val_loss = {losses[1][p].item<double>()};
    h.val_auc = {metrics::roc_auc(truth, scores)};
    h.val_accuracy = {metrics::metrics_at(truth, scores, 0.0).accuracy};
    h.best_epoch = 1;
    h.best_val_auc = h.val_auc.front();
    t.solver = outcomes.at(static_cast<size_t>(p));
    t.features = in.shape.kind->fitted_features(bank, p);
    if (!t.solver->converged) {
      spdlog::warn("'{}': the {} fit stopped after {} iterations ({}) with its gradient at {:.1e} of its start; its "
                   "weights may be short of the optimum",
                   t.label, in.shape.kind->name(), t.solver->iterations, t.solver->stop_reason,
                   t.solver->relative_gradient);
    }
  }
}

}  // namespace

TrainedWeights fit_by_solver(const BinaryInputs& in, std::vector<TrainedLabel>& trained) {
  auto started = std::chrono::steady_clock::now();
  const auto& train_split = in.file.split(activations::Split::kTrain);
  const auto k = static_cast<int64_t>(trained.size());
  at::Device device = in.tensor_options.device();
  std::vector<int64_t> indices;
  std::vector<double> pos_weights;
  for (const TrainedLabel& t : trained) {
    indices.push_back(t.label_index);
    pos_weights.push_back(t.pos_weight);
  }
  at::Tensor label_indices = at::tensor(indices, at::kLong).to(device);
  FitData data;
  data.inputs = SplitActivations(train_split, in.tensor_options.dtype(at::kFloat), true).all();
  data.targets = binary_targets(train_split, label_indices).to(at::kDouble);
  data.pos_weight = at::tensor(pos_weights, at::kDouble).to(device);
  data.C = in.options.C;
  data.solver = in.options.solver;
  spdlog::info("{}: fitting {} {} probes on {} examples x {} ({}, float32 products, float64 solver, C {})", in.progress_label, k,
               in.shape.kind->name(), train_split.examples(), in.shape.input_dim, device.str(), data.C);

  ProbeBank bank(in.shape, k, in.tensor_options);
  std::vector<solvers::ProblemOutcome> outcomes = in.shape.kind->fit(bank, data);
  record_fit(bank, in, data, label_indices, outcomes, trained);
  int64_t most = 0, converged = 0;
  for (const solvers::ProblemOutcome& o : outcomes) {
    most = std::max(most, o.iterations);
    converged += o.converged ? 1 : 0;
  }
  spdlog::info("{}: fitted in {:.1f} s, {}/{} converged, at most {} L-BFGS iterations", in.progress_label,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), converged, k, most);
  at::Tensor final_values = bank.values().clone();
  return {std::move(bank), std::move(final_values), 1};
}

}  // namespace probekit::probes
