// multi_probe_inference end to end on a fixture model: scores equal sigmoid(w.h + b) from the saved probe files
// and inspect_model hidden; per-token scores equal running each prefix + suffix alone; multi-layer modes; the
// interactive loop fed by a pipe; and bad probe directories.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <unistd.h>

#include <cmath>
#include <sstream>

#include "common/files.h"
#include "capture/capture.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "inference/engine.h"
#include "inference/generation_view.h"
#include "inference/reports.h"
#include "io/safetensors.h"
#include "model/random_checkpoint.h"
#include "model/transformer.h"
#include "probes/probe_files.h"
#include "activations/readout_recipe.h"
#include "readout/prompts.h"
#include "engine_checks.h"
#include "inference_runs.h"
#include "probe_fixture.h"
#include "tensor_files.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// The residual stream after layers 2 and 5 at the last of `ids` ([1, hidden] each): what probes on those
// layers read for that prompt, by a plain forward pass.
std::vector<at::Tensor> last_token_rows(const model::TransformerModel& m, const std::vector<int64_t>& ids) {
  std::vector<at::Tensor> last;
  model::TensorHook hook = [&](Site site, int64_t layer, const at::Tensor& x) {
    if (site == Site::kResidPost && (layer == 2 || layer == 5)) last.push_back(x[0][-1].unsqueeze(0));
  };
  model::ForwardPass pass;
  pass.input_ids = at::tensor(ids).unsqueeze(0);
  pass.hook = &hook;
  m.forward(pass);
  return last;
}

}  // namespace

TEST_CASE("printed scores equal sigmoid(w.h + b) from the probe files and inspect_model hidden") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  CommandResult r = run_command(fmt::format("{} --probes-dir {}/layer_5 --model {} --device cpu --top-k 3 --json --text \"{}\"",
                                            tool("multi_probe_inference"), probes, kGemmaModel, kReframingText));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  safetensors::File hidden = inspect_hidden(tmp, kGemmaModel);
  check_printed_scores(printed_json(r), probes + "/layer_5", testing::read_tensor(hidden, hidden.at("layers"))[5][-1]);
  // The reference's text layout, with a mark on labels at or above the threshold.
  r = run_command(fmt::format("{} --probes-dir {}/layer_5 --model {} --device cpu --threshold 0 --text \"{}\"",
                              tool("multi_probe_inference"), probes, kGemmaModel, kReframingText));
  CHECK_CONTAINS(r.output, "Analyzing text: \"" + kReframingText + "\"");
  CHECK_CONTAINS(r.output, "Detected labels (top 5):");
  CHECK_CONTAINS(r.output, "  ✓ 1. ");
}

// Probes trained on router logits (capture --site router) take the router's width as their input; inference reads
// the same logits, and refuses the probes on another model's routers or on a layer without a router.
TEST_CASE("probes on router logits: printed scores equal sigmoid(w.r + b) for the router logits of inspect_model") {
  TempDir tmp;
  const std::string moe = fixture_model("qwen3_moe");
  ProbeFixture routers;
  routers.model_dir = moe;
  routers.layers = "2";
  routers.site = Site::kRouter;
  std::string probes = train_fixture_probes(tmp, routers);
  Json index = read_json_file(probes + "/probes.json");
  CHECK(index["readout"]["site"] == "router");
  CHECK(index["input_dim"] == 8);
  std::string command = fmt::format("{} --probes-dir {} --device cpu --top-k 3 --json --text \"{}\"",
                                    tool("multi_probe_inference"), probes, kReframingText);
  CommandResult r = run_command(command + " --model " + moe);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  safetensors::File hidden = inspect_hidden(tmp, moe);
  // The routers are those of layers 0, 2 and 3 (layer 1 is dense).
  at::Tensor router_logits = testing::read_tensor(hidden, hidden.at("router_logits"));
  REQUIRE(router_logits.size(0) == 3);
  check_printed_scores(printed_json(r), probes, router_logits[1][-1]);

  testing::check_failure(run_command(command + " --model " + fixture_model("qwen2_moe")), 1,
                         {"the probes take 8 inputs but the routers of the model in", "score 6 experts"});
  testing::check_failure(run_command(command + " --model " + moe + " --layer 1"), 1,
                         {"the probes read the router of layer 1, but that layer of the model in",
                          "(layers with a router: 0,2,3)"});
}

// Regression: probes of ln2_normalized ran on a model without a pre-MLP norm (OLMo 2), reading a norm it lacks.
TEST_CASE("probes of a site that the model has at no layer are refused, saying why") {
  TempDir tmp;
  ProbeFixture normalized;
  normalized.model_dir = fixture_model("llama");
  normalized.layers = "1";
  normalized.site = Site::kLn2Normalized;
  const std::string probes = train_fixture_probes(tmp, normalized);
  const std::string command = fmt::format("{} --probes-dir {} --device cpu --text \"{}\" --model ",
                                          tool("multi_probe_inference"), probes, kReframingText);
  REQUIRE_MESSAGE(run_command(command + fixture_model("llama")).exit_code == 0, probes);
  testing::check_failure(run_command(command + fixture_model("olmo2")), 1,
                         {"the probes read the ln2_normalized of layer 1, but the model in", "has no norm before its MLP"});
}

TEST_CASE("a train_probes directory: its classes ranked by softmax(W h + b) of best_probe.safetensors") {
  TempDir tmp;
  capture_fixture_activations(tmp);
  CommandResult r = run_command(fmt::format("{} --activations {}/layer_5_activations.h5 --output-dir {} --epochs 5 "
                                            "--device cpu --quiet",
                                            tool("train_probes"), tmp.file("activations"), tmp.file("multiclass")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  // No --model: the probe records the model it was trained on, as binary probes do.
  std::string run = fmt::format("{} --probes-dir {} --device cpu", tool("multi_probe_inference"), tmp.file("multiclass"));
  r = run_command(fmt::format("{} --top-k 100 --json --text \"{}\"", run, kReframingText));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  Json predictions = Json::parse(r.output.substr(r.output.find('{')))["predictions"];
  REQUIRE(predictions.size() == 45);  // a cognitive-action dataset: the reference's 45 classes

  r = run_command(fmt::format("{} hidden --model {} --device cpu --output {} --text \"{}{}\"", tool("inspect_model"), kGemmaModel,
                              tmp.file("h.safetensors"), kReframingText, "\n\nThe cognitive action being demonstrated here is"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  safetensors::File hidden(tmp.file("h.safetensors"));
  at::Tensor h = testing::read_tensor(hidden, hidden.at("layers"))[5][-1].to(at::kDouble);
  safetensors::File probe(tmp.file("multiclass/best_probe.safetensors"));
  at::Tensor w = testing::read_tensor(probe, probe.at("linear.weight")).to(at::kDouble);
  at::Tensor b = testing::read_tensor(probe, probe.at("linear.bias")).to(at::kDouble);
  at::Tensor expected = at::softmax(at::matmul(w, h) + b, 0);
  std::vector<std::string> names = Json::parse(probe.metadata().at("label_names")).get<std::vector<std::string>>();
  double sum = 0.0;
  for (const Json& p : predictions) {
    auto c = std::find(names.begin(), names.end(), p["label"].get<std::string>()) - names.begin();
    CHECK_MESSAGE(std::fabs(p["confidence"].get<double>() - expected[c].item<double>()) < 1e-5, p["label"].get<std::string>());
    sum += p["confidence"].get<double>();
  }
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(predictions[0]["label"] == names[static_cast<size_t>(expected.argmax().item<int64_t>())]);

  r = run_command(fmt::format("{} --top-k 3 --text \"{}\"", run, kReframingText));
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "Predicted classes (top 3 of 45, softmax probabilities):");
  CHECK_CONTAINS(r.output, " 1. " + predictions[0]["label"].get<std::string>());
  r = run_command(fmt::format("{} --calibrated --text \"{}\"", run, kReframingText));
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--calibrated: " + tmp.file("multiclass") + " holds a multiclass probe (train_probes)");

  // A multiclass probe and binary probes do not rank together.
  REQUIRE(run_command(fmt::format("{} --activations {}/layer_2_activations.h5 --output-dir {}/layer_2 --epochs 2 "
                                  "--device cpu --quiet",
                                  tool("train_binary_probes"), tmp.file("activations"), tmp.file("mixed"))).exit_code == 0);
  probekit::testing::copy_dir(tmp.file("multiclass"), tmp.file("mixed/layer_5"));
  r = run_command(fmt::format("{} --probes-dir {} --device cpu --text hello", tool("multi_probe_inference"), tmp.file("mixed")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "mixes a multiclass probe (train_probes) with binary probes (train_binary_probes)");
}

TEST_CASE("per-token scores equal running each prefix followed by the suffix on its own") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  inference::Engine engine = inference::Engine::load(cpu_engine_options(probes));
  REQUIRE(engine.layers() == std::vector<int64_t>{2, 5});
  inference::TokenScores scores = engine.score_tokens(kReframingText);

  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  std::vector<int32_t> suffix = tok.encode(engine.prompt_suffix(), false);
  auto m = model::TransformerModel::load(kGemmaModel, {});
  std::vector<probes::ProbeSet> sets;
  for (int64_t layer : {2, 5}) sets.push_back(probes::ProbeSet::load(fmt::format("{}/layer_{}", probes, layer), at::kCPU, at::kFloat));
  REQUIRE(scores.ids.size() > 10);
  for (size_t t = 0; t < scores.ids.size(); ++t) {
    std::vector<int64_t> ids(scores.ids.begin(), scores.ids.begin() + static_cast<std::ptrdiff_t>(t) + 1);
    ids.insert(ids.end(), suffix.begin(), suffix.end());
    std::vector<at::Tensor> last = last_token_rows(m, ids);
    for (size_t l = 0; l < 2; ++l) {
      at::Tensor expected = at::sigmoid(sets[l].logits(last[l]))[0].to(at::kDouble);
      for (size_t j = 0; j < sets[l].probes().size(); ++j) {
        size_t k = static_cast<size_t>(std::find(engine.labels().begin(), engine.labels().end(), sets[l].probes()[j].label) -
                                       engine.labels().begin());
        CHECK_MESSAGE(std::fabs(scores.probability[t][l][k] - expected[static_cast<int64_t>(j)].item<double>()) < 1e-5,
                      "token ", t, " layer ", engine.layers()[l], " label ", engine.labels()[k]);
      }
    }
  }
  // A long text's scoring takes a pass per 64 prefixes, each announced to before_pass, which may end it (the server's
  // deadline; regression: a request past it kept the device for the whole text).
  std::string long_text;
  while (engine.tokenizer().encode(long_text).size() < 200) long_text += kReframingText;
  int passes = 0;
  engine.score_tokens(long_text, nullptr, [&] { ++passes; });
  CHECK(passes >= 3);
  passes = 0;
  CHECK_THROWS_WITH(engine.score_tokens(long_text, nullptr, [&] { if (++passes == 2) throw std::runtime_error("late"); }),
                    "late");
  CHECK(passes == 2);
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --per-token --text \"{}\" --csv {} --html {}",
                                            tool("multi_probe_inference"), probes, kGemmaModel, kReframingText,
                                            tmp.file("t.csv"), tmp.file("t.html")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  std::string csv = probekit::testing::read_text(tmp.file("t.csv"));
  CHECK(csv.rfind("action_name,token_position,token_text,confidence,layer,is_active\n", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + static_cast<long>(scores.ids.size() * 2 * engine.labels().size()));
  std::string html = probekit::testing::read_text(tmp.file("t.html"));
  CHECK_CONTAINS(html, "<table>");
  CHECK(html.find("http") == std::string::npos);  // self-contained
}

TEST_CASE("multi-layer modes, best layers and comparisons") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  auto run = [&](const std::string& flags) {
    CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu {} --text \"{}\"",
                                              tool("multi_probe_inference"), probes, kGemmaModel, flags, kReframingText));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    return r.output;
  };
  std::string all = run("--json --top-k 100");
  Json predictions = Json::parse(all.substr(all.find('{')))["predictions"];
  CHECK(predictions.size() == 6);  // 3 labels x 2 layers
  for (size_t i = 1; i < predictions.size(); ++i) CHECK(predictions[i - 1]["confidence"] >= predictions[i]["confidence"]);
  std::string by_action = run("--mode by-action --aggregate mean --json");
  Json labels = Json::parse(by_action.substr(by_action.find('{')))["labels"];
  REQUIRE(labels.size() == 3);
  for (const Json& label : labels) {
    double mean = 0;
    for (const auto& [layer, confidence] : label["confidences"].items()) mean += confidence.get<double>() / 2;
    CHECK(label["aggregate"].get<double>() == doctest::Approx(mean));
  }
  CHECK_CONTAINS(run("--mode by-layer"), "Layer 5 (");
  Json analysis = read_json_file(probes + "/per_action_layer_analysis.json");
  std::string best = run("--best-layer");
  CHECK_CONTAINS(best, "(Layer ");
  CHECK_CONTAINS(run("--layers 5"), "Detected labels");
  // The reference's spelling, space-separated, selects the same layers as commas.
  std::string spaced = run("--layers 2 5 --json --top-k 100");
  CHECK(Json::parse(spaced.substr(spaced.find('{'))) == Json::parse(all.substr(all.find('{'))));
  CHECK(run("--layers 2,5 --json --top-k 100") == spaced);
  CommandResult compared = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --text \"{}\" --compare \"I noticed a crack.\"",
                                                   tool("multi_probe_inference"), probes, kGemmaModel, kReframingText));
  CHECK_CONTAINS(compared.output, "Biggest differences");
  CHECK_CONTAINS(run("--mode by-layer --calibrated"), "Predictions by layer (threshold=each probe's own)");
  // Regressions: flags that were ignored, and outputs refused only once the work was done.
  const std::string base = fmt::format("{} --probes-dir {} --model {} --device cpu --text \"{}\" ", tool("multi_probe_inference"),
                                       probes, kGemmaModel, kReframingText);
  check_failure(run_command(base + "--best-layer --layer 2"), 2, {"--best-layer scores each label at its best layer"});
  check_failure(run_command(base + "--per-token --compare 'a crack'"), 2, {"--per-token excludes --compare"});
  check_failure(run_command(base + "--per-token --csv " + tmp.file("same") + " --html " + tmp.file("same")), 2,
                {"--csv and --html name the same file"});
  check_failure(run_command(base + "--generate --max-new-tokens 1 --csv " + tmp.file("nowhere/g.csv")), 1,
                {"the folder", "does not exist"});
  // One file spelled two ways; a report written over the probes' own files.
  check_failure(run_command(base + "--per-token --csv " + tmp.file("same") + " --html " + tmp.path() + "/./same"), 2,
                {"--csv and --html name the same file"});
  check_failure(run_command(base + "--per-token --overwrite --csv " + probes + "/probes.json"), 2,
                {"it is inside --probes-dir"});
}

TEST_CASE("texts read from a pipe until quit: no prompts in the output, JSON lines with --json; --text \"\" is an error") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  std::string piped = fmt::format("printf 'I noticed a crack.\\n\\n  \\nI saw a chance to learn.\\nquit\\nnever read\\n' | {} "
                                  "--probes-dir {}/layer_2 --model {} --device cpu -q",
                                  tool("multi_probe_inference"), probes, kGemmaModel);
  CommandResult r = run_command(piped);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("Interactive mode") == std::string::npos);
  CHECK(r.output.find("Text: ") == std::string::npos);
  size_t shown = 0;
  for (size_t at = r.output.find("Top 5 predictions:"); at != std::string::npos; at = r.output.find("Top 5 predictions:", at + 1)) ++shown;
  CHECK(shown == 2);

  r = run_command(piped + " --json");
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.output);
  int parsed = 0;
  for (std::string line; std::getline(lines, line);) {
    CHECK_NOTHROW(Json::parse(line));
    ++parsed;
  }
  CHECK(parsed == 2);

  r = run_command(fmt::format("{} --probes-dir {}/layer_2 --model {} --device cpu --text ''", tool("multi_probe_inference"),
                              probes, kGemmaModel));
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--text is empty");
  // Regression: an empty value read as the flag left out (--compare and --csv did nothing, --file read stdin,
  // --model took the probes' model) or failed late naming no flag (the trainers' --output-dir after training).
  for (const char* flags : {"--text hi --compare ''", "--file ''", "--text hi --per-token --csv ''", "--text hi --model ''"}) {
    check_failure(run_command(fmt::format("{} --probes-dir {}/layer_2 --device cpu {} < /dev/null",
                                          tool("multi_probe_inference"), probes, flags)),
                  2, {"is empty: give a value, or leave the flag out"});
  }
  check_failure(run_command(fmt::format("{} --activations {} --output-dir ''", tool("train_binary_probes"), probes)), 2,
                {"--output-dir is empty"});
}

TEST_CASE("bad input to multi_probe_inference: probe files of the wrong size are refused, non-UTF-8 text is scored") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  auto run = [&](const std::string& dir, const std::string& arguments) {
    return run_command(fmt::format("{} --probes-dir {} --model {} --device cpu {}", tool("multi_probe_inference"), dir,
                                   kGemmaModel, arguments));
  };
  std::string damaged = tmp.file("damaged");
  probekit::testing::copy_dir(probes + "/layer_5", damaged);
  std::vector<float> weight(32, 0.5f), bias(1, 0.0f);
  safetensors::write_file(damaged + "/probe_analyzing.safetensors",
                          {{"linear.weight", safetensors::DType::kF32, {1, 32}, weight.data(), weight.size() * sizeof(float)},
                           {"linear.bias", safetensors::DType::kF32, {1}, bias.data(), sizeof(float)}});
  CommandResult r = run(damaged, "--text hello");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "damaged/probe_analyzing.safetensors: tensor 'linear.weight' has shape [1, 32], expected [1, 64]");
  std::string noticing = damaged + "/probe_noticing.safetensors";
  REQUIRE(::truncate(noticing.c_str(), static_cast<off_t>(file_size(noticing) - 4)) == 0);
  probekit::testing::copy_dir(probes + "/layer_5/probe_analyzing.safetensors", damaged + "/probe_analyzing.safetensors");
  r = run(damaged, "--text hello");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "damaged/probe_noticing.safetensors: tensor");
  CHECK_CONTAINS(r.output, "(file truncated?)");

  // A missing --file or --messages is refused before the model loads (regression: after it).
  for (const char* flag : {"--file", "--messages"}) {
    r = run(probes + "/layer_5", fmt::format("{} {}", flag, tmp.file("missing.jsonl")));
    CHECK(r.exit_code == 1);
    CHECK_CONTAINS(r.output, "missing.jsonl");
    CHECK_MESSAGE(r.output.find("device cpu") == std::string::npos, r.output);
  }
  r = run(probes + "/layer_5", "--file " + tmp.file(""));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "is a directory, expected a regular file, a pipe or a FIFO");

  // Bytes that are not UTF-8 are read as Python's errors="replace" reads them: each becomes U+FFFD. Byte-level
  // tokens of one emoji are not UTF-8 on their own either, and JSON output must survive both.
  r = run(probes + "/layer_5", "--json --text \"$(printf 'caf\\351 \\377!')\"");
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "\"text\": \"caf\xef\xbf\xbd \xef\xbf\xbd!\"");
  r = run(probes + "/layer_5", "--json --per-token --text \"ok \xf0\x9f\x98\x80\"");
  CHECK_MESSAGE(r.exit_code == 0, r.output);
}

TEST_CASE("probes that do not fit the model, and pickled probes, are refused clearly") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  auto run = [&](const std::string& model, const std::string& dir) {
    return run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --text hello", tool("multi_probe_inference"), dir, model));
  };
  model::RandomCheckpointOptions small;
  small.tokenizer_json = kGemmaModel + "/tokenizer.json";
  small.hidden_size = 32;
  small.layers = 6;
  small.heads = 2;
  small.kv_heads = 1;
  small.head_dim = 16;
  model::write_random_checkpoint(tmp.file("small"), small);
  CommandResult r = run(tmp.file("small"), probes + "/layer_5");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "the probes take 64 inputs but the model");
  r = run(fixture_model("gpt2"), probes + "/layer_5");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "probes of layer 5, but the model");
  make_directories(tmp.file("pickles"));
  probekit::testing::write_text(tmp.file("pickles/probe_analyzing.pth"), "not really a pickle");
  r = run(kGemmaModel, tmp.file("pickles"));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "never unpickles");
  CHECK(run_command(fmt::format("{} --probes-dir {} --model {} --layers 7 --text x", tool("multi_probe_inference"), probes,
                                kGemmaModel)).exit_code != 0);
}

namespace {

// The JSON lines multi_probe_inference --generate --json printed (log lines on stderr are not JSON objects).
std::vector<Json> json_lines(const std::string& output) {
  std::vector<Json> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '{') lines.push_back(Json::parse(line));
  }
  return lines;
}

}  // namespace

TEST_CASE("--generate: each new token's printed scores equal the probes run on the text so far + the suffix alone") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  std::string command = fmt::format("{} --probes-dir {} --model {} --device cpu --generate --max-new-tokens 6 --no-stop",
                                    tool("multi_probe_inference"), probes, kGemmaModel);
  CommandResult r = run_command(fmt::format("{} --text \"{}\" --json --top-k 100 --csv {} --html {}", command,
                                            kReframingText, tmp.file("g.csv"), tmp.file("g.html")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  std::vector<Json> lines = json_lines(r.output);
  REQUIRE(lines.size() == 7);
  const Json& done = lines.back();
  CHECK(done["done"] == true);
  CHECK(done["stop"] == "length");
  std::vector<int64_t> ids = done["prompt_ids"].get<std::vector<int64_t>>();
  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  std::vector<int32_t> suffix = tok.encode(activations::kDefaultPromptSuffix, false);
  auto m = model::TransformerModel::load(kGemmaModel, {});
  std::vector<probes::ProbeSet> sets;
  for (int64_t layer : {2, 5}) sets.push_back(probes::ProbeSet::load(fmt::format("{}/layer_{}", probes, layer), at::kCPU, at::kFloat));
  std::string text;
  for (size_t i = 0; i < 6; ++i) {
    const Json& token = lines[i];
    CHECK(token["index"] == i);
    CHECK(token["last"] == (i == 5));
    text += token["text"].get<std::string>();
    ids.push_back(token["id"].get<int64_t>());
    std::vector<int64_t> prompt = ids;
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    std::vector<at::Tensor> last = last_token_rows(m, prompt);
    REQUIRE(token["predictions"].size() == 2 * sets[0].probes().size());
    for (const Json& p : token["predictions"]) {
      size_t l = p["layer"] == 2 ? 0 : 1;
      size_t j = 0;
      while (sets[l].probes()[j].label != p["label"].get<std::string>()) ++j;
      double expected = at::sigmoid(sets[l].logits(last[l]))[0][static_cast<int64_t>(j)].item<double>();
      CHECK_MESSAGE(std::fabs(p["confidence"].get<double>() - expected) < 1e-5, "token ", i, " ", p.dump());
    }
  }
  CHECK(done["text"] == text);
  CHECK(done["generated_ids"].size() == 6);
  // The report: the prompt's tokens, then the six new ones, each with every probe of both layers.
  std::string csv = probekit::testing::read_text(tmp.file("g.csv"));
  const size_t rows = done["prompt_ids"].size() + 6;
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + static_cast<long>(rows * 2 * sets[0].probes().size()));
  CHECK_CONTAINS(probekit::testing::read_text(tmp.file("g.html")), "<table>");
  // --top-k bounds each token's predictions, the most confident first (regression: every one was listed).
  const std::vector<Json> top = json_lines(run_command(fmt::format("{} --text \"{}\" --json --top-k 2", command, kReframingText)).output);
  REQUIRE(top.size() == 7);
  for (size_t i = 0; i < 6; ++i) {
    REQUIRE(top[i]["predictions"].size() == 2);
    for (size_t k = 0; k < 2; ++k) CHECK(top[i]["predictions"][k] == lines[i]["predictions"][k]);
  }

  // Without --json: a line per token with the labels that fire, then the text.
  CommandResult plain = run_command(fmt::format("{} --text \"{}\" --threshold 0", command, kReframingText));
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.output);
  CHECK_CONTAINS(plain.output, "   5  ");
  CHECK_CONTAINS(plain.output, "✓");
  CHECK_CONTAINS(plain.output, fmt::format("Generated 6 tokens (stop: length):\n{}{}", kReframingText, text));
}

TEST_CASE("--generate --file: several prompts in one batch, each generating as it would alone, and bad combinations") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  std::string command = fmt::format("{} --probes-dir {} --model {} --device cpu --generate --max-new-tokens 5 --no-stop --json",
                                    tool("multi_probe_inference"), probes, kGemmaModel);
  const std::string second = "I noticed the crack.";
  probekit::testing::write_text(tmp.file("prompts.txt"), std::string(kReframingText) + "\n" + second + "\n");
  std::vector<Json> batch = json_lines(run_command(fmt::format("{} --file {}", command, tmp.file("prompts.txt"))).output);
  REQUIRE(batch.size() == 12);
  // Standard input and a pipe read as the file is (regression: "cannot open -", and a FIFO refused).
  CHECK(json_lines(run_command(fmt::format("cat {} | {} --file -", tmp.file("prompts.txt"), command)).output) == batch);
  CHECK(json_lines(run_command(fmt::format("bash -c '{} --file <(cat {})'", command, tmp.file("prompts.txt"))).output) ==
        batch);
  std::vector<Json> one_by_one =
      json_lines(run_command(fmt::format("{} --file {} --batch-size 1", command, tmp.file("prompts.txt"))).output);
  REQUIRE(one_by_one.size() == 12);
  CHECK(one_by_one[11]["row"] == 1);
  CHECK(one_by_one[11]["generated_ids"] == batch[11]["generated_ids"]);
  for (size_t row = 0; row < 2; ++row) {
    std::vector<Json> alone = json_lines(run_command(fmt::format("{} --text \"{}\"", command, row == 0 ? kReframingText : second)).output);
    REQUIRE(alone.size() == 6);
    const Json* done = nullptr;
    for (const Json& line : batch) {
      if (line["row"] == row && line.contains("done")) done = &line;
    }
    REQUIRE(done != nullptr);
    CHECK((*done)["generated_ids"] == alone.back()["generated_ids"]);
    CHECK((*done)["text"] == alone.back()["text"]);
  }
  std::string base = fmt::format("{} --probes-dir {} --model {} --device cpu", tool("multi_probe_inference"), probes, kGemmaModel);
  probekit::testing::check_failure(run_command(base + " --generate"), 2, {"--generate needs --text, --file or --messages"});
  probekit::testing::check_failure(run_command(base + " --generate --per-token --text hi"), 2,
                                   {"--generate excludes --per-token and --compare"});
  probekit::testing::check_failure(run_command(fmt::format("{} --generate --file {} --csv {}", base, tmp.file("prompts.txt"),
                                                           tmp.file("x.csv"))),
                                   2, {"--csv and --html with --generate report one prompt"});
  probekit::testing::check_failure(run_command(base + " --generate --text hi --sample-top-k -2 --temperature 1"), 2,
                                   {"--sample-top-k must be 0 (all) or positive, got -2"});
}

TEST_CASE("per-token CSV: a label or token a spreadsheet would run as a formula is quoted behind a '") {
  inference::ScoreTable table{{4}, {"@SUM(1)", "plain"}, {{0.75, 0.125}}, {{0.5, 0.5}}, {{0.9, 0.8}}};
  inference::TokenTable tokens;
  tokens.tokens = {"=HYPERLINK(1)", "-based", "ok, \"fine\""};
  tokens.texts = tokens.tokens;
  tokens.scores = {table, table, table};
  const std::string csv = inference::per_token_csv(tokens);
  CHECK_CONTAINS(csv, "\n\"'@SUM(1)\",0,\"'=HYPERLINK(1)\",0.750000,4,True\n");
  CHECK_CONTAINS(csv, "\nplain,1,\"'-based\",0.125000,4,False\n");
  CHECK_CONTAINS(csv, "\nplain,2,\"ok, \"\"fine\"\"\",0.125000,4,False\n");
}

TEST_CASE("the ranking's columns line up in terminal columns: a wide label takes two a character") {
  // Regression: labels were padded by code points, so a CJK label's score stood its characters' count further right.
  const std::string text = inference::format_ranking({{"東京", 5, 0.5, true}, {"tokyo", 5, 0.25, false}}, false);
  const size_t wide = text.find("東京"), narrow = text.find("tokyo");
  REQUIRE(wide != std::string::npos);
  REQUIRE(narrow != std::string::npos);
  const std::string wide_line = text.substr(text.rfind('\n', wide) + 1), narrow_line = text.substr(text.rfind('\n', narrow) + 1);
  CHECK(display_columns(wide_line.substr(0, wide_line.find("0.5"))) ==
        display_columns(narrow_line.substr(0, narrow_line.find("0.25"))));
}

TEST_CASE("the live view: each row's text so far and its latest token's labels as bars, control characters shown as spaces") {
  inference::ScoreTable table{{4}, {"analyzing", "noticing"}, {{0.75, 0.125}}, {{0.5, 0.5}}, {{0.9, 0.8}}};
  inference::LiveRow row{"Think", " about\x1b[2Jit", "Ġit", 3, table, ""};
  std::string frame = inference::live_frame({row}, 2, 100, 6);
  CHECK(frame == "\"Think\"\n"
                 "   about [2Jit\n"
                 "  -- 3 tokens; latest \"Ġit\"\n"
                 "  analyzing                    ██████████████████████▌        0.750 ✓\n"
                 "  noticing                     ███▊                           0.125\n");
  // Long text keeps its last lines; every line fits the terminal's width, wide characters taking two columns.
  row.text = std::string(21, 'a');
  row.stop = "eos";
  std::string wrapped = inference::live_frame({row}, 0, 10, 2);
  CHECK(wrapped == "\"Think\"\n  aaaaaaaa\n  aaaaa\n  -- 3 tok\n");
  row.text = "日本語のテキスト";
  CHECK(inference::live_frame({row}, 0, 10, 3) == "\"Think\"\n  日本語の\n  テキスト\n  -- 3 tok\n");
  // A narrow terminal narrows the bars and cuts the labels' lines.
  row.text = "x";
  std::string narrow = inference::live_frame({row}, 1, 50, 1);
  CHECK(narrow.find("  analyzing                    ███████▌   0.750 ✓\n") != std::string::npos);
  inference::ScoredToken token;
  token.index = 2;
  token.text = " it";
  CHECK(inference::generated_token_line(token, table, 5, false) == "   2  \" it\"               ✓analyzing 0.750");
  token.row = 1;
  table.probability = {{0.25, 0.125}};
  CHECK(inference::generated_token_line(token, table, 5, true) == "[1]    2  \" it\"               -");
}

TEST_CASE("the model's layers split over two devices: the same rankings, per-token scores and generations as one device "
          "(fp32)") {
  // --devices cpu,cpu splits the layers (placement, per-layer loading) over one device: no tensor moves. The
  // moves are tested below the engine, over cpu and cpu:0 (test_scale.cpp: rows and prefixes; test_generation.cpp:
  // generation), and on two GPUs (tests/gpu/test_gpu_split.cpp).
  TempDir tmp;
  inference::EngineOptions options = cpu_engine_options(train_fixture_probes(tmp));
  inference::Engine one = inference::Engine::load(options);
  options.devices = {"cpu", "cpu"};
  options.placement = "layers";
  inference::Engine split = inference::Engine::load(options);
  const std::vector<std::string> texts = {kReframingText, "I noticed the light change."};
  check_same_scores(split, one, texts);

  // Generation (every layer, the final norm and the LM head loaded): the same tokens with the same scores.
  options.generate = true;
  inference::Engine split_generator = inference::Engine::load(options);
  options.devices.clear();
  options.placement = "auto";  // --placement layers needs --devices (one loading path refuses it, as capture did)
  inference::Engine one_generator = inference::Engine::load(options);
  check_same_generation(split_generator, one_generator, texts, 6);
}
