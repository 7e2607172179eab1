// SAE sites through the readout (--site sae:NAME, sae-error:NAME): the nine fixture SAEs' latents and errors at every
// token of the gemma3_text fixture's reference texts, captured in memory as model.capture does, against NumPy's on
// transformers' activations (tests/fixtures/saes); sparse storage in activation files (latent_indices, latent_values,
// l0, relative_error) read back and densified; pooling latents per token; steering by latent; each token's latents in
// --per-token; refusals naming the flag.
#include <doctest/doctest.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture/memory_capture.h"
#include "common/error.h"
#include "common/json.h"
#include "inference/engine.h"
#include "inference_runs.h"
#include "io/safetensors.h"
#include "probe_fixture.h"
#include "sae_fixtures.h"
#include "steering/steering.h"
#include "tensor_files.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::fixture_model;
using probekit::testing::kFixtureSaes;
using probekit::testing::kSaes;
using probekit::testing::worst_row_error;
using probekit::testing::TempDir;

namespace {

std::vector<sae::SaeSpec> fixture_specs() {
  std::vector<sae::SaeSpec> specs;
  for (const auto& fixture : kFixtureSaes) specs.push_back({fixture.first, kSaes + "/" + fixture.second});
  return specs;
}

const loading::SharedModel& gemma() { return probekit::testing::sae_fixture_model(); }

// The fixture's reference texts (the prompt suffix already in them).
std::vector<std::string> reference_texts() {
  std::vector<std::string> texts;
  const Json meta = read_json_file(fixture_model("gemma3_text") + "/reference.json");
  for (const Json& text : meta["texts"]) {
    texts.push_back(text["text"].get<std::string>());
  }
  return texts;
}

at::Tensor reference(const safetensors::File& file, const std::string& name) {
  return probekit::testing::read_tensor(file, file.at(name)).to(at::kFloat);
}

// Each text's reference rows, text after text.
at::Tensor reference_rows(const safetensors::File& file, const std::string& pattern, size_t texts) {
  std::vector<at::Tensor> rows;
  for (size_t t = 0; t < texts; ++t) rows.push_back(reference(file, fmt::format(fmt::runtime(pattern), t)));
  return at::cat(rows);
}

capture::CaptureOptions sae_options(const std::string& site, Position position) {
  capture::CaptureOptions options;
  options.prompt_suffix = "";
  options.position = position;
  options.saes = fixture_specs();
  options.sae_site = parse_sae_site(site);
  options.sae_storage.dense = true;
  return options;
}

std::string write_dataset(const TempDir& tmp) {
  std::string lines;
  const std::vector<std::string> texts = reference_texts();
  for (size_t i = 0; i < 30; ++i) {
    lines += Json({{"text", texts[i % texts.size()]}, {"cognitive_action", i % 2 == 0 ? "noticing" : "reframing"}}).dump() + "\n";
  }
  const std::string path = tmp.file("data.jsonl");
  probekit::testing::write_text(path, lines);
  return path;
}

}  // namespace

TEST_CASE("every fixture SAE's latents and errors at every token, captured through the readout, equal NumPy's" *
          doctest::test_suite("numeric")) {
  const safetensors::File references(kSaes + "/reference.safetensors");
  const safetensors::File activations(fixture_model("gemma3_text") + "/reference.safetensors");
  const std::vector<std::string> texts = reference_texts();
  std::vector<at::Tensor> inputs;
  for (size_t t = 0; t < texts.size(); ++t) inputs.push_back(reference(activations, fmt::format("t{}.layers", t))[3]);
  const at::Tensor x = at::cat(inputs);
  for (const auto& fixture : kFixtureSaes) {
    const std::string& name = fixture.first;
    CAPTURE(name);
    const capture::CapturedRows latents = capture::capture_rows(gemma(), texts, sae_options("sae:" + name, Position::kAll));
    const std::vector<int64_t> sae_layer = {3};
    REQUIRE(latents.layers == sae_layer);
    REQUIRE(latents.rows[0].size(0) == x.size(0));
    CHECK(worst_row_error(latents.rows[0], reference_rows(references, name + ".t{}.latents", texts.size())) <= 1e-4);
    const capture::CapturedRows error =
        capture::capture_rows(gemma(), texts, sae_options("sae-error:" + name, Position::kAll));
    const at::Tensor expected = x - reference_rows(references, name + ".t{}.reconstruction", texts.size());
    CHECK(worst_row_error(error.rows[0], expected) <= 1e-4 * x.abs().amax().item<double>() /
                                                          expected.abs().amax().item<double>());
  }
}

TEST_CASE("an SAE site's pooled rows pool each token's latents, and the last token's are the last row's") {
  const std::vector<std::string> texts = reference_texts();
  const capture::CapturedRows all = capture::capture_rows(gemma(), texts, sae_options("sae:saelens_jumprelu", Position::kAll));
  const capture::CapturedRows mean = capture::capture_rows(gemma(), texts, sae_options("sae:saelens_jumprelu", Position::kMean));
  const capture::CapturedRows last = capture::capture_rows(gemma(), texts, sae_options("sae:saelens_jumprelu", Position::kLast));
  for (size_t t = 0; t < texts.size(); ++t) {
    CAPTURE(t);
    const at::Tensor rows = all.rows[0].slice(0, all.offsets[t], all.offsets[t + 1]);
    // Mean pooling leaves out the BOS (the tokenizer's leading special token).
    CHECK(at::allclose(mean.rows[0][static_cast<int64_t>(t)], rows.slice(0, 1).mean(0), 1e-5, 1e-6));
    CHECK(at::allclose(last.rows[0][static_cast<int64_t>(t)], rows[-1], 1e-5, 1e-6));
  }
}

TEST_CASE("sparse latents are stored as each row's top k with its L0 and relative error, and read back densified") {
  TempDir tmp;
  const std::string dataset = write_dataset(tmp);
  capture::CaptureOptions options = sae_options("sae:saelens_standard", Position::kAll);
  options.model_dir = fixture_model("gemma3_text");
  options.dataset_path = dataset;
  options.device = "cpu";
  options.output_dir = tmp.file("dense");
  const activations::ActivationFile dense = activations::read_activation_file(capture::run_capture(options).files.at(0));
  options.sae_storage = {8, false};
  options.output_dir = tmp.file("sparse");
  const std::string sparse_path = capture::run_capture(options).files.at(0);
  CHECK(sparse_path == tmp.file("sparse") + "/layer_3_activations.h5");
  const activations::ActivationFile sparse = activations::read_activation_file(sparse_path);
  REQUIRE(sparse.attributes.recipe.sae.has_value());
  CHECK(sparse.attributes.recipe.sae->site.text() == "sae:saelens_standard");
  CHECK(sparse.attributes.recipe.sae->top_k == 8);
  CHECK(sparse.attributes.recipe.sae->dictionary["layout"] == "saelens");
  CHECK(sparse.attributes.recipe.site == Site::kResidPost);
  CHECK(sparse.attributes.hidden_size == 256);
  for (activations::Split split : activations::kSplits) {
    CAPTURE(activations::split_name(split));
    const activations::SplitData& d = dense.split(split);
    const activations::SplitData& s = sparse.split(split);
    REQUIRE(s.rows == d.rows);
    CHECK(s.top_k == 8);
    const at::Tensor full = at::from_blob(const_cast<float*>(d.activations.data()), {d.rows, 256});
    const at::Tensor kept = at::from_blob(const_cast<float*>(s.activations.data()), {s.rows, 256});
    const at::Tensor top = std::get<0>(full.topk(8, 1));
    // The 8 largest of each row, the rest zero; L0 counts every nonzero latent.
    CHECK(at::allclose(std::get<0>(kept.topk(8, 1)), top));
    CHECK(at::equal((kept > 0).sum(1), (top > 0).sum(1)));
    const at::Tensor l0 = at::tensor(std::vector<int64_t>(s.l0.begin(), s.l0.end()));
    CHECK(at::equal(l0, (full > 0).sum(1)));
    for (float e : s.relative_error) CHECK((e >= 0 && e < 10));
  }
}

TEST_CASE("SAE sites are refused where they cannot be read, naming the flag") {
  const std::vector<std::string> texts = {"one text"};
  capture::CaptureOptions options = sae_options("sae:missing", Position::kLast);
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--site sae:missing: no SAE named 'missing' (loaded: saelens_standard"), UsageError);
  options.saes.clear();
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("load it with --sae missing=PATH"), UsageError);
  options = sae_options("sae:sparsify", Position::kLast);
  options.layers = "1,2";
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--layers 1,2: SAE 'sparsify' reads layer 3 alone (give --layers 3"), UsageError);
  // Regression: layers beside the SAE's were dropped without a word.
  options.layers = "2-4";
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--layers 2-4: SAE 'sparsify' reads layer 3 alone"), UsageError);
  options.saes.push_back({"sparsify", kSaes + "/saelens_topk"});
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options), doctest::Contains("a second SAE named 'sparsify'"),
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_sae_site("sae:"), doctest::Contains("name the SAE"), UsageError);
  // Regression: a K past the width stored columns of -1, or failed in HDF5 or the allocator.
  options = sae_options("sae:saelens_standard", Position::kLast);
  options.sae_storage = {1000, false};
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--sae-top-k 1000: SAE 'saelens_standard' has 256 latents"), UsageError);
  // Regression: the storage flags were ignored without a word where they could not apply.
  options.sae_storage = {8, true};
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--sae-top-k 8 with --sae-dense: give one"), UsageError);
  options = sae_options("sae-error:saelens_standard", Position::kLast);
  options.sae_storage = {8, false};
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--site sae-error:saelens_standard stores the SAE's error"), UsageError);
  options = sae_options("sae:saelens_standard", Position::kLast);
  options.sae_site.reset();
  options.sae_storage = {std::nullopt, true};
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, options),
                       doctest::Contains("--sae-dense: it says how an SAE site's latents are stored, and --site is resid_post"),
                       UsageError);
  CHECK(sae::parse_sae_spec("mine=/a/b=c").name == "mine");
  CHECK(sae::parse_sae_spec("./dir/x=y").path == "./dir/x=y");
}

namespace {

// The saelens_standard fixture's tensors, read straight from its file (not through sae::SparseAutoencoder).
struct StandardSae {
  at::Tensor w_enc, b_enc, w_dec, b_dec;
  StandardSae() {
    const safetensors::File file(kSaes + "/saelens_standard/sae_weights.safetensors");
    w_enc = reference(file, "W_enc");
    b_enc = reference(file, "b_enc");
    w_dec = reference(file, "W_dec");
    b_dec = reference(file, "b_dec");
  }
  // SAELens' standard encoding: relu((x - b_dec) W_enc + b_enc).
  at::Tensor latents(const at::Tensor& x) const { return at::relu(at::matmul(x - b_dec, w_enc) + b_enc); }
};

capture::CaptureOptions layer_rows(const std::string& op) {
  capture::CaptureOptions options;
  options.prompt_suffix = "";
  options.position = Position::kAll;
  options.layers = "3";
  options.saes = fixture_specs();
  if (!op.empty()) {
    const bool clamp = op.rfind("clamp ", 0) == 0;
    options.steering.ops.push_back(steering::parse_latent_op(op.substr(op.find(' ') + 1),
                                                             clamp ? steering::SteeringAction::kClamp
                                                                   : steering::SteeringAction::kAdd));
  }
  return options;
}

}  // namespace

TEST_CASE("steering by a latent adds its decoder row as stored; clamping sets it, keeping the SAE's error" *
          doctest::test_suite("numeric")) {
  const std::vector<std::string> texts = {reference_texts()[0], reference_texts()[3]};
  const StandardSae sae;
  const at::Tensor plain = capture::capture_rows(gemma(), texts, layer_rows("")).rows[0];
  const at::Tensor added = capture::capture_rows(gemma(), texts, layer_rows("add saelens_standard:5=4")).rows[0];
  CHECK(at::allclose(added, plain + 4 * sae.w_dec[5], 1e-5, 1e-5));
  const int64_t latent = std::get<1>(sae.latents(plain).sum(0).max(0)).item<int64_t>();  // one that fires
  for (const double value : {0.0, 7.5}) {
    CAPTURE(value);
    const std::string op = fmt::format("clamp saelens_standard:{}={}", latent, value);
    const at::Tensor clamped = capture::capture_rows(gemma(), texts, layer_rows(op)).rows[0];
    const at::Tensor z = sae.latents(plain).select(1, latent).unsqueeze(1);
    CHECK(at::allclose(clamped, plain + (value - z) * sae.w_dec[latent], 1e-5, 1e-5));
  }
}

TEST_CASE("latent steering is refused naming the flag: an unknown SAE, a latent past its width, a malformed value") {
  const std::vector<std::string> texts = {"one text"};
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, layer_rows("add nothing:1=2")),
                       doctest::Contains("--steer-latent nothing:1: no SAE named 'nothing'"), UsageError);
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, layer_rows("clamp saelens_topk:256=2")),
                       doctest::Contains("--clamp-latent saelens_topk:256: SAE 'saelens_topk' has latents 0 to 255"),
                       UsageError);
  CHECK_THROWS_WITH_AS(steering::parse_latent_op("sae:x=2", steering::SteeringAction::kAdd),
                       doctest::Contains("the latent 'x' is not a latent index"), UsageError);
  CHECK_THROWS_WITH_AS(steering::parse_latent_op("sae:3", steering::SteeringAction::kClamp),
                       doctest::Contains("--clamp-latent sae:3: expected NAME:INDEX=VALUE"), UsageError);
  CHECK_THROWS_WITH_AS(steering::parse_latent_op("sae:3=1e9", steering::SteeringAction::kAdd),
                       doctest::Contains("past"), UsageError);
  // Regression: a latent clamped twice had both changes added, as if set to the sum of the two values.
  capture::CaptureOptions twice = layer_rows("clamp saelens_standard:5=1");
  twice.steering.ops.push_back(steering::parse_latent_op("saelens_standard:5=5", steering::SteeringAction::kClamp));
  CHECK_THROWS_WITH_AS(capture::capture_rows(gemma(), texts, twice),
                       doctest::Contains("--clamp-latent saelens_standard:5: the latent is clamped twice"), UsageError);
  // A request's latent is named as the request's, not as a flag.
  steering::SteeringSpec request;
  request.ops.push_back(steering::SteeringOp::sae_latent(steering::SteeringAction::kAdd, "saelens_topk", 256, 1));
  const std::vector<sae::SparseAutoencoder> saes = {sae::load(kSaes + "/saelens_topk")};
  CHECK_THROWS_WITH_AS(steering::resolve(request, gemma().model->config(), saes),
                       doctest::Contains("latent 256 of SAE 'saelens_topk': SAE 'saelens_topk' has latents 0 to 255"),
                       UsageError);
}

TEST_CASE("--per-token with --sae: each token's largest latents, as the SAE reads the text up to it" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  inference::EngineOptions options = probekit::testing::cpu_engine_options(probekit::testing::train_fixture_probes(tmp));
  options.saes = {{"jr", kSaes + "/saelens_jumprelu"}};
  const inference::Engine engine = inference::Engine::load(options);
  const std::string text = reference_texts()[2];
  const inference::TokenScores scores = engine.score_tokens(text);
  REQUIRE(scores.latents.count("jr") == 1);
  const auto& shown = scores.latents.at("jr");
  REQUIRE(shown.size() == scores.ids.size());
  capture::CaptureOptions dense = sae_options("sae:jr", Position::kAll);
  dense.saes = options.saes;
  const at::Tensor latents = capture::capture_rows(gemma(), {text}, dense).rows[0];  // [T, 256]
  REQUIRE(latents.size(0) == static_cast<int64_t>(shown.size()));
  for (size_t t = 0; t < shown.size(); ++t) {
    CAPTURE(t);
    const auto [values, indices] = latents[static_cast<int64_t>(t)].topk(inference::kShownLatents);
    size_t expected_count = 0;
    for (int64_t j = 0; j < inference::kShownLatents; ++j) {
      if (values[j].item<float>() <= 0) continue;
      REQUIRE(expected_count < shown[t].size());
      CHECK(shown[t][expected_count].index == indices[j].item<int64_t>());
      CHECK(std::fabs(shown[t][expected_count].value - values[j].item<float>()) <= 1e-4f * values[0].item<float>());
      ++expected_count;
    }
    CHECK(shown[t].size() == expected_count);
  }
  // The tool prints them on each token's row.
  const probekit::testing::CommandResult r = probekit::testing::run_command(fmt::format(
      "{} --probes-dir {} --model {} --device cpu --per-token --json --sae jr={} --text \"Day three.\"",
      probekit::testing::tool("multi_probe_inference"), options.probes_dir, options.model_dir, kSaes + "/saelens_jumprelu"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const Json printed = probekit::testing::printed_json(r);
  const inference::TokenScores day = engine.score_tokens("Day three.");
  REQUIRE(printed["tokens"].size() == day.latents.at("jr").size());
  for (size_t t = 0; t < day.latents.at("jr").size(); ++t) {
    const Json& row = printed["tokens"][t]["latents"]["jr"];
    REQUIRE(row.size() == day.latents.at("jr")[t].size());
    for (size_t j = 0; j < row.size(); ++j) {
      CHECK(row[j]["latent"].get<int64_t>() == day.latents.at("jr")[t][j].index);
      CHECK(std::fabs(row[j]["value"].get<double>() - day.latents.at("jr")[t][j].value) < 1e-5);
    }
  }
  // And in the text view, each token's row ends with the SAE's three largest.
  const probekit::testing::CommandResult text_view = probekit::testing::run_command(fmt::format(
      "{} --probes-dir {} --model {} --device cpu --per-token --sae jr={} --text \"Day three.\"",
      probekit::testing::tool("multi_probe_inference"), options.probes_dir, options.model_dir, kSaes + "/saelens_jumprelu"));
  REQUIRE_MESSAGE(text_view.exit_code == 0, text_view.output);
  for (size_t t = 0; t < day.latents.at("jr").size(); ++t) {
    const sae::TopLatents& top = day.latents.at("jr")[t];
    std::vector<std::string> shown;
    for (size_t j = 0; j < std::min<size_t>(3, top.size()); ++j) shown.push_back(fmt::format("{} {:.2f}", top[j].index, top[j].value));
    CAPTURE(t);
    CHECK_CONTAINS(text_view.output, fmt::format("  | jr {}\n", top.empty() ? "-" : fmt::format("{}", fmt::join(shown, ", "))));
  }
}

TEST_CASE("max pooling of an SAE's error pools each token's error, not the input and the reconstruction apart") {
  const std::vector<std::string> texts = reference_texts();
  const std::string site = "sae-error:saelens_standard";
  const capture::CapturedRows all = capture::capture_rows(gemma(), texts, sae_options(site, Position::kAll));
  const capture::CapturedRows max = capture::capture_rows(gemma(), texts, sae_options(site, Position::kMax));
  for (size_t t = 0; t < texts.size(); ++t) {
    CAPTURE(t);
    // Regression: the row was max(x) - max(x_hat), off by up to 15 where the activations reach 12. The BOS is left
    // out, as max pooling leaves it out of any site.
    const at::Tensor errors = all.rows[0].slice(0, all.offsets[t] + 1, all.offsets[t + 1]);
    CHECK(at::allclose(max.rows[0][static_cast<int64_t>(t)], std::get<0>(errors.max(0)), 1e-5, 1e-6));
  }
}

TEST_CASE("latents of an SAE on resid_pre steer the stream leaving the layer before; resid_mid is refused") {
  TempDir tmp;
  auto at_hook = [&](const std::string& name, const std::string& hook) {
    const std::string dir = tmp.file(name);
    probekit::testing::copy_dir(kSaes + "/saelens_standard", dir);
    Json config = read_json_file(dir + "/cfg.json");
    config["metadata"]["hook_name"] = hook;
    probekit::testing::write_text(dir + "/cfg.json", config.dump());
    return dir;
  };
  const std::vector<std::string> texts = {reference_texts()[0], reference_texts()[3]};
  const StandardSae sae;
  auto rows = [&](const std::string& sae_dir, const std::string& op) {
    capture::CaptureOptions options = layer_rows("");
    options.site = Site::kResidPre;
    options.saes = {{"pre", sae_dir}};
    if (!op.empty()) options.steering.ops.push_back(steering::parse_latent_op(op, steering::SteeringAction::kAdd));
    return capture::capture_rows(gemma(), texts, options).rows[0];
  };
  // Regression: resid_pre cannot be written, and the run stopped after the model had loaded, exit 1.
  for (const auto& [layer, hook_name] : {std::pair{"3", "blocks.3.hook_resid_pre"}, std::pair{"0", "blocks.0.hook_resid_pre"}}) {
    const std::string hook = hook_name;  // named, not bound: clang's C++17 captures no structured binding (CAPTURE)
    CAPTURE(hook);
    const std::string dir = at_hook(std::string("pre") + layer, hook);
    const at::Tensor plain = [&] {
      capture::CaptureOptions options = layer_rows("");
      options.site = Site::kResidPre;
      options.layers = layer;
      options.saes = {{"pre", dir}};
      return capture::capture_rows(gemma(), texts, options).rows[0];
    }();
    capture::CaptureOptions steered = layer_rows("");
    steered.site = Site::kResidPre;
    steered.layers = layer;
    steered.saes = {{"pre", dir}};
    steered.steering.ops.push_back(steering::parse_latent_op("pre:5=4", steering::SteeringAction::kAdd));
    CHECK(at::allclose(capture::capture_rows(gemma(), texts, steered).rows[0], plain + 4 * sae.w_dec[5], 1e-5, 1e-5));
    const int64_t latent = std::get<1>(sae.latents(plain).sum(0).max(0)).item<int64_t>();  // one that fires
    steered.steering.ops = {steering::parse_latent_op(fmt::format("pre:{}=0", latent), steering::SteeringAction::kClamp)};
    const at::Tensor z = sae.latents(plain).select(1, latent).unsqueeze(1);
    CHECK(at::allclose(capture::capture_rows(gemma(), texts, steered).rows[0], plain - z * sae.w_dec[latent], 1e-5, 1e-5));
  }
  CHECK_THROWS_WITH_AS(rows(at_hook("mid", "blocks.3.hook_resid_mid"), "pre:5=4"),
                       doctest::Contains("--steer-latent pre:5: SAE 'pre' reconstructs resid_mid, where nothing can be "
                                         "written"),
                       UsageError);
}

TEST_CASE("make_steering_vectors refuses a capture of SAE latents, whose rows are not the layer's output") {
  TempDir tmp;
  capture::CaptureOptions options = sae_options("sae:saelens_standard", Position::kLast);
  options.model_dir = fixture_model("gemma3_text");
  options.dataset_path = write_dataset(tmp);
  options.device = "cpu";
  options.output_dir = tmp.file("latents");
  capture::run_capture(options);
  // Regression: the SAE reads resid_post, so the file passed the site check and a 256-wide "vector" was written.
  probekit::testing::check_failure(
      probekit::testing::run_command(fmt::format("{} --activations {} --label noticing --output {}",
                                                 probekit::testing::tool("make_steering_vectors"), tmp.file("latents"),
                                                 tmp.file("v.safetensors"))),
      1, {"read at site sae:saelens_standard"});
}
