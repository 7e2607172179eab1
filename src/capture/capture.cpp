#include "capture/capture.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "capture/batch_runner.h"
#include "capture/outputs.h"
#include "capture/plan.h"
#include "capture/window_loop.h"
#include "common/files.h"
#include "common/run_lock.h"
#include "loading/model_loading.h"
#include "sites/layers.h"

namespace probekit::capture {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The model copies of the run on their devices, through the loading path: devices, placement, replicas.
struct LoadedReplicas {
  std::vector<device::ComputeTarget> targets;
  model::DevicePlan placement;
  std::vector<std::shared_ptr<const model::TransformerModel>> replicas;
  std::vector<model::StreamWrites> writes;  // each replica's steering, on its devices
  std::vector<std::unique_ptr<DeviceSae>> saes;  // --site sae:NAME: each replica's SAE, on its first device
};

LoadedReplicas load_for_capture(const CaptureOptions& options, const CapturePlan& plan, CaptureSummary& summary) {
  LoadedReplicas loaded;
  loaded.targets = options.loaded != nullptr ? options.loaded->targets : loading::select_targets(options);
  for (const device::ComputeTarget& target : loaded.targets) {
    summary.device += (summary.device.empty() ? "" : ",") + target.device.str();
  }
  summary.dtype = device::dtype_name(loaded.targets.front().dtype_choice.dtype);
  check_cpu_attention_memory(plan, loaded.targets.front());
  if (options.loaded != nullptr) {
    loaded.placement = options.loaded->placement;
    loaded.replicas.push_back(options.loaded->model);
  } else {
    model::LoadOptions load = loading::load_options(options);
    load.last_layer = plan.layers.back();
    load.final_norm = false;
    loaded.placement = loading::place_model(options, plan.model, loaded.targets, load);
    for (auto& replica : loading::load_replicas(plan.model_dir(), loaded.targets, loaded.placement, load)) {
      loaded.replicas.push_back(std::move(replica));
    }
  }
  for (const auto& ids : plan.ids) loaded.replicas.front()->check_inputs(ids);
  for (const auto& replica : loaded.replicas) {
    loaded.writes.push_back(steering::place(plan.steering, *replica));
    loaded.saes.push_back(place_sae(plan, replica->device()));
  }
  return loaded;
}

// One runner per pipeline stage of each replica: a replica split into S stages runs S batches at once, each a
// stage further on.
std::vector<BatchRunner> make_runners(const CaptureOptions& options, const LoadedReplicas& loaded,
                                      const readout::Request& request) {
  std::vector<BatchRunner> runners;
  for (size_t r = 0; r < loaded.replicas.size(); ++r) {
    std::vector<at::Device> devices;
    for (size_t index : loaded.placement.replicas[r]) {
      if (devices.empty() || devices.back() != loaded.targets[index].device) devices.push_back(loaded.targets[index].device);
    }
    readout::Request steered = request;
    if (!loaded.writes[r].empty()) steered.writes = &loaded.writes[r];
    if (loaded.saes[r]) steered.latents = &loaded.saes[r]->reading;
    for (size_t stage = 0; stage < loaded.placement.stages(r); ++stage) {
      runners.emplace_back(*loaded.replicas[r], devices, steered, options.simulate_out_of_memory_above);
    }
  }
  return runners;
}

// The first run position some layer file still lacks; the run size when every file is complete.
int64_t first_missing(const std::vector<LayerOutput>& outputs, int64_t run_size) {
  int64_t start = run_size;
  for (const LayerOutput& out : outputs) {
    if (out.writer) start = std::min(start, out.writer->examples_done());
  }
  return start;
}

}  // namespace

CaptureSummary run_capture(const CaptureOptions& options) {
  CaptureSummary summary;
  check_options(options);
  // The dataset and the model are found before the output directory is made: a run that cannot start leaves none.
  if (!options.dataset_path.empty()) data::require_dataset(options.dataset_path);
  CapturePlan plan;
  plan.model = options.loaded != nullptr ? options.loaded->source : loading::find_model(options.model_dir);
  // Two captures into one directory would both write its files and race to a rename error at the end: the second
  // stops here, before loading anything, naming the first.
  std::string dir = options.output_dir;
  if (options.shard_count > 1) dir += fmt::format("/shard_{}_of_{}", options.shard_index, options.shard_count);
  make_directories(dir);
  RunLock lock(dir + "/.capture.lock", fmt::format("another capture_activations is writing into {}", dir),
               "wait for it to finish, or capture into another --output-dir");
  plan_examples(options, plan, summary);
  plan.layers = parse_layers(options.layers, plan.config().num_layers);
  plan_site(options, plan);
  refuse_other_layers(options, dir, plan.layers);
  summary.layers = plan.layers;
  plan.steering = steering::resolve(options.steering, plan.config(), plan.saes);

  auto load_start = Clock::now();
  plan_prompts(options, plan, summary);
  if (!options.overwrite) refuse_other_captures(dir, plan.layers, file_attributes(options, plan, ""), false);
  LoadedReplicas loaded = load_for_capture(options, plan, summary);
  summary.load_seconds = seconds_since(load_start);
  spdlog::info("{}: {} ({} layers, hidden {}), capturing layers {} at {} ({}) in {:.1f} s", plan.model_dir(),
               plan.config().text_model_type, plan.config().num_layers, plan.config().hidden_size,
               fmt::join(plan.layers, ", "), options.sae_site ? options.sae_site->text() : site_name(plan.site),
               position_name(options.position), summary.load_seconds);

  auto layouts = make_layouts(plan, options.position, options.dataset.keep_fields);
  int64_t first_device_weights = loaded.placement.weight_bytes.empty() ? loaded.replicas.front()->weight_bytes()
                                                                        : loaded.placement.weight_bytes.front();
  const readout::Request request{plan.site, options.position, plan.layers, plan.leading_specials};
  Batching batching = choose_batching(options, *loaded.replicas.front(), request, loaded.targets.front(), plan,
                                      first_device_weights, loaded.replicas.size());
  std::vector<LayerOutput> outputs =
      open_outputs(options, dir, plan.layers, file_attributes(options, plan, summary.dtype), layouts, &batching);
  for (const LayerOutput& out : outputs) summary.files.push_back(out.path);

  auto run_size = static_cast<int64_t>(plan.run.size());
  int64_t start = first_missing(outputs, run_size);
  if (std::none_of(outputs.begin(), outputs.end(), [](const LayerOutput& o) { return o.writer.has_value(); })) {
    summary.already_complete = true;
    spdlog::info("all {} layer files are already complete", outputs.size());
    return summary;
  }
  if (start > 0 && start < run_size) spdlog::info("resuming after {} of {} examples", start, run_size);
  spdlog::debug("batching: windows of {} examples, {} {}tokens and {} examples per batch at most", batching.window,
                batching.token_budget, batching.packed ? "" : "padded ", batching.max_examples);
  run_windows(options, plan, loaded.targets, make_runners(options, loaded, request), loaded.replicas.size(), outputs,
              layouts, batching, start, summary);
  return summary;
}

}  // namespace probekit::capture
