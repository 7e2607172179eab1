// decode_step_bench: where a generation step's time goes at small batches on the GPU. For each of graphs off and on
// (step_graphs.h), it generates --tokens tokens greedily from --batch prompts of about --prompt-tokens, the probes'
// rows read at --layer through a --suffix-tokens suffix as generation with probes reads them, and times each part of
// every step with the device synchronised around it: the step (every layer, the final norm and the rows) and the LM
// head with the greedy choice. Prints one JSON line per mode with the medians in milliseconds; with --batch above 1
// also a line timing the other prompts' joins to the first (the server's arrivals), one at a time and together.
#include <fmt/format.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <chrono>

#include "cli/torch/torch_tool.h"
#include "common/json.h"
#include "device/torch/gpu_utils.h"
#include "model/transformer.h"
#include "kineto_trace.h"
#include "readout/incremental.h"

using namespace probekit;

namespace {

double median_ms(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return seconds.empty() ? 0.0 : seconds[seconds.size() / 2] * 1e3;
}

// Seconds of `work` with the device synchronised before and after.
template <typename Work>
double timed(at::Device device, Work&& work) {
  device::synchronize(device);
  auto start = std::chrono::steady_clock::now();
  work();
  device::synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Json measure(const model::TransformerModel& model, const readout::Request& request,
             const std::vector<readout::Sequence>& prompts, const readout::Sequence& suffix, int64_t tokens, bool graphs) {
  readout::IncrementalReader reader(model, &request, suffix);
  reader.graphs().enable(graphs);
  at::Tensor hidden = reader.start(prompts, tokens);
  std::vector<double> step_s, head_s;
  for (int64_t t = 0; t < tokens; ++t) {
    at::Tensor next;
    head_s.push_back(timed(model.device(), [&] { next = model.logits(hidden).argmax(-1); }));
    step_s.push_back(timed(model.device(), [&] { hidden = reader.step(next, at::ones_like(next)).final_norm; }));
  }
  return {{"graphs", graphs},          {"step_ms_p50", median_ms(step_s)}, {"lm_head_and_choice_ms_p50", median_ms(head_s)},
          {"captures", reader.graphs().captures()}, {"replays", reader.graphs().replays()}, {"tokens", tokens},
          {"batch", prompts.size()}};
}

// Streams arriving together (the server's joins): the prompts after the first joining one at a time, then together.
Json measure_joins(const model::TransformerModel& model, const readout::Request& request,
                   const std::vector<readout::Sequence>& prompts, const readout::Sequence& suffix, int64_t tokens) {
  Json result{{"prompts", prompts.size()}};
  // Each way twice, alternating: the second time's (plans and kernels loaded) is the one reported.
  for (bool together : {false, true, false, true}) {
    readout::IncrementalReader reader(model, &request, suffix);
    reader.start({prompts.front()}, tokens);
    const std::vector<readout::Sequence> rest(prompts.begin() + 1, prompts.end());
    const double seconds = timed(model.device(), [&] {
      if (together) {
        reader.join(rest, tokens, nullptr);
      } else {
        for (const readout::Sequence& prompt : rest) reader.join({prompt}, tokens, nullptr);
      }
    });
    result[together ? "together_ms" : "one_at_a_time_ms"] = seconds * 1e3;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  TorchTool tool("Benchmark: the parts of a generation step on the GPU, CUDA graphs off and on");
  std::string model_dir, trace;
  bool no_cudnn_attention = false;
  int64_t tokens = 128, prompt_tokens = 40, suffix_tokens = 12, layer = 33, batch = 1;
  tool.app.add_option("--model", model_dir, "Checkpoint folder")->required();
  tool.app.add_option("--tokens", tokens, "Tokens generated per mode")->capture_default_str();
  tool.app.add_option("--prompt-tokens", prompt_tokens, "Prompt length")->capture_default_str()->check(CLI::Range(5, 100000));
  tool.app.add_option("--suffix-tokens", suffix_tokens, "The probes' prompt suffix length")->capture_default_str();
  tool.app.add_option("--layer", layer, "The layer the probes read")->capture_default_str();
  tool.app.add_option("--batch", batch, "Rows decoding together (prompts of lengths around --prompt-tokens); above 1 "
                      "the joins of rows 2 on are timed too")->capture_default_str()->check(CLI::Range(1, 1024));
  tool.app.add_flag("--no-cudnn-attention", no_cudnn_attention, "Attention without cuDNN's kernels (the others then)");
  tool.app.add_option("--trace", trace, "Also profile 16 steps of each mode into PREFIX.eager.json, PREFIX.graphs.json");
  return tool.run(argc, argv, [&] {
    if (no_cudnn_attention) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
      at::globalContext().setSDPUseCuDNN(false);
#else
      fail_usage("--no-cudnn-attention needs LibTorch 2.4 or later");
#endif
    }
    model::LoadOptions options;
    options.lm_head = true;
    const device::ComputeTarget target = device::select_compute("auto", "auto");
    options.device = target.device;
    options.dtype = target.dtype;
    model::TransformerModel model = model::TransformerModel::load(model_dir, options);
    std::vector<readout::Sequence> prompts(static_cast<size_t>(batch));
    readout::Sequence suffix;
    for (int64_t b = 0; b < batch; ++b) {
      // Lengths within 4 of --prompt-tokens, the first row's exactly that.
      for (int64_t i = 0; i < prompt_tokens + (b % 9 + 4) % 9 - 4; ++i) {
        prompts[static_cast<size_t>(b)].push_back(static_cast<int32_t>((1000 + 7 * i + 13 * b) % 900));
      }
    }
    for (int64_t i = 0; i < suffix_tokens; ++i) suffix.push_back(static_cast<int32_t>((2000 + 11 * i) % 900));
    const readout::Request request{Site::kResidPost, Position::kLast, {layer}};
    for (bool graphs : {false, true, false, true}) fmt::print("{}\n", measure(model, request, prompts, suffix, tokens, graphs).dump());
    if (batch > 1) fmt::print("{}\n", measure_joins(model, request, prompts, suffix, tokens).dump());
    if (trace.empty()) return;
    for (bool graphs : {false, true}) {
      bench::profile([&] { measure(model, request, prompts, suffix, 16, graphs); },
                     fmt::format("{}.{}.json", trace, graphs ? "graphs" : "eager"));
    }
  });
}
