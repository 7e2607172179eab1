// The readout layer: the prompt builder's cut, and inference applying the cut that capture recorded (on the
// gpt2 fixture, whose 512 learned positions a long text exceeds).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "capture/capture.h"
#include "common/json.h"
#include "activations/activation_store.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/transformer.h"
#include "readout/first_pass.h"
#include "readout/prompts.h"
#include "readout/readout.h"
#include "probe_fixture.h"
#include "server_runs.h"
#include "tensor_files.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const std::string kGpt2 = fixture_model("gpt2");

// About 900 GPT-2 tokens: longer than the fixture's 512 positions.
std::string long_text() {
  std::string text = "I examined each part of the problem";
  for (int day = 0; day < 300; ++day) text += fmt::format(" day {}", day);
  return text;
}

// Captures layer 3 of the gpt2 fixture (the long text among short ones, cut at `max_length`; 0: no cut) and
// trains probes on it: dir/probes.
void capture_and_train(const TempDir& tmp, int64_t max_length) {
  static const char* labels[] = {"analyzing", "reframing", "noticing"};
  std::string lines = Json({{"text", long_text()}, {"cognitive_action", "analyzing"}}).dump() + "\n";
  for (int i = 0; i < 45; ++i) {
    lines += Json({{"text", fmt::format("Example {} about {}.", i, labels[i % 3])}, {"cognitive_action", labels[i % 3]}})
                 .dump() + "\n";
  }
  testing::write_text(tmp.file("data.jsonl"), lines);
  capture::CaptureOptions o;
  o.model_dir = kGpt2;
  o.dataset_path = tmp.file("data.jsonl");
  o.output_dir = tmp.file("activations");
  o.layers = "3";
  o.max_length = max_length;
  o.device = "cpu";
  capture::run_capture(o);
  CommandResult trained = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 5 --device cpu --quiet",
                                                  tool("train_binary_probes"), tmp.file("activations"), tmp.file("probes")));
  REQUIRE_MESSAGE(trained.exit_code == 0, trained.output);
}

// The captured row of the dataset's first line (the long text).
at::Tensor captured_long_text_row(const TempDir& tmp) {
  auto file = activations::read_activation_file(tmp.file("activations/") + activations::layer_file_name(3));
  for (const auto& split : file.splits) {
    for (int64_t i = 0; i < split.examples(); ++i) {
      if (split.example_index[static_cast<size_t>(i)] != 0) continue;
      return at::from_blob(const_cast<float*>(split.activations.data()) + i * split.hidden, {split.hidden}, at::kFloat)
          .to(at::kDouble);
    }
  }
  FAIL("the long text is in no split");
  return {};
}

Json json_of(const CommandResult& r) { return Json::parse(r.output.substr(r.output.find('{'))); }

}  // namespace

TEST_CASE("cut_from_start keeps the special tokens in front and the end, leaving room for what follows") {
  std::vector<int32_t> ids = {1, 10, 11, 12, 13, 14};
  CHECK(readout::cut_from_start(ids, 0, 1) == 0);
  CHECK(readout::cut_from_start(ids, 6, 1) == 0);
  CHECK(readout::cut_from_start(ids, 4, 1) == 2);
  CHECK(ids == std::vector<int32_t>{1, 12, 13, 14});
  // Two tokens reserved for a suffix: the ids themselves keep max_length - 2.
  CHECK(readout::cut_from_start(ids, 4, 1, 2) == 2);
  CHECK(ids == std::vector<int32_t>{1, 14});
}

// Regression: inference ignored the --max-length cut recorded by capture and failed on texts longer than the
// model's positions, advising a flag it does not have.
TEST_CASE("inference cuts a long text as capture recorded: the scores equal the probes on the captured row") {
  TempDir tmp;
  capture_and_train(tmp, 24);
  Json index = read_json_file(tmp.file("probes/probes.json"));
  CHECK(index["readout"]["max_length"] == 24);

  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --top-k 3 --json --text \"{}\"",
                                            tool("multi_probe_inference"), tmp.file("probes"), kGpt2, long_text()));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "1 of 1 texts were longer than the probes' limit of 24 tokens (the cut their capture made)");
  at::Tensor row = captured_long_text_row(tmp);
  Json printed = json_of(r);  // kept alive: a range over a member of a temporary would read freed memory
  for (const Json& p : printed["predictions"]) {
    safetensors::File probe(tmp.file("probes/probe_") + p["label"].get<std::string>() + ".safetensors");
    at::Tensor w = testing::read_tensor(probe, probe.at("linear.weight")).to(at::kDouble)[0];
    double b = testing::read_tensor(probe, probe.at("linear.bias")).to(at::kDouble)[0].item<double>();
    double expected = 1.0 / (1.0 + std::exp(-(w.dot(row).item<double>() + b)));
    CHECK(p["confidence"].get<double>() == doctest::Approx(expected).epsilon(1e-5));
  }
  // The ranking says how many tokens were cut, as --per-token does, and /v1/rank with it (regression: neither did).
  CHECK(printed["cut_tokens"].get<int64_t>() > 800);
  {
    RunningServer s(options_for(tmp.file("probes")));
    const Json served = post_json(s, "/v1/rank", {{"texts", {long_text(), "A short text."}}});
    CHECK(served["results"][0]["cut_tokens"] == printed["cut_tokens"]);
    CHECK(served["results"][1]["cut_tokens"] == 0);
  }

  // Per token: only the tokens that survive the cut are scored, and the output says so.
  r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --per-token --json --text \"{}\"",
                              tool("multi_probe_inference"), tmp.file("probes"), kGpt2, long_text()));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  Json tokens = json_of(r);
  CHECK(tokens["cut_tokens"].get<int64_t>() > 800);
  CHECK(tokens["tokens"].size() < 24);
  r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --per-token --text \"{}\"",
                              tool("multi_probe_inference"), tmp.file("probes"), kGpt2, long_text()));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "tokens were cut and are not scored");
}

TEST_CASE("without a recorded cut, a text over the model's positions is cut at that limit with a warning") {
  TempDir tmp;
  capture_and_train(tmp, 512);
  // The probes record the capture's own cut; without one, the model's positions are the limit.
  Json index = read_json_file(tmp.file("probes/probes.json"));
  index["readout"]["max_length"] = 0;
  write_json_file(tmp.file("probes/probes.json"), index);
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --json --text \"{}\"",
                                            tool("multi_probe_inference"), tmp.file("probes"), kGpt2, long_text()));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "were longer than the model's 512 positions and were cut from the start");
  CHECK(json_of(r)["predictions"].size() >= 1);
}

namespace {

// Token sequences of different lengths, some longer than the fixtures' sliding window of 8, ids below `vocab`.
std::vector<readout::Sequence> mixed_length_sequences(int64_t vocab) {
  std::vector<readout::Sequence> sequences;
  for (int32_t length : {3, 17, 1, 9, 12}) {
    readout::Sequence s;
    for (int32_t t = 0; t < length; ++t) s.push_back(static_cast<int32_t>((7 + 31 * t + 13 * length) % vocab));
    sequences.push_back(s);
  }
  return sequences;
}

double largest_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

}  // namespace

TEST_CASE("packed sequences read the same rows as a padded batch, for every family, site and position") {
  struct Case {
    const char* model;
    Site site;
  };
  const Case cases[] = {{"gemma2", Site::kResidPost},   {"gemma3_text", Site::kAttnOut},
                        {"llama", Site::kResidPost},    {"gpt2", Site::kMlpOut},
                        {"gpt_neox", Site::kResidMid},  {"olmo2", Site::kResidPost},
                        {"phi3", Site::kResidPre},      {"qwen3_moe", Site::kRouter},
                        {"qwen2_moe", Site::kResidPost}, {"qwen3_next", Site::kAttnOut},
                        {"deepseek_v3", Site::kAttnOut}};
  for (const Case& c : cases) {
    auto model = model::TransformerModel::load(fixture_model(c.model), {});
    const int64_t layers = model.config().num_layers;
    auto sequences = mixed_length_sequences(model.config().vocab_size);
    for (Position position : {Position::kLast, Position::kMean, Position::kMax,
                                       Position::kAll}) {
      CAPTURE(c.model);
      CAPTURE(position_name(position));
      readout::Request request;
      request.site = c.site;
      request.position = position;
      request.layers = c.site == Site::kRouter ? std::vector<int64_t>{0, layers - 1}
                                                        : std::vector<int64_t>{0, layers / 2, layers - 1};
      request.skip_leading = 1;
      request.layout = readout::Layout::kPadded;
      at::Tensor padded = readout::read_rows(model, sequences, request);
      request.layout = readout::Layout::kPacked;
      at::Tensor packed = readout::read_rows(model, sequences, request);
      REQUIRE(packed.sizes() == padded.sizes());
      CHECK(largest_difference(packed, padded) < 1e-5);
    }
  }
}

TEST_CASE("a packed pass's last layer finishes only last_layer_rows: the same values, the other tokens not computed") {
  // Post-norms, parallel residual, experts, a Gated DeltaNet last layer, a latent attention one.
  for (const char* name : {"gemma3_text", "gpt_neox", "qwen3_moe", "qwen3_5_text", "deepseek_v3"}) {
    CAPTURE(name);
    auto model = model::TransformerModel::load(fixture_model(name), {});
    const int64_t last = model.config().num_layers - 1;
    // Two sequences of 5 and 3 tokens, one after another; their last tokens are 4 and 7.
    const at::Tensor ids = at::tensor(std::vector<int64_t>{2, 5, 6, 7, 8, 2, 9, 10}, at::kLong).unsqueeze(0);
    const at::Tensor positions = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2}, at::kLong).unsqueeze(0);
    const model::PackedSequences packed{at::tensor(std::vector<int32_t>{0, 5, 8}, at::kInt), {5, 3}};
    const at::Tensor rows = at::tensor(std::vector<int64_t>{4, 7}, at::kLong);
    auto run = [&](const at::Tensor& last_layer_rows, std::map<std::string, at::Tensor>& sites) {
      model::TensorHook hook = [&](Site site, int64_t layer, const at::Tensor& values) {
        if (layer == last) sites[site_name(site)] = values.clone();
      };
      model::ForwardPass pass;
      pass.input_ids = ids;
      pass.positions = positions;
      pass.packed = &packed;
      pass.hook = &hook;
      pass.last_layer_rows = last_layer_rows;
      return model.forward(pass);
    };
    std::map<std::string, at::Tensor> all_sites, row_sites;
    const at::Tensor all = run({}, all_sites), finished = run(rows, row_sites);
    REQUIRE(finished.size(1) == 2);
    CHECK(largest_difference(finished[0], all[0].index_select(0, rows)) < 1e-5);
    CHECK(row_sites.at("resid_pre").size(1) == 8);  // the layer's input: every token
    for (const auto& row_site : row_sites) {
      const auto& site = row_site.first;
      const auto& values = row_site.second;
      if (site == "resid_pre") continue;
      CAPTURE(site);
      REQUIRE(values.size(1) == 2);
      CHECK(largest_difference(values[0], all_sites.at(site)[0].index_select(0, rows)) < 1e-5);
    }
  }
}

TEST_CASE("packing is refused for a rope that depends on the sequence's length, and is off on the CPU") {
  auto longrope = model::TransformerModel::load(fixture_model("phi3_longrope"), {});
  readout::Request request;
  request.layers = {0};
  CHECK_FALSE(readout::packs_sequences(longrope, request));  // the CPU pads
  request.layout = readout::Layout::kPacked;
  CHECK_THROWS_WITH_AS(readout::read_rows(longrope, {{1, 2, 3}}, request),
                       doctest::Contains("cannot be packed for a model whose rope depends on the sequence's length"),
                       std::invalid_argument);
}

TEST_CASE("a first pass's rehearsal runs a stand-in of layer 0 (its site there, else the residual stream) and never throws") {
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_level(spdlog::level::debug);
  std::vector<int64_t> rows_given;
  auto rehearse = [&rows_given](const std::string& dir, Site site) {
    LoggedLines log;
    readout::Request request;
    request.site = site;
    request.layers = {3};
    rows_given.clear();
    auto use_rows = [&rows_given](const at::Tensor& rows) { rows_given = rows.sizes().vec(); };
    readout::rehearse_first_pass(dir, model::LoadOptions{}, request, use_rows).get();
    return log.text();
  };
  const model::ModelConfig config = model::load_config(kGemmaModel);
  CHECK(rehearse(kGemmaModel, Site::kMlpIn).find("first pass rehearsed on layer 0") != std::string::npos);
  CHECK(rows_given == std::vector<int64_t>{1, 1, readout::site_width(Site::kMlpIn, config)});
  CHECK(rehearse(kGemmaModel, Site::kRouter).find("first pass rehearsed on layer 0") != std::string::npos);
  CHECK(rows_given == std::vector<int64_t>{1, 1, config.hidden_size});
  TempDir empty;
  const std::string failed = rehearse(empty.path(), Site::kResidPost);
  CHECK(failed.find("the first pass's rehearsal failed") != std::string::npos);
  CHECK(failed.find("first pass rehearsed") == std::string::npos);
  spdlog::set_level(level);
}

// Regression: multi_probe_inference --generate advised --max-length, a flag of capture_activations. Every message of
// a tool names only flags it takes, whichever library part raised it.
TEST_CASE("multi_probe_inference's messages name only its own flags: a long prompt to generate from, a huge or zero --max-new-tokens") {
  TempDir tmp;
  capture_and_train(tmp, 24);
  const std::string tool_name = tool("multi_probe_inference");
  const std::string run = fmt::format("{} --probes-dir {} --model {} --device cpu", tool_name, tmp.file("probes"), kGpt2);
  CommandResult r = run_command(run + fmt::format(" --generate --max-new-tokens 4 --text \"{}\"", long_text()));
  CHECK(r.exit_code != 0);
  CHECK_CONTAINS(r.output, "exceed the model's 512 positions");
  check_named_flags(tool_name, r.output);
  r = run_command(run + " --generate --max-new-tokens 1000000000 --text \"A short text.\"");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "need");
  check_named_flags(tool_name, r.output);
  r = run_command(run + " --generate --max-new-tokens 0 --text \"A short text.\"");
  CHECK(r.exit_code == 2);
  check_named_flags(tool_name, r.output);
  r = run_command(run + fmt::format(" --per-token --text \"{}\"", long_text()));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "the probes' limit of 24 tokens");
  check_named_flags(tool_name, r.output);
}

TEST_CASE("a text whose attention does not fit the CPU's memory is refused with the tokens that fit, not an allocator's trace") {
  model::ModelConfig config;
  config.num_heads = 8;
  CHECK_FALSE(model::attention_past_memory(config, at::Device(at::kCUDA, 0), 1 << 24));  // memory-efficient kernels
  CHECK_FALSE(model::attention_past_memory(config, at::kCPU, 4096));
  const auto past = model::attention_past_memory(config, at::kCPU, 1 << 24);
  REQUIRE(past);
  CHECK(past->needed == doctest::Approx(12.0 * 8 * std::pow(2.0, 48)));
  const auto fitting = static_cast<double>(past->fitting_tokens);
  CHECK(12.0 * 8 * fitting * fitting <= past->memory / 4);
  CHECK(12.0 * 8 * (fitting + 1) * (fitting + 1) > past->memory / 4);

  // Regression: probes whose capture cut no text (a model of 131072 positions; here a recorded cut past any text) ran
  // a text of 180,000 tokens whole, and the CPU's allocator failed with a LibTorch trace (or the kernel killed it).
  TempDir tmp;
  ProbeFixture fixture;
  fixture.layers = "2";
  fixture.epochs = 5;
  const std::string probes = train_fixture_probes(tmp, fixture);
  Json index = read_json_file(probes + "/probes.json");
  index["readout"]["max_length"] = 1000000;
  write_json_file(probes + "/probes.json", index);
  std::string text;
  for (int w = 0; w < 60000; ++w) text += "word ";
  write_text(tmp.file("long.txt"), text + "\n");
  const std::string tool_name = tool("multi_probe_inference");
  const CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --file {}", tool_name, probes,
                                                  kGemmaModel, tmp.file("long.txt")));
  check_failure(r, 1, {"tokens: attention over them needs about", "GB on the CPU, more than half of its",
                       "use a shorter text (about"});
  CHECK(r.output.find("alloc_cpu") == std::string::npos);
  check_named_flags(tool_name, r.output);
}
