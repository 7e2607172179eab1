#include "capture/memory_capture.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "capture/batch_runner.h"
#include "capture/plan.h"
#include "common/error.h"
#include "common/progress.h"
#include "device/torch/transfers.h"
#include "readout/prompts.h"
#include "sites/layers.h"

namespace probekit::capture {

namespace {


// The plan of texts given in memory: their prompts built as capture_activations builds them, in the texts' order.
CapturePlan plan_texts(const loading::SharedModel& model, const std::vector<std::string>& texts,
                       const CaptureOptions& options, CapturedRows& out) {
  if (texts.empty()) fail_input("no texts to capture");
  CapturePlan plan;
  plan.model = model.source;
  plan.layers = out.layers = parse_layers(options.layers, plan.config().num_layers);
  plan_site(options, plan);
  out.layers = plan.layers;
  plan.steering = steering::resolve(options.steering, plan.config(), plan.saes);
  readout::PromptBuilder builder(*model.tokenizer, options.prompt_suffix.value_or(activations::kDefaultPromptSuffix),
                                 {options.max_length, fmt::format("--max-length {} tokens", options.max_length)});
  plan.leading_specials = builder.leading_specials();
  std::vector<readout::Prompt> prompts = builder.build(texts);
  builder.warn_if_cut(prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      model.model->check_inputs(prompts[i].ids);
    } catch (const std::exception&) {
      rethrow_with_context(plan.where(i));
    }
    out.truncated += prompts[i].cut > 0 ? 1 : 0;
    plan.lengths.push_back(static_cast<int64_t>(prompts[i].ids.size()));
    plan.ids.push_back(std::move(prompts[i].ids));
  }
  return plan;
}

// Every batch of the run, window after window as capture_activations cuts them, and for each the rows it fills:
// `targets` holds, batch after batch, the destination row of each of its rows.
struct BatchPlan {
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> targets;
};

BatchPlan plan_batches(const CapturePlan& plan, const Batching& batching, Position position,
                       const std::vector<int64_t>& offsets) {
  BatchPlan out;
  const auto size = static_cast<int64_t>(plan.lengths.size());
  for (int64_t begin = 0; begin < size; begin += batching.window) {
    for (auto& batch : plan_window_batches(plan.lengths, begin, std::min(size, begin + batching.window), batching)) {
      for (int64_t p : batch) {
        if (position != Position::kAll) {
          out.targets.push_back(p);
          continue;
        }
        for (int64_t row = offsets[static_cast<size_t>(p)]; row < offsets[static_cast<size_t>(p) + 1]; ++row) {
          out.targets.push_back(row);
        }
      }
      out.batches.push_back(std::move(batch));
    }
  }
  return out;
}

// Where the rows gather: one [rows, width] fp32 tensor per layer, on the model's GPU when all of them take at most a
// quarter of its free memory (they come down once, at the end), else on the host.
std::vector<at::Tensor> allocate_rows(const CapturePlan& plan, int64_t rows, const device::ComputeTarget& target) {
  const auto bytes = static_cast<uint64_t>(rows * plan.width * 4) * plan.layers.size();
  const bool on_device = target.is_gpu() && bytes <= target.memory().free_bytes / 4;
  std::vector<at::Tensor> out;
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    out.push_back(at::empty({rows, plan.width}, at::TensorOptions().dtype(at::kFloat).device(
                                                    on_device ? target.device : at::Device(at::kCPU))));
  }
  return out;
}

// A batch's row sums [rows, layers] on their way to the host: NaN or Inf in a row makes its sum so.
struct PendingCheck {
  std::unique_ptr<device::HostCopy> sums;
  const std::vector<int64_t>* batch = nullptr;
};

// Refuses the first non-finite row of a finished batch, naming its text and layer as capture_activations does.
void check_batch(const PendingCheck& pending, const CapturePlan& plan, Position position) {
  const at::Tensor& sums = pending.sums->wait();
  const float* data = sums.data_ptr<float>();
  const auto layer_count = static_cast<int64_t>(plan.layers.size());
  const float* bad = std::find_if(data, data + sums.numel(), [](float x) { return !std::isfinite(x); });
  if (bad == data + sums.numel()) return;
  int64_t row = (bad - data) / layer_count, first_row = 0;
  for (int64_t p : *pending.batch) {
    first_row += plan.rows_of(static_cast<size_t>(p), position);
    if (row < first_row) {
      fail_input("{}: {}", plan.where(static_cast<size_t>(p)),
                 readout::non_finite_message(fmt::format("the activations of layer {} are",
                                                         plan.layers[static_cast<size_t>((bad - data) % layer_count)])));
    }
  }
}

// The devices a batch runs on, for the out-of-memory retry: the model's placement's first replica.
device::OutOfMemoryRetry retry_for(const loading::SharedModel& model) {
  std::vector<device::DeviceChoice> devices;
  for (size_t index : model.placement.replicas.front()) devices.push_back(model.targets[index].choice);
  return {*model.targets.front().device_runtime, std::move(devices)};
}

std::vector<at::Device> devices_of(const loading::SharedModel& model) {
  std::vector<at::Device> devices;
  for (size_t index : model.placement.replicas.front()) {
    if (devices.empty() || devices.back() != model.targets[index].device) devices.push_back(model.targets[index].device);
  }
  return devices;
}

// Runs every batch, each one's rows copied into their destination rows; on a GPU one batch stays queued ahead while
// the one before is checked, so the device never waits for the host (as capture_activations keeps it fed).
void run_batches(const BatchRunner& runner, device::OutOfMemoryRetry& retry, const CapturePlan& plan,
                 const BatchPlan& batches, Position position, std::vector<at::Tensor>& rows) {
  const at::Tensor destination = device::to_device(at::tensor(batches.targets, at::kLong), rows.front().device());
  ProgressBar progress("capture", static_cast<int64_t>(plan.lengths.size()), "examples");
  PendingCheck previous;
  int64_t done = 0, first = 0;
  for (const std::vector<int64_t>& batch : batches.batches) {
    at::Tensor values = runner.run(batch, plan, retry);  // [batch rows, layers, width]
    const at::Tensor into = destination.narrow(0, first, values.size(0));
    for (size_t l = 0; l < rows.size(); ++l) {
      rows[l].index_copy_(0, into, values.select(1, static_cast<int64_t>(l)).to(rows[l].device()));
    }
    first += values.size(0);
    PendingCheck pending{std::make_unique<device::HostCopy>(values.sum(2)), &batch};
    if (previous.sums) check_batch(previous, plan, position);
    previous = std::move(pending);
    progress.update(done += static_cast<int64_t>(batch.size()));
  }
  check_batch(previous, plan, position);
  progress.finish();
}

}  // namespace

CapturedRows capture_rows(const loading::SharedModel& model, const std::vector<std::string>& texts,
                          const CaptureOptions& options) {
  check_options(options);  // a batch size past kMaxBatchSize would overflow the batches' token budget
  CapturedRows out;
  const CapturePlan plan = plan_texts(model, texts, options, out);
  if (options.position == Position::kAll) {
    out.offsets.push_back(0);
    for (int64_t length : plan.lengths) out.offsets.push_back(out.offsets.back() + length);
  }
  const int64_t row_count = out.offsets.empty() ? static_cast<int64_t>(texts.size()) : out.offsets.back();
  const device::ComputeTarget& target = model.targets.front();
  check_cpu_attention_memory(plan, target);
  std::vector<at::Tensor> rows = allocate_rows(plan, row_count, target);
  const model::StreamWrites writes = steering::place(plan.steering, *model.model);
  readout::Request request{plan.site, options.position, plan.layers, plan.leading_specials};
  if (!writes.empty()) request.writes = &writes;
  const std::unique_ptr<DeviceSae> sae = place_sae(plan, model.model->device());
  if (sae) request.latents = &sae->reading;
  const int64_t first_device_weights =
      model.placement.weight_bytes.empty() ? model.model->weight_bytes() : model.placement.weight_bytes.front();
  const Batching batching = choose_batching(options, *model.model, request, target, plan, first_device_weights, 1);
  const BatchPlan batches = plan_batches(plan, batching, options.position, out.offsets);
  BatchRunner runner(*model.model, devices_of(model), request, options.simulate_out_of_memory_above);
  device::OutOfMemoryRetry retry = retry_for(model);
  run_batches(runner, retry, plan, batches, options.position, rows);
  // Every layer's copy is queued before the first wait, into page-locked memory (which LibTorch keeps for the
  // next call): the rows come down at the link's full rate, with no page faults on fresh host memory.
  std::vector<std::unique_ptr<device::HostCopy>> copies;
  for (const at::Tensor& layer : rows) copies.push_back(std::make_unique<device::HostCopy>(layer, nullptr));
  for (size_t l = 0; l < rows.size(); ++l) rows[l] = copies[l]->wait();
  out.rows = std::move(rows);
  return out;
}

}  // namespace probekit::capture
