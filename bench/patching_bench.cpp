// patching_bench: activation patching's figures with the model loaded and warm (PROTOCOL.md section 7): the exact
// resid_post grid over every layer and position of a clean/corrupted pair (patching_grid_s), the same grid by
// attribution patching (attribution_grid_s: its passes and backward replayed as a CUDA graph, as a sweep over pairs
// of one token count runs them; beside it the eager passes and the call that captured the graph), and one clean plus
// one corrupted forward pass of the pair, attribution's baseline. Each is run once to warm up, then --repeats times
// with the device synchronised; prints one JSON line with the medians. --trace profiles one eager attribution run
// (bench/python/summarize_trace.py reads it).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cli/torch/torch_tool.h"
#include "common/json.h"
#include "device/torch/gpu_utils.h"
#include "kineto_trace.h"
#include "loading/model_loading.h"
#include "patching/patching.h"
#include "readout/readout.h"
#include "readout/step_graphs.h"

using namespace probekit;

namespace {

struct BenchOptions {
  loading::ModelRequest model;
  std::string clean, corrupted;
  int repeats = 3;
  std::string trace;  // also profile one attribution run into this Chrome trace
};

void add_flags(CLI::App& app, BenchOptions& o) {
  add_model_options(app, o.model.model_dir, "Checkpoint")->required();
  app.add_option("--clean", o.clean, "The clean prompt")->required();
  app.add_option("--corrupted", o.corrupted, "The corrupted prompt (as many tokens)")->required();
  app.add_option("--repeats", o.repeats, "Timed runs of each figure (after one warm-up)")->capture_default_str();
  app.add_option("--trace", o.trace, "Also write a Chrome trace of one attribution run (Kineto, LibTorch 2.x)");
  add_device_options(app, o.model.device, o.model.dtype);
}

// Seconds of one run of `work`, the device synchronised before and after.
template <typename Work>
double seconds_of(at::Device device, Work&& work) {
  device::synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  work();
  device::synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The median over `repeats` runs of `work`, in seconds, after one run to warm up.
template <typename Work>
double median_seconds(at::Device device, int repeats, Work&& work) {
  work();
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) seconds.push_back(seconds_of(device, work));
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

void run(const BenchOptions& o) {
  const loading::SharedModel shared = loading::load_shared_model(o.model);
  const model::TransformerModel& model = *shared.model;
  const patching::PromptPair pair = patching::prompt_pair(model, *shared.tokenizer, o.clean, o.corrupted);
  patching::PatchRequest exact;
  patching::PatchRequest attribution;
  attribution.exact = false;
  attribution.attribution = true;
  const double forwards = median_seconds(model.device(), o.repeats, [&] {
    readout::read_site_run(model, pair.clean, {Site::kResidPost});
    readout::read_site_run(model, pair.corrupted, {Site::kResidPost});
  });
  const double grid = median_seconds(model.device(), o.repeats,
                                     [&] { patching::run_patching(model, *shared.tokenizer, pair, exact); });
  const double eager_estimate = median_seconds(model.device(), o.repeats,
                                               [&] { patching::run_patching(model, *shared.tokenizer, pair, attribution); });
  readout::StepGraphs graphs(model);
  const auto graphed = [&] { patching::run_patching(model, *shared.tokenizer, pair, attribution, &graphs); };
  graphed();  // a new key's first call runs eagerly
  const double capture = seconds_of(model.device(), graphed);
  const double estimate = median_seconds(model.device(), o.repeats, graphed);
  const Json line = {{"tokens", pair.clean.size()},
                     {"layers", model.loaded_layers()},
                     {"cells", model.loaded_layers() * static_cast<int64_t>(pair.clean.size())},
                     {"device", model.device().str()},
                     {"patching_grid_s", grid},
                     {"attribution_grid_s", estimate},
                     {"attribution_graph_replays", graphs.replays()},
                     {"attribution_eager_s", eager_estimate},
                     {"attribution_capturing_call_s", capture},
                     {"clean_and_corrupted_forward_s", forwards},
                     {"attribution_over_forwards", estimate / forwards}};
  fmt::print("{}\n", dump_json(line));
  if (!o.trace.empty()) {
    bench::profile([&] { patching::run_patching(model, *shared.tokenizer, pair, attribution); }, o.trace);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool_main<BenchOptions>(argc, argv, "Time activation patching's grid and attribution", add_flags, run);
}
