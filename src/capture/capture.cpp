#include "capture/capture.h"

#include <ATen/record_function.h>
#include <c10/core/DeviceGuard.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "capture/batching.h"
#include "capture/outputs.h"
#include "capture/window_queue.h"
#include "common/background_worker.h"
#include "common/error.h"
#include "common/files.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "device/torch/gpu_utils.h"
#include "device/torch/transfers.h"
#include "hub/resolve.h"
#include "model/placement.h"
#include "readout/prompts.h"
#include "readout/readout.h"

namespace probekit::capture {

namespace {

using activations::Split;
using readout::Position;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Everything decided before a model is loaded: this shard's examples in run order and their prompts.
struct CapturePlan {
  std::string model_dir;
  std::string model_name, model_revision;  // as results record them (see hub::ResolvedModel)
  data::Dataset dataset;
  std::vector<RunItem> run;
  std::vector<readout::Sequence> ids;  // per run position
  std::vector<int64_t> lengths;
  model::ModelConfig config;
  std::vector<int64_t> layers;
  int64_t width = 0;  // values per row at the site (readout::site_width)
  int64_t leading_specials = 0;
};

// The run order and each example's split and row, for the run positions [begin, end) of this shard.
std::vector<RunItem> order_examples(const std::array<std::vector<int64_t>, 3>& splits, int64_t begin, int64_t end) {
  std::vector<RunItem> run;
  int64_t position = 0;
  std::array<int64_t, 3> rows{};
  for (Split split : activations::kSplits) {
    for (int64_t example : splits[static_cast<size_t>(split)]) {
      if (position >= begin && position < end) run.push_back(RunItem{example, split, rows[static_cast<size_t>(split)]++});
      ++position;
    }
  }
  return run;
}

void check_options(const CaptureOptions& options) {
  if (options.shard_count < 1 || options.shard_index < 0 || options.shard_index >= options.shard_count) {
    fail_usage("--shard {}/{}: expected I/N with 0 <= I < N", options.shard_index, options.shard_count);
  }
  if (options.window <= 0) fail_usage("--window must be positive");
}

// A split with a share of the examples that comes out empty (too few examples per label) is an error: the
// trainers need examples in all three.
void check_splits_not_empty(const std::array<std::vector<int64_t>, 3>& splits, const data::SplitRatios& ratios,
                            const data::Dataset& dataset) {
  const double shares[] = {ratios.train, ratios.val, ratios.test};
  for (Split split : activations::kSplits) {
    auto index = static_cast<size_t>(split);
    if (shares[index] == 0 || !splits[index].empty()) continue;
    std::map<std::string, int64_t> counts;
    for (const data::Example& example : dataset.examples) ++counts[example.label];
    std::vector<std::string> described;
    for (const auto& [label, count] : counts) described.push_back(fmt::format("{} ({})", label, count));
    fail_input("{}: the {} split comes out empty: with --split {},{},{} each label needs more examples than these "
               "have: {}; add examples or change --split",
               dataset.path, activations::split_name(split), ratios.train, ratios.val, ratios.test,
               fmt::join(described, ", "));
  }
}

// Reads the dataset, splits it and picks this shard's examples in run order.
void plan_examples(const CaptureOptions& options, CapturePlan& plan, CaptureSummary& summary) {
  plan.dataset = data::read_dataset(options.dataset_path, options.dataset);
  summary.skipped = plan.dataset.skipped;
  summary.label_names = plan.dataset.label_names;
  std::vector<std::string> label_of_example;
  for (const data::Example& example : plan.dataset.examples) label_of_example.push_back(example.label);
  data::check_label_file_names(plan.dataset.label_names, options.dataset_path);
  std::set<int64_t> present(plan.dataset.labels.begin(), plan.dataset.labels.end());
  if (present.size() < plan.dataset.label_names.size()) {
    spdlog::info("{}: {} of the reference's {} cognitive actions occur; the files list all {} (label_names), indexed "
                 "as the reference indexes them",
                 options.dataset_path, present.size(), plan.dataset.label_names.size(), plan.dataset.label_names.size());
  }
  auto splits = data::stratified_split(label_of_example, options.split, options.seed);
  check_splits_not_empty(splits, options.split, plan.dataset);
  auto total = static_cast<int64_t>(plan.dataset.examples.size());
  int64_t begin = total * options.shard_index / options.shard_count;
  int64_t end = total * (options.shard_index + 1) / options.shard_count;
  plan.run = order_examples(splits, begin, end);
  if (plan.run.empty()) fail_input("shard {}/{} of {} examples is empty", options.shard_index, options.shard_count, total);
  for (const RunItem& item : plan.run) ++summary.split_sizes[static_cast<size_t>(item.split)];
  summary.examples = static_cast<int64_t>(plan.run.size());
}

// Tokenizes every prompt of the run (text + suffix, cut to --max-length).
void plan_prompts(const CaptureOptions& options, CapturePlan& plan, CaptureSummary& summary) {
  if (!is_regular_file(plan.model_dir + "/tokenizer.json")) fail("{}: no tokenizer.json", plan.model_dir);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(plan.model_dir);
  readout::PromptBuilder builder(tok, options.prompt_suffix,
                                 {options.max_length, fmt::format("--max-length {} tokens", options.max_length)});
  plan.leading_specials = builder.leading_specials();
  std::vector<std::string> texts;
  texts.reserve(plan.run.size());
  for (const RunItem& item : plan.run) texts.push_back(plan.dataset.examples[static_cast<size_t>(item.example)].text);
  std::vector<readout::Prompt> prompts = builder.build(texts);
  builder.warn_if_cut(prompts);
  for (readout::Prompt& prompt : prompts) {
    summary.truncated += prompt.cut > 0 ? 1 : 0;
    plan.lengths.push_back(static_cast<int64_t>(prompt.ids.size()));
    plan.ids.push_back(std::move(prompt.ids));
  }
}

// On the CPU attention holds every head's [T, T] scores in fp32 (scores, their softmax and a masked copy), which
// for a very long text exceeds the machine's memory: refused before the model loads, naming the text and the
// --max-length that fits. MPS, which shares the system's memory, is checked the same way. CUDA GPUs take the
// memory-efficient attention and retry out-of-memory batches in halves.
void check_cpu_attention_memory(const CapturePlan& plan, const device::ComputeTarget& target) {
  if (target.is_gpu()) return;
  auto longest = std::max_element(plan.lengths.begin(), plan.lengths.end());
  auto tokens = static_cast<double>(*longest);
  const double per_square_token = 3.0 * 4.0 * static_cast<double>(plan.config.num_heads);
  double needed = per_square_token * tokens * tokens;
  double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (memory <= 0 || needed < memory / 2) return;
  auto fits = static_cast<int64_t>(std::sqrt(memory / 4 / per_square_token));
  const RunItem& item = plan.run[static_cast<size_t>(longest - plan.lengths.begin())];
  fail_input("{}:{}: this text's prompt is {} tokens; attention over it needs about {:.0f} GB on the {}, more than "
             "half of its {:.0f} GB of memory: cut long texts with --max-length {} (or less)",
             plan.dataset.path, plan.dataset.examples[static_cast<size_t>(item.example)].line + 1, *longest,
             needed / 1e9, target.device.is_mps() ? "Mac (MPS shares the system's memory)" : "CPU", memory / 1e9, fits);
}

// Where the model goes on the devices of --devices (--placement): replicas, layers split over several, or
// replicas of a split model. One device holds one replica.
model::DevicePlan place_model(const CaptureOptions& options, const CapturePlan& plan,
                              const std::vector<device::ComputeTarget>& targets) {
  model::Placement placement = model::parse_placement(options.placement);
  if (targets.size() == 1 && placement != model::Placement::kLayers) {
    return model::DevicePlan{{std::vector<size_t>(static_cast<size_t>(plan.layers.back() + 1), 0)}, {}, "one device"};
  }
  model::LoadOptions load;
  load.last_layer = plan.layers.back();
  load.final_norm = false;
  load.dtype = targets.front().dtype;
  std::vector<int64_t> free_bytes;
  for (const device::ComputeTarget& t : targets) {
    auto free = static_cast<int64_t>(t.memory().free_bytes);  // 0 on the CPU and on MPS
    free_bytes.push_back(options.max_gpu_memory > 0 && free > 0 ? std::min(free, options.max_gpu_memory) : free);
  }
  model::DevicePlan devices = model::plan_devices(placement, free_bytes, model::model_bytes(plan.model_dir, load));
  spdlog::info("placement: {}", devices.description);
  return devices;
}

// One model per replica of the placement, loaded in parallel; a split replica's layers on their devices.
std::vector<std::unique_ptr<model::TransformerModel>> load_replicas(const CapturePlan& plan,
                                                                    const std::vector<device::ComputeTarget>& targets,
                                                                    const model::DevicePlan& placement) {
  std::vector<std::future<std::unique_ptr<model::TransformerModel>>> loading;
  for (const std::vector<size_t>& layer_devices : placement.replicas) {
    loading.push_back(std::async(std::launch::async, [&plan, &targets, &layer_devices] {
      model::LoadOptions load;
      load.last_layer = plan.layers.back();
      load.final_norm = false;
      load.device = targets[layer_devices.front()].device;
      load.dtype = targets[layer_devices.front()].dtype;
      if (layer_devices.back() != layer_devices.front()) {
        for (size_t index : layer_devices) load.layer_devices.push_back(targets[index].device);
      }
      return std::make_unique<model::TransformerModel>(model::TransformerModel::load(plan.model_dir, load));
    }));
  }
  std::vector<std::unique_ptr<model::TransformerModel>> replicas;
  for (auto& replica : loading) replicas.push_back(replica.get());
  // The weights were copied on each device's default stream; the workers compute on streams of their own.
  for (const device::ComputeTarget& t : targets) device::synchronize(t.device);
  for (const auto& ids : plan.ids) replicas.front()->check_inputs(ids);
  return replicas;
}

activations::FileAttributes file_attributes(const CaptureOptions& options, const CapturePlan& plan,
                                            const std::string& dtype) {
  activations::FileAttributes attributes;
  attributes.model_name = plan.model_name;
  attributes.model_revision = plan.model_revision;
  attributes.model_fingerprint = model::Checkpoint::open(plan.model_dir).fingerprint();
  attributes.layers = plan.layers;
  attributes.label_names = plan.dataset.label_names;
  // An experts row is k ids then k weights, which the file keeps as two [N, k] datasets.
  attributes.hidden_size = options.site == Site::kExperts ? plan.width / 2 : plan.width;
  attributes.site = site_name(options.site);
  attributes.position = readout::position_name(options.position);
  attributes.prompt_suffix = options.prompt_suffix;
  attributes.dtype = dtype;
  attributes.dataset = options.dataset_path;
  attributes.dataset_sha256 = sha256_file(options.dataset_path);
  attributes.tool_version = PROBEKIT_VERSION;
  attributes.split_ratios = fmt::format("{},{},{}", options.split.train, options.split.val, options.split.test);
  attributes.seed = static_cast<int64_t>(options.seed);
  attributes.max_length = options.max_length;
  attributes.max_examples = options.dataset.max_examples;
  attributes.text_field = options.dataset.text_field;
  attributes.label_field = plan.dataset.label_field;
  attributes.keep_fields = options.dataset.keep_fields;
  attributes.skip_invalid = options.dataset.skip_invalid;
  if (options.shard_count > 1) attributes.shard = fmt::format("{}/{}", options.shard_index, options.shard_count);
  return attributes;
}

std::array<activations::SplitLayout, 3> make_layouts(const CapturePlan& plan, Position position,
                                                     const std::vector<std::string>& keep_fields) {
  std::array<activations::SplitLayout, 3> layouts;
  for (auto& layout : layouts) {
    if (position == Position::kAll) layout.offsets.push_back(0);
    for (const std::string& field : keep_fields) layout.metadata[field];
  }
  for (size_t i = 0; i < plan.run.size(); ++i) {
    const data::Example& example = plan.dataset.examples[static_cast<size_t>(plan.run[i].example)];
    activations::SplitLayout& layout = layouts[static_cast<size_t>(plan.run[i].split)];
    layout.labels.push_back(plan.dataset.labels[static_cast<size_t>(plan.run[i].example)]);
    layout.example_index.push_back(example.line);
    for (size_t f = 0; f < keep_fields.size(); ++f) layout.metadata[keep_fields[f]].push_back(example.kept[f]);
    if (position == Position::kAll) {
      layout.offsets.push_back(layout.offsets.back() + plan.lengths[i]);
      layout.token_ids.insert(layout.token_ids.end(), plan.ids[i].begin(), plan.ids[i].end());
    }
  }
  return layouts;
}

// Peak bytes per token of one layer's activations on a GPU (CUDA, ROCm or MPS): residual, norms, qkv, attention
// scores, MLP, and with routed experts the token's k copies through its experts and their fp32 sum.
int64_t gpu_bytes_per_token(const model::ModelConfig& c, at::ScalarType dtype, int64_t longest, int64_t layer_count) {
  auto element = static_cast<int64_t>(c10::elementSize(dtype));
  const model::RoutedExpertsSpec& moe = c.routed_experts;
  return element * (6 * c.hidden_size + 2 * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim + 4 * c.intermediate_size +
                    c.num_heads * longest + moe.top_k * (2 * c.hidden_size + 3 * moe.intermediate_size)) +
         4 * (moe.experts + moe.top_k * c.hidden_size) + 12 * c.hidden_size * (layer_count + 1);
}

// `request`: what the run reads; `first_device_weights`: the bytes of weights on the model's first device (a
// split model holds part there); `replica_count`: the model copies that share the run.
Batching choose_batching(const CaptureOptions& options, const model::TransformerModel& model,
                         const readout::Request& request, const device::ComputeTarget& target, const CapturePlan& plan,
                         int64_t first_device_weights, size_t replica_count) {
  const model::ModelConfig& c = model.config();
  const auto layer_count = static_cast<int64_t>(plan.layers.size());
  Batching b;
  int64_t longest = *std::max_element(plan.lengths.begin(), plan.lengths.end());
  if (options.batch_size > 0) {
    b.max_examples = options.batch_size;
    b.token_budget = options.batch_size * longest;
  } else if (device::MemoryBudget memory = device::memory_budget(target.choice.backend, target.memory(),
                                                                  options.max_gpu_memory, first_device_weights);
             memory.bytes > 0) {
    auto usable = static_cast<int64_t>(memory.bytes / 2);
    b.token_budget = std::clamp<int64_t>(usable / gpu_bytes_per_token(c, target.dtype, longest, layer_count), longest, 32768);
    b.max_examples = 512;
    spdlog::info("batches of up to {} tokens, from half of the memory there is ({})", b.token_budget, memory.source);
  } else {
    b.token_budget = std::max<int64_t>(4096, longest);
    b.max_examples = 64;
  }
  // Packed batches of last or per-token rows compute and hold only their own tokens (mean and max pooling pad
  // each layer's values to pool them), so those batches fill the budget with real tokens: 14 batches for the
  // 4,500 benchmark texts where padded accounting cut 18 of ~23,700 tokens (1.4-1.6% more examples/s on an H200).
  // Not for replicas, which share the windows' batches: with three larger batches a window two H200s reached
  // 1.86-1.95x one GPU, against 1.94-1.98x with the smaller ones.
  b.packed = replica_count == 1 && (request.position == Position::kLast || request.position == Position::kAll) &&
             readout::packs_sequences(model, request);
  // Rows are buffered per window; per-token rows are large, so their windows are smaller.
  b.window = options.window;
  if (request.position == Position::kAll) {
    double mean_length = 0;
    for (int64_t length : plan.lengths) mean_length += static_cast<double>(length);
    mean_length /= static_cast<double>(plan.lengths.size());
    double row_bytes = 4.0 * static_cast<double>(plan.width * layer_count) * mean_length;
    b.window = std::clamp<int64_t>(static_cast<int64_t>((512.0 * (1 << 20)) / row_bytes), 1, options.window);
  }
  return b;
}

// Runs batches on one model replica through the readout; a batch that runs out of device memory is split in
// halves and retried (device::run_in_halves).
class BatchRunner {
 public:
  BatchRunner(const model::TransformerModel& model, std::vector<at::Device> devices, readout::Request request,
              int64_t simulate_out_of_memory_above)
      : model_(model), devices_(std::move(devices)), request_(std::move(request)),
        simulate_out_of_memory_above_(simulate_out_of_memory_above) {}

  /// The devices the model's layers are on, first to last.
  const std::vector<at::Device>& devices() const { return devices_; }
  const model::TransformerModel& model() const { return model_; }

  /// Positions a forward pass over `batch` computes: its tokens when packed, else the padded rectangle.
  int64_t computed_tokens(const std::vector<int64_t>& batch, const CapturePlan& plan) const {
    if (readout::packs_sequences(model_, request_)) {
      int64_t tokens = 0;
      for (int64_t p : batch) tokens += plan.lengths[static_cast<size_t>(p)];
      return tokens;
    }
    return static_cast<int64_t>(batch.size()) * plan.lengths[static_cast<size_t>(batch.front())];  // longest first
  }

  /// Rows of a batch of run positions [rows, layers, width] in fp32 on the device.
  at::Tensor run(const std::vector<int64_t>& batch, const CapturePlan& plan, device::OutOfMemoryRetry& retry) const {
    std::vector<at::Tensor> pieces;
    device::run_in_halves(
        batch,
        [&](const std::vector<int64_t>& part) {
          if (simulate_out_of_memory_above_ > 0 && static_cast<int64_t>(part.size()) > simulate_out_of_memory_above_) {
            throw std::runtime_error("CUDA out of memory (simulated for a test)");
          }
          pieces.push_back(readout::read_rows(model_, sequences_of(part, plan), request_));
        },
        retry);
    return pieces.size() == 1 ? pieces.front() : at::cat(pieces);
  }

  /// Runs `batch` through the first layer (in halves where it runs out of memory, as run() would), for the
  /// products' kernels at its size, and its first text through every requested layer, for the rest (a global
  /// attention layer's kernel is not a sliding one's; a split model's later devices), throws the values away and
  /// waits for the devices. CUDA loads a kernel at its first launch and cuBLAS picks an algorithm at each new
  /// product shape: 0.2-0.35 s a run before the first batch (measured), which the timed loop then does not pay
  /// and in which a replicated run's GPUs stood apart.
  void warm_up(const std::vector<int64_t>& batch, const CapturePlan& plan, device::OutOfMemoryRetry& retry) const {
    readout::Request first_layer = request_;
    first_layer.site = Site::kResidPost;  // every layer has it
    first_layer.layers = {0};
    device::run_in_halves(
        batch,
        [&](const std::vector<int64_t>& part) { readout::read_rows(model_, sequences_of(part, plan), first_layer); },
        retry);
    readout::read_rows(model_, {plan.ids[static_cast<size_t>(batch.front())]}, request_);
    for (const at::Device& device : devices_) device::synchronize(device);
  }

 private:
  // The token ids of run positions `part`.
  static std::vector<readout::Sequence> sequences_of(const std::vector<int64_t>& part, const CapturePlan& plan) {
    std::vector<readout::Sequence> sequences;
    sequences.reserve(part.size());
    for (int64_t p : part) sequences.push_back(plan.ids[static_cast<size_t>(p)]);
    return sequences;
  }

  const model::TransformerModel& model_;
  std::vector<at::Device> devices_;
  readout::Request request_;
  int64_t simulate_out_of_memory_above_;
};

// Copies a batch's rows [rows, layers, width] into the window's per-layer buffers; returns the batch's tokens.
int64_t store_rows(WindowRows& window, const std::vector<int64_t>& batch, const at::Tensor& result,
                   const CapturePlan& plan, Position position) {
  const int64_t width = plan.width;
  const float* data = result.data_ptr<float>();
  const auto layer_count = static_cast<int64_t>(plan.layers.size());
  int64_t result_row = 0, tokens = 0;
  for (int64_t p : batch) {
    int64_t count = position == Position::kAll ? plan.lengths[static_cast<size_t>(p)] : 1;
    int64_t target_row = window.row_start[static_cast<size_t>(p - window.begin)];
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t l = 0; l < layer_count; ++l) {
        std::memcpy(window.per_layer[static_cast<size_t>(l)].get() + (target_row + r) * width,
                    data + ((result_row + r) * layer_count + l) * width, static_cast<size_t>(width) * sizeof(float));
      }
    }
    result_row += count;
    tokens += plan.lengths[static_cast<size_t>(p)];
  }
  return tokens;
}

// NaN or infinite rows (NaN/Inf weights, a config value such as query_pre_attn_scalar: 0) stop the run at the
// first batch that shows them, naming the example and the layer, before anything is written. A plain loop rather
// than ATen's: it runs on the storing thread beside the worker's kernel launches, and ATen's OpenMP team would
// spin on every core.
void check_finite(const at::Tensor& rows, const std::vector<int64_t>& batch, const CapturePlan& plan, Position position) {
  const float* data = rows.data_ptr<float>();
  const float* end = data + rows.numel();
  const float* bad = std::find_if(data, end, [](float x) { return !std::isfinite(x); });
  if (bad == end) return;
  auto layer_count = static_cast<int64_t>(plan.layers.size());
  int64_t row = (bad - data) / (layer_count * plan.width), slot = (bad - data) / plan.width % layer_count;
  int64_t first_row = 0;
  for (int64_t p : batch) {
    int64_t count = position == Position::kAll ? plan.lengths[static_cast<size_t>(p)] : 1;
    if (row < first_row + count) {
      const data::Example& example = plan.dataset.examples[static_cast<size_t>(plan.run[static_cast<size_t>(p)].example)];
      fail_input("{}:{}: the activations of layer {} are not finite (NaN or Inf): the checkpoint's weights or its "
                 "config (a zero scale such as query_pre_attn_scalar: 0) produce them",
                 plan.dataset.path, example.line + 1, plan.layers[static_cast<size_t>(slot)]);
    }
    first_row += count;
  }
}

std::shared_ptr<WindowRows> make_window(const CapturePlan& plan, int64_t begin, int64_t end, Position position) {
  auto window = std::make_shared<WindowRows>();
  window->begin = begin;
  window->end = end;
  int64_t rows = 0;
  for (int64_t p = begin; p < end; ++p) {
    window->row_start.push_back(rows);
    rows += position == Position::kAll ? plan.lengths[static_cast<size_t>(p)] : 1;
  }
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    window->per_layer.emplace_back(new float[static_cast<size_t>(rows * plan.width)]);
  }
  return window;
}

// The window loop of a run: every worker (a replica, or a pipeline stage of a split one) takes the next batch,
// of the oldest window that has one left, or of the next window (batches fill disjoint rows); each finished
// window goes, in run order, to the background writer while later ones compute.
class WindowLoop {
 public:
  WindowLoop(const CaptureOptions& options, const CapturePlan& plan, const std::vector<device::ComputeTarget>& targets,
             std::vector<BatchRunner> runners, size_t replicas, CaptureSummary& summary)
      : options_(options), plan_(plan), targets_(targets), runners_(std::move(runners)), replicas_(replicas),
        summary_(summary) {}

  void run(std::vector<LayerOutput>& outputs, const std::array<activations::SplitLayout, 3>& layouts,
           const Batching& batching, int64_t start) {
    auto run_size = static_cast<int64_t>(plan_.run.size());
    BackgroundWorker writer(1, targets_.front().is_gpu());
    if (targets_.front().is_gpu()) {
      auto warm_up_start = Clock::now();
      reserve_row_buffers(batching);
      warm_up(plan_window_batches(plan_.lengths, start, std::min(start + batching.window, run_size), batching).front());
      summary_.warm_up_seconds = seconds_since(warm_up_start);
      spdlog::debug("devices warmed up on the first batch in {:.2f} s", summary_.warm_up_seconds);
    }
    ProgressBar progress("capture", run_size - start, "examples");
    RECORD_FUNCTION("capture loop", std::vector<c10::IValue>());  // where a profile's timed part begins
    start_ = Clock::now();
    // Two windows open at once, whatever the number of workers: a worker takes the next window's first batches
    // while the last batches of the window before are still being stored.
    WindowQueue queue(start, run_size, batching.window, 2, [&](int64_t begin, int64_t end) {
      auto batches = plan_window_batches(plan_.lengths, begin, end, batching);
      // The run's last batches in quarters when replicas share it (with_finer_tail); a single model, split or not,
      // keeps the batches of a one-device run.
      if (replicas_ > 1 && end == run_size) batches = with_finer_tail(std::move(batches), 2 * runners_.size(), 4);
      return WindowWork{make_window(plan_, begin, end, options_.position), std::move(batches)};
    });
    auto write = [&](std::shared_ptr<WindowRows> window) {
      writer.submit([&outputs, window, &layouts, this] {
        auto write_start = Clock::now();
        write_window(outputs, *window, plan_.run, layouts, options_.position, plan_.width);
        spdlog::debug("examples {}-{} written in {:.3f} s, {:.2f} s into the capture", window->begin, window->end,
                      seconds_since(write_start), seconds_since(start_));
      });
    };
    if (runners_.size() == 1) {
      work(0, queue, write, progress);
    } else {
      std::vector<std::future<void>> workers;
      for (size_t r = 0; r < runners_.size(); ++r) {
        workers.push_back(std::async(std::launch::async, [&, r] { work(r, queue, write, progress); }));
      }
      for (auto& worker : workers) worker.get();
    }
    writer.wait();
    for (LayerOutput& out : outputs) {
      if (out.writer) out.writer->finish();
    }
    summary_.capture_seconds = seconds_since(start_);
    summary_.out_of_memory_retries = retries_;
    progress.finish();
  }

 private:
  using Write = std::function<void(std::shared_ptr<WindowRows>)>;

  // One worker's loop: batches from the queue until none is left; a failure stops the others too. The worker
  // only queues batches: their rows are copied to the host behind each batch's kernels and checked and stored on
  // a thread of its own. Storing them here kept it from queueing the next batch while the GPU ran out of work
  // (the launch queue holds a fraction of a batch): up to 90 ms a batch with all 34 layers, 13% of the capture.
  // It keeps at most two batches on its devices: one that ran further ahead would hold batches at the end of the
  // run that other replicas could take (measured: one of two GPUs idle for the last 0.25 s of 2.5).
  void work(size_t runner, WindowQueue& queue, const Write& write, ProgressBar& progress) {
    device::WorkerStreams streams(runners_[runner].devices());
    device::OutOfMemoryRetry retry = out_of_memory_retry(runners_[runner]);
    BackgroundWorker storer(1, /*in_background=*/true);  // on the CPU too, where the tests reach it
    try {
      std::shared_ptr<const device::HostCopy> previous;
      while (std::optional<WindowQueue::Task> task = queue.next(/*wait=*/true)) {
        auto rows =
            std::make_shared<const device::HostCopy>(runners_[runner].run(*task->batch, plan_, retry), &row_buffers_);
        storer.submit([this, task = *task, rows, runner, &queue, &write, &progress] {
          try {
            store_batch(task, rows->wait(), runners_[runner], queue, write, progress);
          } catch (const std::exception&) {
            queue.abort();  // this batch's window never completes: free a worker waiting for it
            throw;
          }
        });
        if (previous) previous->wait();
        previous = rows;
      }
      storer.wait();
    } catch (const std::exception&) {
      queue.abort();
      throw;
    }
    retries_ += retry.retries;
  }

  // Pinned buffers for the rows of the largest batch, three per worker (two batches on its devices, one being
  // stored), unless a buffer would exceed 512 MB (per-token rows of long batches: those are made as needed).
  void reserve_row_buffers(const Batching& batching) {
    const int64_t rows = options_.position == Position::kAll ? batching.token_budget : batching.max_examples;
    const int64_t bytes = rows * static_cast<int64_t>(plan_.layers.size()) * plan_.width * int64_t{sizeof(float)};
    if (bytes <= (int64_t{512} << 20)) row_buffers_.reserve(bytes, 3 * static_cast<int>(runners_.size()));
  }

  // Warms each model copy up on the run's first batch (BatchRunner::warm_up), the copies at once.
  void warm_up(const std::vector<int64_t>& first_batch) {
    std::vector<std::future<void>> warming;
    std::set<const model::TransformerModel*> warmed;  // the pipeline stages of a split copy share it
    for (const BatchRunner& runner : runners_) {
      if (!warmed.insert(&runner.model()).second) continue;
      warming.push_back(std::async(std::launch::async, [this, &runner, &first_batch] {
        device::OutOfMemoryRetry retry = out_of_memory_retry(runner);
        runner.warm_up(first_batch, plan_, retry);
        retries_ += retry.retries;
      }));
    }
    for (auto& copy : warming) copy.get();
  }

  // The retry state of a runner: its devices, whose caches an out-of-memory batch clears before its halves run.
  device::OutOfMemoryRetry out_of_memory_retry(const BatchRunner& runner) const {
    std::vector<device::DeviceChoice> devices;
    for (const at::Device& device : runner.devices()) {
      auto target = std::find_if(targets_.begin(), targets_.end(),
                                 [&](const device::ComputeTarget& t) { return t.device == device; });
      devices.push_back(target->choice);
    }
    return {*targets_.front().device_runtime, std::move(devices)};
  }

  // Checks and stores one batch's rows (on the host), counts it and tells the queue.
  void store_batch(const WindowQueue::Task& task, const at::Tensor& rows, const BatchRunner& runner,
                   WindowQueue& queue, const Write& write, ProgressBar& progress) {
    const std::vector<int64_t>& batch = *task.batch;
    check_finite(rows, batch, plan_, options_.position);
    int64_t tokens = store_rows(*task.rows, batch, rows, plan_, options_.position);
    {
      std::lock_guard<std::mutex> lock(progress_mutex_);
      summary_.tokens += tokens;
      summary_.computed_tokens += runner.computed_tokens(batch, plan_);
      ++summary_.batches;
      summary_.processed += static_cast<int64_t>(batch.size());
      progress.update(summary_.processed,
                      fmt::format("{:.0f} tokens/s", static_cast<double>(summary_.tokens) / seconds_since(start_)));
    }
    queue.done(task, write);
  }

  const CaptureOptions& options_;
  const CapturePlan& plan_;
  const std::vector<device::ComputeTarget>& targets_;
  std::vector<BatchRunner> runners_;
  size_t replicas_;
  CaptureSummary& summary_;
  std::mutex progress_mutex_;
  std::atomic<int64_t> retries_{0};
  Clock::time_point start_;
  device::PinnedPool row_buffers_;  // the batches' rows on their way down from GPUs
};

}  // namespace

CaptureSummary run_capture(const CaptureOptions& options) {
  CaptureSummary summary;
  check_options(options);
  CapturePlan plan;
  plan_examples(options, plan, summary);
  hub::ResolvedModel model = hub::resolve_model(options.model_dir);
  plan.model_dir = model.dir;
  plan.model_name = model.name;
  plan.model_revision = model.revision;
  plan.config = model::load_config(plan.model_dir);
  plan.layers = summary.layers = parse_layers(options.layers, plan.config.num_layers);
  readout::check_site(options.site, options.position, plan.layers, plan.config);
  plan.width = readout::site_width(options.site, plan.config);

  auto load_start = Clock::now();
  plan_prompts(options, plan, summary);
  std::vector<device::ComputeTarget> targets;
  for (const std::string& name : options.devices.empty() ? std::vector<std::string>{options.device} : options.devices) {
    targets.push_back(device::select_compute(name, options.dtype));
    summary.device += (summary.device.empty() ? "" : ",") + targets.back().device.str();
  }
  summary.dtype = device::dtype_name(targets.front().dtype_choice.dtype);
  check_cpu_attention_memory(plan, targets.front());
  model::DevicePlan placement = place_model(options, plan, targets);
  std::vector<std::unique_ptr<model::TransformerModel>> replicas = load_replicas(plan, targets, placement);
  summary.load_seconds = seconds_since(load_start);
  spdlog::info("{}: {} ({} layers, hidden {}), capturing layers {} at {} ({}) in {:.1f} s", plan.model_dir,
               plan.config.text_model_type, plan.config.num_layers, plan.config.hidden_size, fmt::join(plan.layers, ", "),
               site_name(options.site), readout::position_name(options.position), summary.load_seconds);

  std::string dir = options.output_dir;
  if (options.shard_count > 1) dir += fmt::format("/shard_{}_of_{}", options.shard_index, options.shard_count);
  auto layouts = make_layouts(plan, options.position, options.dataset.keep_fields);
  int64_t first_device_weights =
      placement.weight_bytes.empty() ? replicas.front()->weight_bytes() : placement.weight_bytes.front();
  const readout::Request request{options.site, options.position, plan.layers, plan.leading_specials};
  Batching batching = choose_batching(options, *replicas.front(), request, targets.front(), plan, first_device_weights,
                                      replicas.size());
  std::vector<LayerOutput> outputs =
      open_outputs(options, dir, plan.layers, file_attributes(options, plan, summary.dtype), layouts, &batching);
  for (const LayerOutput& out : outputs) summary.files.push_back(out.path);

  auto run_size = static_cast<int64_t>(plan.run.size());
  int64_t start = run_size;
  for (const LayerOutput& out : outputs) {
    if (out.writer) start = std::min(start, out.writer->examples_done());
  }
  if (std::none_of(outputs.begin(), outputs.end(), [](const LayerOutput& o) { return o.writer.has_value(); })) {
    summary.already_complete = true;
    spdlog::info("all {} layer files are already complete", outputs.size());
    return summary;
  }
  if (start > 0 && start < run_size) spdlog::info("resuming after {} of {} examples", start, run_size);
  spdlog::debug("batching: windows of {} examples, {} {}tokens and {} examples per batch at most", batching.window,
                batching.token_budget, batching.packed ? "" : "padded ", batching.max_examples);
  std::vector<BatchRunner> runners;
  for (size_t r = 0; r < replicas.size(); ++r) {
    // A replica split into S stages runs S batches at once, each a stage further on: a pipeline.
    std::vector<at::Device> devices;
    for (size_t index : placement.replicas[r]) {
      if (devices.empty() || devices.back() != targets[index].device) devices.push_back(targets[index].device);
    }
    for (size_t stage = 0; stage < placement.stages(r); ++stage) {
      runners.emplace_back(*replicas[r], devices, request, options.simulate_out_of_memory_above);
    }
  }
  WindowLoop(options, plan, targets, std::move(runners), replicas.size(), summary).run(outputs, layouts, batching, start);
  return summary;
}

}  // namespace probekit::capture
