// Steering against transformers (the fixtures' steering.json: a vector added, times a coefficient, to one decoder
// layer's output at every position by a forward hook; greedy, fp32): the same generations and logits, and the same
// final norm at the prompt's last token. Then what steering must keep: coefficient 0 (and a zero vector) changes no
// bit, ablation leaves the layer's output orthogonal to the direction, a probe's own direction moves its score the
// way the sign says, and vector files (ours and GGUF control vectors) round-trip.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstring>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture_runs.h"
#include "common/files.h"
#include "common/json.h"
#include "io/gguf.h"
#include "probes/probe_files.h"
#include "generation/flags.h"
#include "generation/transcript.h"
#include "generation_checks.h"
#include "inference/engine.h"
#include "probe_fixture.h"
#include "readout/readout.h"
#include "steering/steering.h"
#include "steering/vector_file.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;
using probekit::steering::SteeringAction;
using probekit::steering::SteeringOp;

namespace {

// The fixture's vector as our vector file (layer.{L}).
std::string write_fixture_vector(const TempDir& tmp, const std::string& name, const Json& reference) {
  steering::VectorFile file;
  file.layers[reference["layer"].get<int64_t>()] = reference["vector"].get<std::vector<float>>();
  const std::string path = tmp.file(name + ".safetensors");
  steering::write_vector_file(path, file);
  return path;
}

generation::GenerationOptions sixteen_tokens_without_stop(const std::string& dir) {
  generation::GenerationOptions options;
  options.max_new_tokens = 16;
  options.suppressed_ids = generation::read_stop_ids(dir);  // transformers' min_new_tokens: --no-stop
  return options;
}

// One steered case: the same ids and top-5 logits as transformers, and the final norm at the prompt's last token.
void check_steered_case(const std::string& name, const std::string& vector_path, const Json& expected, size_t index) {
  const std::string dir = fixture_model(name);
  steering::SteeringSpec spec;
  spec.ops.push_back(SteeringOp::file(SteeringAction::kAdd, vector_path, expected["coefficient"].get<double>()));
  const Json transcript = generation::generation_transcript(dir, {expected["prompt"].get<std::string>()},
                                                            sixteen_tokens_without_stop(dir), "cpu", "fp32", spec);
  const Json& got = transcript["cases"][0];
  REQUIRE(got["prompt_ids"] == expected["prompt_ids"]);
  Steps steps;
  for (const Json& step : got["top5"]) {
    steps.top_ids.push_back(step["ids"].get<std::vector<int32_t>>());
    steps.top_logits.push_back(step["logits"].get<std::vector<float>>());
  }
  check_case(fmt::format("{} (coefficient {})", name, expected["coefficient"].get<double>()), index, expected,
             got["generated_ids"].get<std::vector<int32_t>>(), steps);
  CHECK(transcript["steering"]["add"][0]["coefficient"] == expected["coefficient"]);

  model::TransformerModel model = model::TransformerModel::load(dir, {});
  const model::StreamWrites writes = steering::place(steering::resolve(spec, model.config()), model);
  const readout::HiddenStates states =
      readout::read_hidden_states(model, expected["prompt_ids"].get<std::vector<int32_t>>(), &writes);
  const at::Tensor want = at::tensor(expected["final_norm_last"].get<std::vector<float>>());
  const at::Tensor last = states.final_norm[-1];
  CHECK_MESSAGE((last - want).abs().max().item<double>() <= 1e-4 * want.abs().max().item<double>(), name,
                " case ", index, ": final norm at the prompt's last token");
}

// Layer-2 probes of `kind` on the three-action dataset, each kind trained on the one capture in tmp/activations:
// tmp/probes_{kind}.
std::string train_three_action_probes(const TempDir& tmp, const std::string& kind = "linear") {
  ProbeFixture fixture;
  fixture.layers = "2";
  fixture.epochs = 40;
  fixture.flags = "--model-type " + kind;
  fixture.output = "probes_" + kind;
  return train_fixture_probes(tmp, fixture);
}

}  // namespace

TEST_CASE("steered generation equals transformers' with a forward hook adding the vector (gemma3_text, llama, qwen3_moe, gpt2, qwen3_next, gpt_oss)") {
  TempDir tmp;
  for (const char* name : {"gemma3_text", "llama", "qwen3_moe", "gpt2", "qwen3_next", "gpt_oss"}) {
    const Json reference = read_json_file(fixture_model(name) + "/steering.json");
    const std::string vector = write_fixture_vector(tmp, name, reference);
    for (size_t i = 0; i < reference["cases"].size(); ++i) check_steered_case(name, vector, reference["cases"][i], i);
  }
}

TEST_CASE("inspect_model generate --steer-vector FILE=COEF writes the steered generation and records the steering") {
  TempDir tmp;
  const Json reference = read_json_file(kGemmaModel + "/steering.json");
  const Json& expected = reference["cases"][2];  // a negative coefficient
  const std::string vector = write_fixture_vector(tmp, "gemma", reference);
  CommandResult r = run_command(fmt::format(
      "{} generate --model {} --text {} --max-new-tokens 16 --no-stop --device cpu --steer-vector {}={} --output {} -q",
      tool("inspect_model"), kGemmaModel, shell_quoted(expected["prompt"].get<std::string>()), vector,
      expected["coefficient"].get<double>(), tmp.file("out.json")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const Json written = read_json_file(tmp.file("out.json"));
  CHECK(written["cases"][0]["generated_ids"] == expected["generated_ids"]);
  CHECK(written["steering"]["add"][0]["layer"] == reference["layer"]);
  CHECK(written["steering"]["add"][0]["source"]["file"] == vector);
  CHECK(written["steering"]["site"] == "resid_post");

  steering::VectorFile narrow;
  narrow.layers[1] = std::vector<float>(32, 0.5f);
  steering::write_vector_file(tmp.file("narrow.safetensors"), narrow);
  steering::VectorFile deep;
  deep.layers[9] = std::vector<float>(64, 0.5f);
  steering::write_vector_file(tmp.file("deep.safetensors"), deep);
  const auto generate_hi = [&](const std::string& flags) {
    return run_command(fmt::format("{} generate --model {} --text hi {} --output {}", tool("inspect_model"), kGemmaModel,
                                   flags, tmp.file("x.json")));
  };
  check_failure(generate_hi("--steer-vector " + tmp.file("narrow.safetensors") + "=2"), 1,
                {"(layer 1): the vector has 32 values, the model's hidden size is 64"});
  check_failure(generate_hi("--steer-vector " + tmp.file("deep.safetensors")), 1,
                {"layer 9 is out of range: the model (gemma3_text) has layers 0 to 5"});
  check_failure(generate_hi("--steer reframing@2=4"), 2, {"give --probes-dir"});
  check_failure(generate_hi("--steer reframing@two=4"), 2, {"--steer reframing@two=4: the layer 'two' is not a layer number"});
}

TEST_CASE("coefficient 0, and a zero vector, change no bit of the rows or the generation") {
  TempDir tmp;
  const Json reference = read_json_file(kGemmaModel + "/steering.json");
  const std::string vector = write_fixture_vector(tmp, "gemma", reference);
  steering::VectorFile zero;
  zero.layers[1] = std::vector<float>(64, 0.0f);
  zero.layers[4] = std::vector<float>(64, 0.0f);
  steering::write_vector_file(tmp.file("zero.safetensors"), zero);
  model::TransformerModel model = model::TransformerModel::load(kGemmaModel, {});
  const std::vector<readout::Sequence> texts = {{2, 651, 432, 26}, {2, 184, 235, 9, 573, 213, 236}};
  readout::Request request{Site::kResidPost, Position::kAll, {0, 1, 2, 3, 4, 5}, 0};
  const at::Tensor plain = readout::read_rows(model, texts, request);
  for (const auto& [path, coefficient] : {std::pair{vector, 0.0}, std::pair{tmp.file("zero.safetensors"), 1.0}}) {
    steering::SteeringSpec spec;
    spec.ops.push_back(SteeringOp::file(SteeringAction::kAdd, path, coefficient));
    const model::StreamWrites writes = steering::place(steering::resolve(spec, model.config()), model);
    request.writes = &writes;
    CHECK(at::equal(readout::read_rows(model, texts, request), plain));
    const std::string prompt = reference["cases"][0]["prompt"].get<std::string>();
    const Json steered = generation::generation_transcript(kGemmaModel, {prompt}, sixteen_tokens_without_stop(kGemmaModel),
                                                           "cpu", "fp32", spec);
    const Json unsteered = generation::generation_transcript(kGemmaModel, {prompt},
                                                             sixteen_tokens_without_stop(kGemmaModel), "cpu", "fp32");
    CHECK(steered["cases"] == unsteered["cases"]);
  }
}

TEST_CASE("ablation leaves the layer's captured rows orthogonal to the direction, and later layers see it") {
  TempDir tmp;
  steering::VectorFile direction;
  direction.layers[2] = std::vector<float>(64);
  for (size_t i = 0; i < 64; ++i) direction.layers[2][i] = std::sin(0.7f * static_cast<float>(i)) + 0.2f;
  steering::write_vector_file(tmp.file("u.safetensors"), direction);
  capture::CaptureOptions o = three_action_capture(tmp, 30, "cpu");
  o.layers = "2,4";
  o.position = Position::kAll;
  o.output_dir = tmp.file("plain");
  capture::run_capture(o);
  o.output_dir = tmp.file("ablated");
  o.steering.ops = {SteeringOp::file(SteeringAction::kAblate, tmp.file("u.safetensors"))};
  capture::run_capture(o);
  at::Tensor u = at::tensor(direction.layers[2]);
  u = u / u.norm();
  for (const char* run : {"plain", "ablated"}) {
    const activations::ActivationFile file = activations::read_activation_file(tmp.file(std::string(run) + "/layer_2_activations.h5"));
    const activations::SplitData& train = file.split(activations::Split::kTrain);
    const at::Tensor rows = at::from_blob(const_cast<float*>(train.activations.data()), {train.rows, train.hidden}, at::kFloat);
    const double along = at::matmul(rows, u).abs().max().item<double>(), scale = rows.abs().max().item<double>();
    CAPTURE(run);
    if (std::string(run) == "ablated") {
      CHECK(along <= 1e-5 * scale);
      CHECK(file.attributes.recipe.steering["ablate"][0]["layer"] == 2);
    } else {
      CHECK(along > 1e-2 * scale);
    }
  }
  const auto plain4 = activations::read_activation_file(tmp.file("plain/layer_4_activations.h5")).split(activations::Split::kTrain);
  const auto ablated4 = activations::read_activation_file(tmp.file("ablated/layer_4_activations.h5")).split(activations::Split::kTrain);
  CHECK(plain4.activations != ablated4.activations);
}

TEST_CASE("vector files: GGUF control vectors round-trip bit for bit, layer 0 is not written to GGUF, names are checked") {
  TempDir tmp;
  steering::VectorFile file;
  file.model_hint = "gemma3_text";
  file.layers[1] = {0.25f, -1.5f, 3e-39f, 7.0f};
  file.layers[5] = {1.0f, 2.0f, 3.0f, -0.0f};
  for (const char* name : {"v.gguf", "v.safetensors"}) {
    steering::write_vector_file(tmp.file(name), file);
    const steering::VectorFile back = steering::read_vector_file(tmp.file(name));
    CAPTURE(name);
    CHECK(back.model_hint == "gemma3_text");
    REQUIRE(back.layers.size() == 2);
    for (const auto& [layer, values] : file.layers) {
      CHECK(std::memcmp(back.layers.at(layer).data(), values.data(), 4 * values.size()) == 0);
    }
  }
  const gguf::File raw = gguf::read_file(tmp.file("v.gguf"));
  CHECK(raw.find("general.architecture")->value == "controlvector");
  CHECK(raw.find("controlvector.layer_count")->value == 2);
  CHECK(raw.tensors[0].name == "direction.1");
  file.layers[0] = {1, 1, 1, 1};
  CHECK_THROWS_WITH(steering::write_vector_file(tmp.file("zero.gguf"), file),
                    doctest::Contains("a GGUF control vector cannot hold layer 0 (llama.cpp has no direction.0"));
  steering::write_vector_file(tmp.file("zero.safetensors"), file);
  CHECK(steering::read_vector_file(tmp.file("zero.safetensors")).layers.count(0) == 1);
  gguf::File wrong;
  wrong.tensors.push_back({"output.weight", {4}, {1, 2, 3, 4}});
  gguf::write_file(tmp.file("wrong.gguf"), wrong);
  CHECK_THROWS_WITH(steering::read_vector_file(tmp.file("wrong.gguf")),
                    doctest::Contains("tensor 'output.weight' is not a steering vector (expected direction.{L}"));
}

TEST_CASE("steering along a probe's own direction moves its score the way the sign says; multihead probes are refused") {
  TempDir tmp;
  const std::string probes = train_three_action_probes(tmp);
  inference::EngineOptions options = cpu_engine_options(probes);
  options.layer = 2;
  inference::Engine engine = inference::Engine::load(options);
  const std::string text = "I started to see the rejection as useful feedback.";
  const auto score_of = [&](const std::string& label) {
    const auto& labels = engine.labels();
    const size_t k = static_cast<size_t>(std::find(labels.begin(), labels.end(), label) - labels.begin());
    return engine.score({text})[0].probability[0][k];
  };
  for (const std::string& label : engine.labels()) {
    CAPTURE(label);
    const double unsteered = score_of(label);
    steering::SteeringSpec up, down;
    up.ops.push_back(SteeringOp::probe(SteeringAction::kAdd, label, "2", 8.0));
    down.ops.push_back(SteeringOp::probe(SteeringAction::kAdd, label, "2", -8.0));
    engine.steer(up);
    const double raised = score_of(label);
    engine.steer(down);
    const double lowered = score_of(label);
    engine.steer({});
    CHECK(raised > unsteered);
    CHECK(lowered < unsteered);
    CHECK(score_of(label) == unsteered);
  }
  steering::SteeringSpec multihead;
  multihead.probes_dir = train_three_action_probes(tmp, "multihead");
  multihead.ops.push_back(SteeringOp::probe(SteeringAction::kAdd, engine.labels().front(), "2", 4.0));
  // Named with its probes and label (regression: "a multihead probe ..." alone).
  const std::string named = fmt::format("label '{}': the multihead probe has no single direction in the layer's space",
                                        engine.labels().front());
  CHECK_THROWS_WITH(engine.steer(multihead), doctest::Contains(named.c_str()));
}

TEST_CASE("make_steering_vectors: mean-diff is the train split's mean difference, probe the probes' directions, in both formats") {
  TempDir tmp;
  const std::string probes = train_three_action_probes(tmp);
  CommandResult r = run_command(fmt::format("{} --activations {} --label reframing --output {}", tool("make_steering_vectors"),
                                            tmp.file("activations"), tmp.file("mean.safetensors")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "layer 2: norm");
  const activations::ActivationFile file =
      activations::read_activation_file(tmp.file("activations/layer_2_activations.h5"));
  const activations::SplitData& train = file.split(activations::Split::kTrain);
  const at::Tensor rows = at::from_blob(const_cast<float*>(train.activations.data()), {train.rows, train.hidden}, at::kFloat)
                              .to(at::kDouble);
  const int64_t label = std::find(file.attributes.label_names.begin(), file.attributes.label_names.end(), "reframing") -
                        file.attributes.label_names.begin();
  const at::Tensor is_label = at::tensor(train.labels) == label;
  const at::Tensor expected = rows.index({is_label}).mean(0) - rows.index({~is_label}).mean(0);
  const steering::VectorFile mean = steering::read_vector_file(tmp.file("mean.safetensors"));
  REQUIRE(mean.layers.count(2) == 1);
  CHECK((at::tensor(mean.layers.at(2)).to(at::kDouble) - expected).abs().max().item<double>() <=
        1e-6 * expected.abs().max().item<double>());
  CHECK(mean.metadata.at("method") == "mean-diff");
  // Regression: model_hint held the model's path, where llama.cpp's and repeng's files hold its type.
  CHECK(mean.model_hint == "gemma3_text");
  CHECK(mean.metadata.at("model") == file.attributes.recipe.model_name);

  r = run_command(fmt::format("{} --method probe --probes-dir {} --label noticing --output {}", tool("make_steering_vectors"),
                              probes, tmp.file("probe.gguf")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const probes::ProbeSet set = probes::ProbeSet::load(probes, at::kCPU, at::kFloat);
  size_t index = 0;
  while (set.probes()[index].label != "noticing") ++index;
  const steering::VectorFile probe = steering::read_vector_file(tmp.file("probe.gguf"));
  CHECK(at::equal(at::tensor(probe.layers.at(2)), set.direction(index)));
  CHECK(probe.model_hint == "gemma3_text");

  // The label's mean difference added at the layer the probe reads moves the probe's logit by w . v exactly.
  inference::Engine engine = inference::Engine::load(cpu_engine_options(probes));
  const auto reframing = static_cast<size_t>(
      std::find(engine.labels().begin(), engine.labels().end(), "reframing") - engine.labels().begin());
  auto logit = [](double p) { return std::log(p / (1 - p)); };
  const double before = logit(engine.score({"I noticed the light change."})[0].probability[0][reframing]);
  steering::SteeringSpec spec;
  spec.ops.push_back(SteeringOp::file(SteeringAction::kAdd, tmp.file("mean.safetensors"), 1.0));
  engine.steer(spec);
  const double after = logit(engine.score({"I noticed the light change."})[0].probability[0][reframing]);
  size_t column = 0;
  while (set.probes()[column].label != "reframing") ++column;
  const at::Tensor v = at::tensor(mean.layers.at(2)).unsqueeze(0);
  const double w_dot_v = (set.logits(v) - set.logits(at::zeros_like(v)))[0][static_cast<int64_t>(column)].item<double>();
  CHECK(after - before == doctest::Approx(w_dot_v).epsilon(1e-3));

  check_failure(run_command(fmt::format("{} --activations {} --label nosuch --output {}", tool("make_steering_vectors"),
                                        tmp.file("activations"), tmp.file("x.safetensors"))),
                2, {"--label nosuch: ", "has no such label (its labels: ", "reframing"});
  check_failure(run_command(fmt::format("{} --method probe --label reframing --output {}", tool("make_steering_vectors"),
                                        tmp.file("x.safetensors"))),
                2, {"--method probe needs --probes-dir"});
  check_failure(run_command(fmt::format("{} --activations {} --label reframing --output {}", tool("make_steering_vectors"),
                                        tmp.file("activations"), tmp.file("x.txt"))),
                2, {"a steering vector file is .safetensors (ours) or .gguf"});
  // Regressions: a layer the input lacks was left out of the file, and another method's input dropped, without a word.
  // And with none of the layers asked for there, the layers it has were listed as those found among them (none).
  for (const char* layers : {"1,2", "1"}) {
    check_failure(run_command(fmt::format("{} --activations {} --label reframing --layers {} --output {}",
                                          tool("make_steering_vectors"), tmp.file("activations"), layers,
                                          tmp.file("x.safetensors"))),
                  2, {"--layers: ", "has no layer 1 (its layers: 2)"});
  }
  check_failure(run_command(fmt::format("{} --activations {} --probes-dir {} --label reframing --output {}",
                                        tool("make_steering_vectors"), tmp.file("activations"), probes,
                                        tmp.file("x.safetensors"))),
                2, {"--probes-dir is read by --method probe only, and --method is mean-diff"});
}

namespace {

// Each cell of the sweep (of layer 2's probes) generated alone by an engine steered as the cell says gives its ids.
void check_cells_as_alone(const Json& sweep, const std::string& probes) {
  inference::EngineOptions options = cpu_engine_options(probes);
  options.layer = 2;
  options.generate = true;
  inference::Engine engine = inference::Engine::load(options);
  generation::GenerationOptions six = generation::GenerationOptions{};
  six.max_new_tokens = 6;
  six.stop_ids = generation::read_stop_ids(kGemmaModel);
  for (const Json& cell : sweep["cells"]) {
    steering::SteeringSpec spec;
    if (!cell["label"].is_null()) {
      spec.ops.push_back(SteeringOp::probe(SteeringAction::kAdd, cell["label"], "2", cell["coefficient"].get<double>()));
    }
    engine.steer(spec);
    const auto alone = engine.generate({sweep["prompts"][cell["prompt"].get<size_t>()]}, six,
                                       [](const inference::ScoredToken&) { return true; });
    CAPTURE(cell["label"]);
    CAPTURE(cell["coefficient"]);
    CHECK(cell["generated_ids"] == Json(alone[0].ids));
    CHECK(cell["perplexity"].get<double>() > 0);
    if (cell["label"].is_null()) {
      CHECK(cell["kl_mean"] == 0.0);
    } else {
      CHECK(cell["kl_mean"].get<double>() > 0);
    }
  }
}

// Each label's score rises with its coefficient; each point's off-target shifts are the other labels' mean score
// changes from the prompts' baselines, their least and most.
void check_summary(const Json& sweep) {
  for (const char* label : {"reframing", "noticing"}) {
    std::map<double, double> score;
    for (const Json& p : sweep["summary"]) {
      if (p["label"] == label) score[p["coefficient"].get<double>()] = p["score_mean"].get<double>();
    }
    CAPTURE(label);
    CHECK(score[8] > score[0]);
    CHECK(score[0] > score[-8]);
  }
  // Regression: both started at 0, so a shift below 0 was never the maximum, nor one above 0 the minimum.
  for (const Json& p : sweep["summary"]) {
    if (p["coefficient"] == 0) continue;
    std::vector<double> shifts;
    for (const auto& [other, score] : sweep["cells"][0]["mean_scores"].items()) {
      if (other == p["label"]) continue;
      double shift = 0;
      for (const Json& cell : sweep["cells"]) {
        if (cell["label"] != p["label"] || cell["coefficient"] != p["coefficient"]) continue;
        for (const Json& base : sweep["cells"]) {
          if (base["label"].is_null() && base["prompt"] == cell["prompt"]) {
            shift += (cell["mean_scores"][other].get<double>() - base["mean_scores"][other].get<double>()) / 2;
          }
        }
      }
      shifts.push_back(shift);
    }
    REQUIRE(shifts.size() == 2);
    CHECK(p["off_target_shift_min"].get<double>() == doctest::Approx(*std::min_element(shifts.begin(), shifts.end())));
    CHECK(p["off_target_shift_max"].get<double>() == doctest::Approx(*std::max_element(shifts.begin(), shifts.end())));
  }
}

}  // namespace

TEST_CASE("steering_sweep: every cell of one batched run gives what it gives alone; scores follow the sign; KL and report") {
  TempDir tmp;
  const std::string probes = train_three_action_probes(tmp);
  // A line of white space only is no prompt: two prompts.
  write_text(tmp.file("prompts.txt"), "I kept asking myself whether it was true\n  \t \nLet me step back and look again\n");
  CommandResult r = run_command(fmt::format(
      "{} --probes-dir {} --model {} --layer 2 --labels reframing,noticing --coefficients=-8,0,8 --file {} "
      "--max-new-tokens 6 --device cpu --output-dir {} -q",
      tool("steering_sweep"), probes, kGemmaModel, tmp.file("prompts.txt"), tmp.file("sweep")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "12 cells (10 generations) in");
  const Json sweep = read_json_file(tmp.file("sweep/sweep.json"));
  REQUIRE(sweep["cells"].size() == 10);  // 2 unsteered baselines + 2 labels x 2 coefficients x 2 prompts
  REQUIRE(sweep["summary"].size() == 6);
  CHECK(sweep["generation"] == Json({{"device", "cpu"}, {"dtype", "fp32"}, {"temperature", 0.0}, {"top_k", 0},
                                     {"top_p", 1.0}, {"seed", 0}, {"no_stop", false}}));
  // Values checked where they are given: an empty --labels, a coefficient past the bound, an --ablate range.
  const std::string sweep_base = fmt::format("{} --probes-dir {} --model {} --layer 2 --file {} --device cpu -q --output-dir {}",
                                             tool("steering_sweep"), probes, kGemmaModel, tmp.file("prompts.txt"),
                                             tmp.file("sweep2"));
  check_failure(run_command(sweep_base + " --labels ''"), 2, {"--labels is empty"});
  // Space-separated as the trainers take them (regression: "The following argument was not expected: nosuch").
  check_failure(run_command(sweep_base + " --labels reframing nosuch"), 2, {"has no probe for 'nosuch' at layer 2"});
  check_failure(run_command(sweep_base + " --coefficients=0,1e9"), 2, {"--coefficients: the coefficient 1000000000 is past"});
  // Regression: repeats were generated and reported twice.
  check_failure(run_command(sweep_base + " --coefficients=4,0,-0"), 2, {"--coefficients names 0 twice"});
  check_failure(run_command(sweep_base + " --labels reframing reframing"), 2, {"--labels names 'reframing' twice"});
  // Sampled, a cell draws as its prompt does alone: another label swept beside it changes nothing (regression: keyed
  // by its place in the sweep, so its baseline drew other numbers and adding a label changed every later cell).
  auto sampled_noticing = [&](const std::string& labels, const std::string& out) {
    REQUIRE(run_command(sweep_base.substr(0, sweep_base.rfind(" --output-dir")) + " --output-dir " + tmp.file(out) +
                        " --temperature 1 --seed 7 --max-new-tokens 4 --coefficients=8 --labels " + labels).exit_code == 0);
    Json ids = Json::array();
    for (const Json& cell : read_json_file(tmp.file(out + "/sweep.json"))["cells"]) {
      if (cell["label"] != "reframing") ids.push_back(cell["generated_ids"]);
    }
    return ids;
  };
  CHECK(sampled_noticing("noticing", "alone") == sampled_noticing("reframing,noticing", "beside"));
  check_failure(run_command(fmt::format("{} --probes-dir {} --text hi --device cpu --ablate reframing@2-x",
                                        tool("multi_probe_inference"), probes)),
                2, {"--ablate reframing@2-x: 'x' is not a layer number"});
  // Regression: a layer or a label the flags name that the model or the probes lack exited 1 in some tools, 2 in others.
  const std::string inference = fmt::format("{} --probes-dir {} --text hi --device cpu ", tool("multi_probe_inference"), probes);
  check_failure(run_command(inference + "--steer reframing@9=4"), 2, {"--steer reframing@9: layer 9 is out of range"});
  check_failure(run_command(inference + "--steer reframeing@2=4"), 2,
                {"--steer reframeing@2: ", "has no probe for the label 'reframeing' (its labels: ", "reframing"});
  check_failure(run_command(inference + "--layers 2,3"), 2, {"no probes for layer 3 (probes exist for layers 2)"});
  // Regression: a layer past 65535 read "out of range (at most 65535)", as if some probes could reach it.
  check_failure(run_command(inference + "--layers 70000"), 2, {"no probes for layer 70000 (probes exist for layers 2)"});
  check_failure(run_command(inference + "--layers 0-99999999"), 2,
                {"--layers 0-99999999: layer 99999999 is past what any model has (at most 65535)"});
  check_failure(run_command(inference + "--layer 9"), 2, {"--layer 9: ", "probes of layer 9, but the model in"});
  check_failure(run_command(fmt::format("{} --method probe --probes-dir {} --label nosuch --output {}",
                                        tool("make_steering_vectors"), probes, tmp.file("x.safetensors"))),
                2, {"--label nosuch: ", "has no probe for it (its labels: ", "reframing"});

  check_cells_as_alone(sweep, probes);
  check_summary(sweep);
  const std::string html = read_file(tmp.file("sweep/sweep.html"));
  CHECK(html.find("<svg") != std::string::npos);
  size_t charts = 0;
  for (size_t at = html.find("class=\"dose\""); at != std::string::npos; at = html.find("class=\"dose\"", at + 1)) ++charts;
  CHECK(charts == 2);
  CHECK(html.find("http") == std::string::npos);  // self-contained
}

TEST_CASE("a sweep of probes with one label has no off-target figures, and never writes over its inputs") {
  TempDir tmp;
  ProbeFixture fixture;
  fixture.layers = "2";
  fixture.epochs = 5;
  fixture.flags = "--labels reframing";
  fixture.output = "probes_one";
  const std::string probes = train_fixture_probes(tmp, fixture);
  testing::write_text(tmp.file("prompts.txt"), "The plan\n");
  const std::string base = fmt::format("{} --probes-dir {} --model {} --layer 2 --coefficients=0,4 --file {} "
                                       "--max-new-tokens 2 --device cpu -q --output-dir ",
                                       tool("steering_sweep"), probes, kGemmaModel, tmp.file("prompts.txt"));
  CommandResult r = run_command(base + tmp.file("sweep"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "reframing");
  const Json sweep = read_json_file(tmp.file("sweep/sweep.json"));
  for (const Json& p : sweep["summary"]) {
    for (const char* key : {"off_target_shift_min", "off_target_shift_max", "off_target_mean_abs_shift",
                            "off_target_score_min", "off_target_score_max"}) {
      CHECK_MESSAGE(p[key].is_null(), key);  // regression: 0, and a grey band drawn at 0
    }
  }
  CHECK(read_file(tmp.file("sweep/sweep.html")).find("<title>other labels' scores</title>") == std::string::npos);
  // --output-dir holding the probes: --overwrite would have deleted them once the sweep was written.
  check_failure(run_command(base + probes + " --overwrite"), 2, {"it holds the input", "which --overwrite would delete"});
  CHECK(is_regular_file(probes + "/probes.json"));
}

TEST_CASE("two directions ablated at one layer leave its rows orthogonal to both, not only to the last") {
  TempDir tmp;
  std::vector<float> first(64), second(64);
  for (size_t i = 0; i < 64; ++i) {
    first[i] = std::sin(0.7f * static_cast<float>(i)) + 0.2f;
    second[i] = first[i] + std::cos(1.3f * static_cast<float>(i));  // far from orthogonal to the first
  }
  capture::CaptureOptions o = three_action_capture(tmp, 30, "cpu");
  o.layers = "2";
  o.position = Position::kAll;
  o.output_dir = tmp.file("ablated");
  for (const std::vector<float>& v : {first, second}) o.steering.ops.push_back(SteeringOp::given(SteeringAction::kAblate, v, 2));
  capture::run_capture(o);
  const activations::ActivationFile file = activations::read_activation_file(tmp.file("ablated/layer_2_activations.h5"));
  const activations::SplitData& train = file.split(activations::Split::kTrain);
  const at::Tensor rows = at::from_blob(const_cast<float*>(train.activations.data()), {train.rows, train.hidden}, at::kFloat);
  // Regression: each direction was projected out in turn, so the second put part of the first back.
  for (const std::vector<float>& v : {first, second}) {
    at::Tensor u = at::tensor(v);
    u = u / u.norm();
    CHECK(at::matmul(rows, u).abs().max().item<double>() <= 1e-5 * rows.abs().max().item<double>());
  }
}

TEST_CASE("steering and vector layers past the model, or 'all' for a vector file, are bounded before they are spelled out") {
  TempDir tmp;
  const std::string probes = train_three_action_probes(tmp);
  // Regression: the range was spelled out up to a billion layers (std::bad_alloc) before its bound was checked.
  check_failure(run_command(fmt::format("{} --probes-dir {} --text hi --device cpu --ablate reframing@0-999999999",
                                        tool("multi_probe_inference"), probes)),
                2, {"--ablate reframing@0-999999999: layer 999999999 is out of range"});
  CommandResult r = run_command(fmt::format("{} --method probe --probes-dir {} --label reframing --layers all --output {}",
                                            tool("make_steering_vectors"), probes, tmp.file("all.safetensors")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(steering::read_vector_file(tmp.file("all.safetensors")).layers.size() == 1);  // the probes' layer 2
  check_failure(run_command(fmt::format("{} --method probe --probes-dir {} --label reframing --layers 0-999999999 --output {}",
                                        tool("make_steering_vectors"), probes, tmp.file("x.safetensors"))),
                2, {"--layers 0-999999999: layer 999999999 is out of range"});
}

TEST_CASE("steering_sweep with probes that read every token decodes each generation with its own steering") {
  TempDir tmp;
  ProbeFixture fixture = attention_fixture(3);
  fixture.flags = "--model-type ema";
  const std::string probes = train_fixture_probes(tmp, fixture);
  write_text(tmp.file("prompts.txt"), "I kept asking myself whether it was true\nLet me step back\n");
  // Regression: the batch's per-row vectors went to the one-row pass that scores each new token's text, which
  // refused them ("a steering vector per row holds 6 rows for a pass of 1 rows").
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --layer 2 --labels reframing --coefficients=-8,0,8 "
                                            "--file {} --max-new-tokens 3 --device cpu --output-dir {} -q",
                                            tool("steering_sweep"), probes, kGemmaModel, tmp.file("prompts.txt"),
                                            tmp.file("sweep")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(read_json_file(tmp.file("sweep/sweep.json"))["cells"].size() == 6);
}
