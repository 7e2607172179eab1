// Steering against transformers (the fixtures' steering.json: a vector added, times a coefficient, to one decoder
// layer's output at every position by a forward hook; greedy, fp32): the same generations and logits, and the same
// final norm at the prompt's last token. Then what steering must keep: coefficient 0 (and a zero vector) changes no
// bit, ablation leaves the layer's output orthogonal to the direction, a probe's own direction moves its score the
// way the sign says, and vector files (ours and GGUF control vectors) round-trip.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture_runs.h"
#include "common/files.h"
#include "common/json.h"
#include "generation/transcript.h"
#include "generation_checks.h"
#include "inference/engine.h"
#include "readout/readout.h"
#include "steering/steering.h"
#include "steering/vector_file.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

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
  spec.file_additions.push_back({vector_path, expected["coefficient"].get<double>()});
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

}  // namespace

TEST_CASE("steered generation equals transformers' with a forward hook adding the vector (gemma3_text, llama, qwen3_moe, gpt2)") {
  TempDir tmp;
  for (const char* name : {"gemma3_text", "llama", "qwen3_moe", "gpt2"}) {
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
  r = run_command(fmt::format("{} generate --model {} --text hi --steer-vector {}=2 --output {}", tool("inspect_model"),
                              kGemmaModel, tmp.file("narrow.safetensors"), tmp.file("x.json")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "(layer 1): the vector has 32 values, the model's hidden size is 64");
  r = run_command(fmt::format("{} generate --model {} --text hi --steer-vector {} --output {}", tool("inspect_model"),
                              kGemmaModel, tmp.file("deep.safetensors"), tmp.file("x.json")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "layer 9 is out of range: the model (gemma3_text) has layers 0 to 5");
  r = run_command(fmt::format("{} generate --model {} --text hi --steer reframing@2=4 --output {}", tool("inspect_model"),
                              kGemmaModel, tmp.file("x.json")));
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "give --probes-dir");
  r = run_command(fmt::format("{} generate --model {} --text hi --steer reframing@two=4 --output {}", tool("inspect_model"),
                              kGemmaModel, tmp.file("x.json")));
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--steer reframing@two=4: expected LABEL@LAYER=COEF");
}
