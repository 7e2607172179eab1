// Attribution patching on a CUDA GPU: its passes and backward captured as a CUDA graph and replayed give what the
// eager passes give, for the pair captured and for another pair of the same token count (the graph reads its inputs,
// it does not keep the first pair's numbers); in fp32 both match transformers' attribution (the fixtures'
// patching.json); pairs longer than 128 tokens are never captured.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "common/json.h"
#include "gpu_test_util.h"
#include "loading/model_loading.h"
#include "patching/patching.h"
#include "readout/step_graphs.h"
#include "test_paths.h"

using namespace probekit;
using namespace probekit::patching;

namespace {

loading::SharedModel load_on_gpu(const std::string& name) {
  loading::ModelRequest request;
  request.model_dir = std::string(PROBEKIT_FIXTURES) + "/models/" + name;
  request.device = "cuda";
  request.dtype = "fp32";
  return loading::load_shared_model(request);
}

}  // namespace

TEST_CASE("attribution patching replayed as a CUDA graph gives the eager attribution, for a new pair too (fp32)") {
  for (const char* name : {"llama", "gemma3_text", "qwen3"}) {
    CAPTURE(name);
    const loading::SharedModel model = load_on_gpu(name);
    REQUIRE(readout::StepGraphs::supported(*model.model));
    const Json reference = read_json_file(std::string(PROBEKIT_FIXTURES) + "/models/" + name + "/patching.json");
    const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
    // Another pair of the same token count: the prompts' roles swapped.
    const PromptPair other{pair.corrupted, pair.clean, {}, {}, 0};
    PatchRequest request;
    request.exact = false;
    request.attribution = true;
    request.sites = {Site::kResidPost, Site::kMlpOut};
    const PatchingResult eager = run_patching(*model.model, *model.tokenizer, pair, request);
    const PatchingResult eager_other = run_patching(*model.model, *model.tokenizer, other, request);
    readout::StepGraphs graphs(*model.model);
    // The first call runs eagerly, the second captures, the rest replay.
    std::vector<PatchingResult> graphed;
    for (int call = 0; call < 4; ++call) graphed.push_back(run_patching(*model.model, *model.tokenizer, pair, request, &graphs));
    const PatchingResult replayed_other = run_patching(*model.model, *model.tokenizer, other, request, &graphs);
    CHECK(graphs.captures() == 1);
    CHECK(graphs.replays() == 4);
    for (const PatchingResult& result : graphed) {
      CHECK(result.metric.answer.id == eager.metric.answer.id);
      CHECK(result.metric.foil.id == eager.metric.foil.id);
      CHECK(result.clean_metric == doctest::Approx(eager.clean_metric).epsilon(1e-6));
      for (size_t s = 0; s < request.sites.size(); ++s) {
        CHECK(testing::max_relative_error(result.sites[s].attribution, eager.sites[s].attribution) <= 1e-6);
      }
    }
    CHECK(replayed_other.metric.answer.id == eager_other.metric.answer.id);
    CHECK(replayed_other.corrupted_metric == doctest::Approx(eager_other.corrupted_metric).epsilon(1e-6));
    for (size_t s = 0; s < request.sites.size(); ++s) {
      CHECK(testing::max_relative_error(replayed_other.sites[s].attribution, eager_other.sites[s].attribution) <= 1e-6);
    }
    // In fp32 on the GPU, the reference's attribution (resid_post), as on the CPU.
    double largest = 0, difference = 0;
    for (size_t l = 0; l < reference["attribution"].size(); ++l) {
      for (size_t p = 0; p < reference["attribution"][l].size(); ++p) {
        const double expected = reference["attribution"][l][p].get<double>();
        largest = std::max(largest, std::fabs(expected));
        difference = std::max(difference, std::fabs(graphed.back().sites[0].attribution[static_cast<int64_t>(l)][static_cast<int64_t>(p)].item<double>() - expected));
      }
    }
    CHECK(difference <= 1e-4 * largest);
  }
}

TEST_CASE("attribution of a pair longer than 128 tokens runs eagerly: no graph holds its pass's memory") {
  const loading::SharedModel model = load_on_gpu("llama");
  const Json reference = read_json_file(std::string(PROBEKIT_FIXTURES) + "/models/llama/patching.json");
  std::string tail;
  for (int i = 0; i < 40; ++i) tail += " and the dog sleeps";
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"].get<std::string>() + tail,
                                      reference["corrupted"].get<std::string>() + tail);
  REQUIRE(pair.clean.size() > 128);
  PatchRequest request;
  request.exact = false;
  request.attribution = true;
  readout::StepGraphs graphs(*model.model);
  const PatchingResult eager = run_patching(*model.model, *model.tokenizer, pair, request);
  for (int call = 0; call < 3; ++call) {
    const PatchingResult result = run_patching(*model.model, *model.tokenizer, pair, request, &graphs);
    CHECK(testing::max_relative_error(result.sites[0].attribution, eager.sites[0].attribution) <= 1e-6);
  }
  CHECK(graphs.captures() == 0);
  CHECK(graphs.replays() == 0);
}

TEST_CASE("a graph is replayed only for the sites in the order it captured them") {
  const loading::SharedModel model = load_on_gpu("llama");
  const Json reference = read_json_file(std::string(PROBEKIT_FIXTURES) + "/models/llama/patching.json");
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
  PatchRequest forward;
  forward.exact = false;
  forward.attribution = true;
  forward.sites = {Site::kResidPost, Site::kAttnOut};
  PatchRequest reversed = forward;
  reversed.sites = {Site::kAttnOut, Site::kResidPost};
  const PatchingResult eager = run_patching(*model.model, *model.tokenizer, pair, reversed);
  readout::StepGraphs graphs(*model.model);
  for (int call = 0; call < 3; ++call) run_patching(*model.model, *model.tokenizer, pair, forward, &graphs);
  // Regression: the key held the sites as a set, so the reversed request replayed the forward one's graph and got
  // each site's terms under the other's name.
  for (int call = 0; call < 3; ++call) {
    const PatchingResult result = run_patching(*model.model, *model.tokenizer, pair, reversed, &graphs);
    for (size_t s = 0; s < reversed.sites.size(); ++s) {
      CAPTURE(s);
      CHECK(result.sites[s].site == reversed.sites[s]);
      CHECK(testing::max_relative_error(result.sites[s].attribution, eager.sites[s].attribution) <= 1e-6);
    }
  }
}
