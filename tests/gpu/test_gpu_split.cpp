// Layers split over two GPUs: the hidden state, positions and cached keys move between them, and the rows,
// probe scores and generations are bitwise those of one GPU in fp32 (skipped with fewer than two GPUs).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ATen/cuda/CUDAContext.h>

#include "capture/capture.h"
#include "activations/activation_store.h"
#include "common/json.h"
#include "generation/generator.h"
#include "inference/engine.h"
#include "model/transformer.h"
#include "readout/prompts.h"
#include "readout/readout.h"
#include "capture_runs.h"
#include "engine_checks.h"
#include "generation_checks.h"
#include "probe_fixture.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// Layers [0, layers / 2) on cuda:0, the rest on cuda:1.
std::vector<at::Device> two_gpu_devices(int64_t layers) {
  std::vector<at::Device> devices;
  for (int64_t l = 0; l < layers; ++l) devices.push_back(at::Device(at::kCUDA, l < layers / 2 ? 0 : 1));
  return devices;
}

// Every new token of a greedy generation after `prompts` in one batch, by row.
std::vector<std::vector<generation::GeneratedToken>> generated(const model::TransformerModel& model,
                                                               const std::vector<readout::Sequence>& prompts,
                                                               const generation::GenerationOptions& options,
                                                               const generation::ProbeReadout& probes) {
  std::vector<std::vector<generation::GeneratedToken>> tokens(prompts.size());
  generation::generate(model, prompts, options, &probes, [&](const generation::GeneratedToken& token) {
    tokens[token.row].push_back(token);
    return true;
  });
  return tokens;
}

}  // namespace

TEST_CASE("a model split over cuda:0 and cuda:1 reads bitwise the rows of cuda:0 alone (fp32), prefixes included") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  model::LoadOptions load;
  load.device = at::Device(at::kCUDA, 0);
  model::TransformerModel whole = model::TransformerModel::load(kGemmaModel, load);
  load.layer_devices = two_gpu_devices(whole.loaded_layers());
  model::TransformerModel split = model::TransformerModel::load(kGemmaModel, load);
  readout::Request request{Site::kResidPost, Position::kLast, {1, 4, 5}, 1};
  std::vector<readout::Sequence> texts = {{2, 10, 11, 12, 13}, {2, 14, 15}};
  CHECK(readout::read_rows(split, texts, request).device() == load.device);
  check_split_reads(split, whole, texts, request);
}

TEST_CASE("capture with --placement layers over two GPUs writes the rows of one GPU (fp32, same batches)") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  TempDir tmp;
  capture::CaptureOptions o = three_action_capture(tmp, 64, "cuda:0");
  o.dtype = "fp32";
  o.layers = "1,5";
  o.batch_size = 5;
  o.window = 16;
  check_split_capture(o, tmp, {"cuda:0", "cuda:1"}, {1, 5});
}

TEST_CASE("a model split over cuda:0 and cuda:1 generates bitwise the ids, logits and probe rows of cuda:0 alone (fp32)") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  // Sliding windows with local and global ropes (gemma3_text), a rope that depends on the length
  // (phi3_longrope), learned positions (gpt2) and routers read at their site (mixtral).
  const std::pair<std::string, Site> cases[] = {{"gemma3_text", Site::kResidPost},
                                                         {"phi3_longrope", Site::kResidPost},
                                                         {"gpt2", Site::kResidMid},
                                                         {"mixtral", Site::kRouter}};
  for (const auto& [model_name, site] : cases) {
    const auto name = model_name;  // named, not bound: clang's C++17 captures no structured binding (CHECK_MESSAGE)
    model::LoadOptions load;
    load.lm_head = true;
    load.device = at::Device(at::kCUDA, 0);
    model::TransformerModel whole = model::TransformerModel::load(fixture_model(name), load);
    const int64_t layers = whole.loaded_layers();
    load.layer_devices = two_gpu_devices(layers);
    model::TransformerModel split = model::TransformerModel::load(fixture_model(name), load);
    // The fixture's prompts (of different lengths) in one batch, every row running all its tokens; the probes
    // read the first layer, the first on cuda:1 and the last, after the prompt suffix.
    const std::vector<readout::Sequence> prompts = fixture_prompts(name);
    generation::GenerationOptions options;
    options.max_new_tokens = 8;
    options.top_logits = 5;
    options.suppressed_ids = generation::read_stop_ids(fixture_model(name));
    generation::ProbeReadout probes{{site, Position::kLast, {0, layers / 2, layers - 1}, 0},
                                    tokenizer::Tokenizer::from_file(fixture_model(name)).encode(activations::kDefaultPromptSuffix, false)};
    auto expected = generated(whole, prompts, options, probes), found = generated(split, prompts, options, probes);
    for (size_t b = 0; b < prompts.size(); ++b) {
      REQUIRE(found[b].size() == expected[b].size());
      for (size_t s = 0; s < expected[b].size(); ++s) {
        const generation::GeneratedToken &x = found[b][s], &y = expected[b][s];
        CHECK_MESSAGE(x.id == y.id, name, " row ", b, " token ", s);
        CHECK_MESSAGE(x.top_logits == y.top_logits, name, " row ", b, " token ", s, ": ", fmt::format("{}", x.top_logits),
                      " vs ", fmt::format("{}", y.top_logits));
        CHECK_MESSAGE(at::equal(x.rows, y.rows), name, " row ", b, " token ", s, ": rows differ by ",
                      (x.rows - y.rows).abs().max().item<double>());
      }
    }
  }
}

TEST_CASE("multi_probe_inference --devices 0,1 --placement layers: the rankings, per-token scores and generations of "
          "cuda:0 alone (fp32)") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  TempDir tmp;
  ProbeFixture fixture;
  fixture.in_process = true;
  inference::EngineOptions options;
  options.model_dir = kGemmaModel;
  options.probes_dir = train_fixture_probes(tmp, fixture);
  options.device = "cuda:0";
  options.dtype = "fp32";
  const std::vector<std::string> texts = {"Instead of seeing it as a setback, I saw a chance to learn.",
                                          "I noticed the light change."};
  for (bool generate : {false, true}) {
    options.generate = generate;
    options.devices.clear();
    inference::Engine one = inference::Engine::load(options);
    options.devices = {"cuda:0", "cuda:1"};
    options.placement = "layers";
    inference::Engine split = inference::Engine::load(options);
    check_same_scores(split, one, texts);
    if (generate) check_same_generation(split, one, texts, 6);
  }
}
