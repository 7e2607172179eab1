// Attention probes (every token, --position all) where probes are read, on a fixture model: the ranking equals
// ProbeSet::token_logits over the prompt's rows from a plain forward pass; --per-token scores each prefix's whole
// prompt, its last prefix is the ranking, and the attention weights of the whole prompt sum to 1; each generated
// token's score is the probes run on the text so far + the suffix; the server's per-token answer carries them.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "inference/engine.h"
#include "inference_runs.h"
#include "probe_fixture.h"
#include "model/transformer.h"
#include "probes/probe_files.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// What the probes give for the prompt `ids`, read whole by a plain forward pass: sigmoid of token_logits, [K].
at::Tensor expected_scores(const model::TransformerModel& m, const probes::ProbeSet& set,
                           const std::vector<int64_t>& ids) {
  at::Tensor rows;
  model::TensorHook hook = [&](Site site, int64_t layer, const at::Tensor& x) {
    if (site == Site::kResidPost && layer == 2) rows = x[0].clone();
  };
  model::ForwardPass pass;
  pass.input_ids = at::tensor(ids).unsqueeze(0);
  pass.hook = &hook;
  m.forward(pass);
  return at::sigmoid(set.token_logits(rows, {0, static_cast<int64_t>(ids.size())}))[0].to(at::kDouble);
}

// Engine column of each probe of `set`.
std::vector<size_t> columns_of(const inference::Engine& engine, const probes::ProbeSet& set) {
  std::vector<size_t> columns;
  for (const probes::ProbeInfo& p : set.probes()) {
    columns.push_back(static_cast<size_t>(std::find(engine.labels().begin(), engine.labels().end(), p.label) -
                                          engine.labels().begin()));
  }
  return columns;
}

}  // namespace

TEST_CASE("attention probes: ranking, per-token prefixes and attention, and generation equal the probes on whole prompts") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp, attention_fixture(5, "--heads 2"));
  probes::ProbeSet set = probes::ProbeSet::load(probes, at::kCPU, at::kFloat);
  CHECK(set.shape().kind->name() == std::string("attention"));
  CHECK(set.shape().skip_leading == 1);
  {
    // A conversation's masked rows hold no BOS: all are read, as a text's rows after its BOS (regression: probes
    // trained on texts left out each conversation's first masked token).
    at::manual_seed(3);
    const at::Tensor rows = at::randn({6, set.shape().input_dim});
    const at::Tensor after_bos = at::cat({at::randn({1, set.shape().input_dim}), rows});
    CHECK(at::equal(set.token_logits(rows, {0, 6}, nullptr, true), set.token_logits(after_bos, {0, 7})));
    CHECK(!at::equal(set.token_logits(rows, {0, 6}), set.token_logits(after_bos, {0, 7})));
    std::vector<int64_t> counts;
    const at::Tensor prefixes = set.prefix_logits(rows, {0, 6}, counts, true);
    CHECK(counts == std::vector<int64_t>{6});
    CHECK(at::equal(prefixes, set.prefix_logits(after_bos, {0, 7}, counts)));
    CHECK(set.token_layout({0, 6}, true).position == std::vector<int64_t>{0});
  }
  auto m = model::TransformerModel::load(kGemmaModel, {});
  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  inference::EngineOptions engine_options = cpu_engine_options(probes);
  engine_options.generate = true;
  inference::Engine engine = inference::Engine::load(engine_options);
  std::vector<size_t> columns = columns_of(engine, set);
  std::vector<int32_t> suffix = tok.encode(engine.prompt_suffix(), false);

  inference::TokenScores tokens = engine.score_tokens(kReframingText);
  inference::TextScores ranked = engine.score({kReframingText}).front();
  const size_t n = tokens.ids.size();
  REQUIRE(n > 5);
  for (size_t t : {size_t{0}, n / 2, n - 1}) {
    std::vector<int64_t> ids(tokens.ids.begin(), tokens.ids.begin() + static_cast<std::ptrdiff_t>(t) + 1);
    ids.insert(ids.end(), suffix.begin(), suffix.end());
    at::Tensor expected = expected_scores(m, set, ids);
    for (size_t j = 0; j < columns.size(); ++j) {
      const double want = expected[static_cast<int64_t>(j)].item<double>();
      CHECK_MESSAGE(std::fabs(tokens.probability[t][0][columns[j]] - want) < 1e-5, "prefix ", t, " probe ", j);
      if (t == n - 1) CHECK(std::fabs(ranked.probability[0][columns[j]] - want) < 1e-5);
    }
  }
  REQUIRE(tokens.attention.size() == n);
  REQUIRE(tokens.suffix_attention.size() == suffix.size());
  CHECK(std::isnan(tokens.attention[0][0][columns[0]]));  // the BOS is left out
  for (size_t column : columns) {
    double sum = 0.0;
    for (const auto& row : tokens.attention) sum += std::isnan(row[0][column]) ? 0.0 : row[0][column];
    for (const auto& row : tokens.suffix_attention) sum += row[0][column];
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }

  generation::GenerationOptions options;
  options.max_new_tokens = 3;
  std::vector<int32_t> prompt_ids = tok.encode(kReframingText, true);
  std::vector<int64_t> so_far(prompt_ids.begin(), prompt_ids.end());
  int64_t seen = 0;
  engine.generate({kReframingText}, options, [&](const inference::ScoredToken& token) {
    so_far.push_back(token.id);
    std::vector<int64_t> ids = so_far;
    ids.insert(ids.end(), suffix.begin(), suffix.end());
    at::Tensor expected = expected_scores(m, set, ids);
    for (size_t j = 0; j < columns.size(); ++j) {
      CHECK(std::fabs(token.probability[0][columns[j]] - expected[static_cast<int64_t>(j)].item<double>()) < 1e-5);
    }
    ++seen;
    return true;
  });
  CHECK(seen == 3);
}

TEST_CASE("multi_probe_inference with attention probes: --per-token --json carries each token's attention") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp, attention_fixture(5, "--heads 2"));
  CommandResult r = run_command(fmt::format(
      "{} --probes-dir {} --model {} --device cpu --per-token --json --text \"{}\" --csv {} --html {}",
      tool("multi_probe_inference"), probes, kGemmaModel, kReframingText, tmp.file("t.csv"), tmp.file("t.html")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(read_text(tmp.file("t.html")), "over the whole text</h2>");
  std::string csv = read_text(tmp.file("t.csv"));
  CHECK(csv.rfind("action_name,token_position,token_text,confidence,layer,is_active,attention\n", 0) == 0);
  Json printed = printed_json(r);
  REQUIRE(printed["tokens"].size() > 5);
  CHECK(printed["tokens"][0]["attention"].empty());  // the BOS
  const Json& weights = printed["tokens"][1]["attention"];
  REQUIRE(weights.size() == 3);
  CHECK(weights[0]["layer"] == 2);
  CHECK(weights[0]["weight"].get<double>() > 0.0);
  CHECK(printed.contains("suffix_attention"));
  CommandResult plain = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --per-token --text \"{}\"",
                                                tool("multi_probe_inference"), probes, kGemmaModel, kReframingText));
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.output);
  CHECK_CONTAINS(plain.output, "(not read)");  // the BOS
  CHECK_CONTAINS(plain.output, "(attention 0.");
  CommandResult ranked = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --json --text \"{}\"",
                                                 tool("multi_probe_inference"), probes, kGemmaModel, kReframingText));
  REQUIRE_MESSAGE(ranked.exit_code == 0, ranked.output);
  CHECK(printed_json(ranked)["predictions"].size() >= 1);
}
