// Each generated token's largest SAE latents (--sae): read by the step that feeds the token, equal to what a whole
// pass over the text up to the token gives; the tokens themselves unchanged by reading them; with --sae-labels their
// descriptions, in multi_probe_inference --generate --json and in the server's chat completions; refusals of
// label files naming the file, the item and the field.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "inference/engine.h"
#include "inference_runs.h"
#include "readout/readout.h"
#include "sae_fixtures.h"
#include "server_runs.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::kSaes;
using probekit::testing::TempDir;

namespace {

const std::string kPrompt = "I examined each part of the problem";
const std::string kJumpRelu = kSaes + "/saelens_jumprelu";

// Each token's latents [T, d_sae] of `ids` in one pass, as the engine's first SAE reads its site.
at::Tensor whole_pass_latents(const inference::Engine& engine, const readout::Sequence& ids) {
  const sae::SparseAutoencoder& sae = engine.saes().front();
  const sae::LatentReading dense{&sae, SaeOutput::kLatents, 0, false};
  readout::Request request{sae.site, Position::kAll, {sae.layer}, 0};
  request.latents = &dense;
  return readout::read_rows(engine.model(), {ids}, request).select(1, 0);
}

// `shown` holds `row`'s largest latents, largest first, its zeros left out.
void check_shown(const sae::TopLatents& shown, const at::Tensor& row) {
  const auto [values, indices] = row.topk(inference::kShownLatents);
  const float tolerance = 1e-4f * std::max(values[0].item<float>(), 1.0f);
  REQUIRE(static_cast<int64_t>(shown.size()) == (values > 0).sum().item<int64_t>());
  for (size_t j = 0; j < shown.size(); ++j) {
    CHECK(std::fabs(shown[j].value - row[shown[j].index].item<float>()) <= tolerance);
    CHECK(std::fabs(shown[j].value - values[static_cast<int64_t>(j)].item<float>()) <= tolerance);
  }
}

inference::EngineOptions generating_options(const TempDir& tmp) {
  inference::EngineOptions options = probekit::testing::cpu_engine_options(probekit::testing::train_probes(tmp));
  options.generate = true;
  return options;
}

// A Neuronpedia export of explanations for every latent of a 256-wide SAE: "latent I".
std::string write_labels(const TempDir& tmp) {
  Json items = Json::array();
  for (int i = 0; i < 256; ++i) {
    items.push_back({{"modelId", "gemma-3"}, {"layer", "3-res"}, {"index", std::to_string(i)},
                     {"description", fmt::format("latent {}", i)}});
  }
  const std::string path = tmp.file("explanations.json");
  probekit::testing::write_text(path, items.dump());
  return path;
}

// Every entry of a JSON latents list described as write_labels describes it, largest first.
void check_described(const Json& latents) {
  REQUIRE(latents.is_array());
  for (size_t j = 0; j < latents.size(); ++j) {
    CHECK(latents[j]["description"] == fmt::format("latent {}", latents[j]["latent"].get<int64_t>()));
    if (j > 0) CHECK(latents[j]["value"].get<double>() <= latents[j - 1]["value"].get<double>());
  }
}

}  // namespace

TEST_CASE("generated tokens carry each SAE's largest latents, as a pass over the text up to each token reads them" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  inference::EngineOptions options = generating_options(tmp);
  options.saes = {{"jr", kJumpRelu}};
  const inference::Engine engine = inference::Engine::load(options);
  const std::vector<inference::ScoredToken> tokens = probekit::testing::engine_generation(engine, kPrompt, 6);
  REQUIRE(tokens.size() == 6);
  readout::Sequence ids = engine.tokenizer().encode(kPrompt, true);
  const size_t prompt = ids.size();
  for (const inference::ScoredToken& token : tokens) ids.push_back(token.id);
  const at::Tensor latents = whole_pass_latents(engine, ids);
  for (const inference::ScoredToken& token : tokens) {
    CAPTURE(token.index);
    REQUIRE(token.latents.count("jr") == 1);
    check_shown(token.latents.at("jr"), latents[static_cast<int64_t>(prompt) + token.index]);
  }
  options.saes.clear();
  const inference::Engine plain = inference::Engine::load(options);
  const std::vector<inference::ScoredToken> unread = probekit::testing::engine_generation(plain, kPrompt, 6);
  REQUIRE(unread.size() == tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    CHECK(unread[i].id == tokens[i].id);
    CHECK(unread[i].latents.empty());
    CHECK(unread[i].probability == tokens[i].probability);
  }
}

TEST_CASE("--sae-labels: latents described in multi_probe_inference --generate --json and in chat completions") {
  TempDir tmp;
  inference::EngineOptions options = generating_options(tmp);
  const std::string labels = write_labels(tmp);
  const probekit::testing::CommandResult r = probekit::testing::run_command(fmt::format(
      "{} --probes-dir {} --model {} --device cpu --generate --max-new-tokens 3 --json --sae jr={} --sae-labels jr={} "
      "--text \"Day three.\"",
      probekit::testing::tool("multi_probe_inference"), options.probes_dir, options.model_dir, kJumpRelu, labels));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  size_t described = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const Json printed = Json::parse(line);
    if (printed.contains("done")) continue;
    check_described(printed["latents"]["jr"]);
    ++described;
  }
  CHECK(described == 3);

  server::ServerOptions served = probekit::testing::options_for(options.probes_dir);
  served.engine.saes = {{"jr", kJumpRelu}};
  served.engine.sae_labels = {{"jr", labels}};
  probekit::testing::RunningServer s(served);
  const Json reply = probekit::testing::post_json(
      s, "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "Day three."}}}}, {"max_tokens", 3}, {"temperature", 0}});
  REQUIRE(reply["probes"].size() == 3);
  for (const Json& token : reply["probes"]) check_described(token["latents"]["jr"]);
}

TEST_CASE("--sae-labels files are refused naming the file, the item and the field") {
  TempDir tmp;
  std::vector<sae::SparseAutoencoder> saes = {sae::load(kJumpRelu, "jr")};
  auto refused = [&](const std::string& text, const std::string& message) {
    const std::string path = tmp.file("labels.json");
    probekit::testing::write_text(path, text);
    CHECK_THROWS_WITH(sae::describe_latents(saes, {{"jr", path}}), doctest::Contains(message.c_str()));
  };
  refused(R"({"index": 1})", "labels.json: expected a JSON list");
  refused(R"([{"index": "3", "description": "x"}, {"description": "y"}])", "labels.json: item 1: no \"index\"");
  refused(R"([{"index": "three", "description": "x"}])", "item 0: \"index\" must be a latent's number, got \"three\"");
  refused(R"([{"index": 256, "description": "x"}])", "item 0: latent 256 is not one of SAE 'jr': its latents are 0 to 255");
  refused(R"([{"index": -1, "description": "x"}])", "item 0: latent -1 is not one of SAE 'jr': its latents are 0 to 255");
  refused(R"([{"index": 2}])", "item 0: missing 'description'");
  CHECK_THROWS_WITH_AS(sae::describe_latents(saes, {{"nosuch", tmp.file("labels.json")}}),
                       doctest::Contains("no SAE named 'nosuch' (loaded: jr)"), UsageError);
  probekit::testing::write_text(tmp.file("labels.json"),
                                R"([{"index": 7, "description": "sevens"}, {"index": "7", "description": "later"}])");
  sae::describe_latents(saes, {{"jr", tmp.file("labels.json")}});
  CHECK(saes[0].descriptions.at(7) == "sevens");
}
