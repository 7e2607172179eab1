#include "probes/training_data.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "probes/token_rows.h"

namespace probekit::probes {

device::ComputeTarget select_training_compute(const std::string& device_request, const std::string& dtype_request) {
  if (dtype_request == "fp16" || dtype_request == "float16") {
    fail_usage("--dtype fp16 cannot train probes (no loss scaling); use fp32 or bf16");
  }
  return device::select_compute(device_request, dtype_request == "auto" ? "fp32" : dtype_request);
}

ThreadCountGuard::ThreadCountGuard(int threads) : previous_(at::get_num_threads()) {
  if (threads != previous_) at::set_num_threads(threads);
}

ThreadCountGuard::~ThreadCountGuard() {
  if (at::get_num_threads() != previous_) at::set_num_threads(previous_);
}

int threads_for_steps(const ProbeShape& shape, int64_t batch_size) {
  // Below this many multiply-adds per step (forward and backward) one thread is faster: measured on 2 cores,
  // a linear probe over 45 classes (B 32, H 2560: 11 M) ran 3.5x faster on one thread than on two.
  constexpr double kParallelStepWork = 100e6;
  double parameters = 0.0;
  for (const ParameterSpec& spec : parameter_specs(shape)) parameters += static_cast<double>(spec.numel());
  return 3.0 * parameters * static_cast<double>(batch_size) < kParallelStepWork ? 1 : at::get_num_threads();
}

void check_rows(const activations::ActivationFile& file, const ProbeKind& kind) {
  if (file.attributes.holds_expert_choices()) {
    fail_input("{}: the file holds the experts a router chose (site \"experts\"), not activations; probes train on "
               "the router's logits (capture with --site router)",
               file.path);
  }
  for (activations::Split split : activations::kSplits) {
    const bool per_token = !file.split(split).offsets.empty();
    if (per_token && !kind.reads_every_token()) {
      fail_input("{}: group '{}' holds per-token activations (position \"{}\"); {} probes train on one row per "
                 "example, captured with position \"last\" (train_binary_probes pools this file's tokens with --pool "
                 "last|mean, or trains an every-token kind such as --model-type attention on it)",
                 file.path, activations::split_name(split), position_name(file.attributes.recipe.position), kind.name());
    }
    if (!per_token && kind.reads_every_token()) {
      fail_input("{}: group '{}' holds one row per example (position \"{}\"); {} probes read every token of a "
                 "text: capture with --position all",
                 file.path, activations::split_name(split), position_name(file.attributes.recipe.position), kind.name());
    }
  }
}

int64_t leading_specials(const activations::ActivationFile& file) {
  const activations::ReadoutRecipe& recipe = file.attributes.recipe;
  // A conversation's rows are its masked tokens, none of them the template's BOS.
  if (recipe.mask) return 0;
  if (recipe.leading_specials) return *recipe.leading_specials;
  // Files made before the capture recorded it: a first token every text shares.
  std::vector<const std::vector<int64_t>*> ids, offsets;
  for (activations::Split split : activations::kSplits) {
    ids.push_back(&file.split(split).token_ids);
    offsets.push_back(&file.split(split).offsets);
  }
  return leading_specials_of(ids, offsets);
}

namespace {

// One split's texts as one row each: the last token, or the mean of the tokens after `skip` (at least the last).
void pool_split(activations::SplitData& split, bool mean, int64_t skip, const std::string& where) {
  std::vector<float> pooled(static_cast<size_t>(split.examples() * split.hidden), 0.0f);
  for (int64_t e = 0; e < split.examples(); ++e) {
    const int64_t end = split.offsets[e + 1];
    if (end <= split.offsets[e]) fail_input("{}: text {} holds no token row (offsets {} to {})", where, e, split.offsets[e], end);
    const int64_t first = mean ? first_read_row(split.offsets[e], end, skip) : end - 1;
    float* out = pooled.data() + e * split.hidden;
    for (int64_t r = first; r < end; ++r) {
      const float* row = split.activations.data() + r * split.hidden;
      for (int64_t j = 0; j < split.hidden; ++j) out[j] += row[j];
    }
    for (int64_t j = 0; j < split.hidden; ++j) out[j] /= static_cast<float>(end - first);
  }
  split.activations = std::move(pooled);
  split.rows = split.examples();
  split.offsets.clear();
  split.token_ids.clear();
}

}  // namespace

activations::ActivationFile pooled_rows(activations::ActivationFile file, Position position) {
  const int64_t skip = leading_specials(file);
  for (activations::Split name : activations::kSplits) {
    pool_split(file.split(name), position == Position::kMean, skip,
               fmt::format("{} group '{}'", file.path, activations::split_name(name)));
  }
  file.attributes.recipe.position = position;
  return file;
}

activations::ActivationFile rows_for_kind(activations::ActivationFile file, const TrainingOptions& training) {
  if (training.pool.empty() || training.kind->reads_every_token()) return file;
  if (file.split(activations::Split::kTrain).offsets.empty()) {
    fail_usage("--pool {}: {} holds one row per text already (position \"{}\"); --pool pools a --position all capture's "
               "tokens", training.pool, file.path, position_name(file.attributes.recipe.position));
  }
  return pooled_rows(std::move(file), parse_position(training.pool));
}

std::vector<int64_t> select_labels(const std::vector<std::string>& names, const std::vector<std::string>& subset) {
  for (const std::string& wanted : subset) {
    if (std::find(names.begin(), names.end(), wanted) == names.end()) {
      fail_usage("--labels: unknown label '{}' (the file's labels are: {})", wanted, fmt::join(names, ", "));
    }
  }
  std::vector<int64_t> indices;
  for (size_t i = 0; i < names.size(); ++i) {
    if (subset.empty() || std::find(subset.begin(), subset.end(), names[i]) != subset.end()) {
      indices.push_back(static_cast<int64_t>(i));
    }
  }
  return indices;
}

namespace {

// A split's activations [N, H] as a new tensor with `options` (device and dtype).
at::Tensor activation_tensor(const activations::SplitData& split, at::TensorOptions options) {
  at::Tensor host = at::from_blob(const_cast<float*>(split.activations.data()), {split.rows, split.hidden}, at::kFloat);
  return host.to(options, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

SplitActivations::SplitActivations(const activations::SplitData& split, at::TensorOptions options, bool pinned)
    : values_(activation_tensor(split, pinned ? options : options.device(at::kCPU))), device_(options.device()) {}

at::Tensor SplitActivations::rows(const at::Tensor& rows) const {
  if (values_.device() == device_) return values_.index_select(0, rows);
  return values_.index_select(0, rows.to(values_.device())).to(device_);
}

at::Tensor SplitActivations::all() const { return values_.to(device_); }

TrainingSplit::TrainingSplit(const activations::SplitData& split, const ProbeShape& shape, at::TensorOptions options,
                             bool pinned)
    : x_(split, options, pinned), examples_(split.examples()), dtype_(options.dtype().toScalarType()) {
  if (shape.kind->reads_every_token()) layout_ = token_layout(split.offsets, shape);
}

at::Tensor TrainingSplit::logits(const ProbeBank& bank) const {
  if (!layout_) return bank.forward(x_.all());
  return token_logits(bank, x_.all(), *layout_);
}

std::optional<TokenEpoch> TrainingSplit::token_epoch(const EpochBatches& batches) const {
  if (!layout_) return std::nullopt;
  return TokenEpoch(*layout_, batches.order(), batches.batch_size(), x_.device(), dtype_);
}

TrainActivations TrainingSplit::forward_train(const ProbeBank& bank, const EpochBatches& batches,
                                              const std::optional<TokenEpoch>& tokens, int64_t step) const {
  if (!tokens) return bank.forward_train(x_.rows(batches.rows(step)), batches.keep(step));
  return bank.shape().kind->forward_tokens(bank, tokens->batch(step, [this](const at::Tensor& rows) {
    return x_.rows(rows);
  }));
}

at::Tensor TrainingSplit::first_inputs(int64_t n, std::vector<int64_t>& offsets) const {
  n = std::min(n, examples_);
  offsets.clear();
  at::Tensor all = x_.all();
  if (!layout_) return all.narrow(0, 0, n).to(at::kFloat).to(at::kCPU);
  std::vector<at::Tensor> rows;
  offsets.push_back(0);
  for (int64_t e = 0; e < n; ++e) {
    rows.push_back(all.narrow(0, layout_->first[e], layout_->length[e]));
    offsets.push_back(offsets.back() + layout_->length[e]);
  }
  return at::cat(rows).to(at::kFloat).to(at::kCPU);
}

at::Tensor label_tensor(const activations::SplitData& split, at::Device device) {
  at::Tensor host = at::from_blob(const_cast<int64_t*>(split.labels.data()), {split.examples()}, at::kLong);
  return host.to(device, at::kLong, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor batch_mean(const at::Tensor& losses, int64_t batch_size) {
  int64_t rows = losses.size(0);
  int64_t full = rows / batch_size, rest = rows - full * batch_size;
  std::vector<int64_t> full_shape = {full, batch_size};
  full_shape.insert(full_shape.end(), losses.sizes().begin() + 1, losses.sizes().end());
  at::Tensor sum = losses.narrow(0, 0, full * batch_size).reshape(full_shape).mean(1).sum(0);
  if (rest > 0) sum = sum + losses.narrow(0, full * batch_size, rest).mean(0);
  return sum / static_cast<double>(full + (rest > 0 ? 1 : 0));
}

}  // namespace probekit::probes
