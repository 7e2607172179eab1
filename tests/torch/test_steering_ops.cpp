// Steering as a list of operations: the flags parse into operations, `resolve` turns each (action x source) into
// vectors by one loop, in the order given, with "all" layers expanded and each message naming the operation.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "steering/steering.h"
#include "steering/vector_file.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::steering;
using probekit::testing::TempDir;

namespace {

model::ModelConfig small_config() {
  model::ModelConfig config;
  config.text_model_type = "gemma3_text";
  config.num_layers = 4;
  config.hidden_size = 3;
  return config;
}

std::string refusal(const SteeringSpec& spec) {
  try {
    resolve(spec, small_config());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "resolved";
}

}  // namespace

TEST_CASE("the steering flags parse into operations of one list") {
  const SteeringOp add = parse_probe_addition("reframing@2=-1.5");
  CHECK(add.action == SteeringAction::kAdd);
  CHECK(add.source == SteeringSource::kProbe);
  CHECK(add.label == "reframing");
  CHECK(add.layers == "2");
  CHECK(add.coefficient == -1.5);
  const SteeringOp ablate = parse_probe_ablation("a@b@1-3");
  CHECK(ablate.action == SteeringAction::kAblate);
  CHECK(ablate.label == "a@b");
  CHECK(ablate.layers == "1-3");
  const SteeringOp file = parse_file_addition("v=x.safetensors=2");
  CHECK(file.source == SteeringSource::kFile);
  CHECK(file.path == "v=x.safetensors");
  CHECK(file.coefficient == 2);
  CHECK(parse_file_addition("plain.gguf").coefficient == 1);
  CHECK_THROWS_WITH(parse_probe_addition("reframing@two=1"), doctest::Contains("--steer reframing@two=1: the layer 'two' is not"));
}

TEST_CASE("resolve: every action and source through one loop, in order, layers 'all' expanded") {
  TempDir tmp;
  VectorFile file;
  file.layers = {{1, {0, 3, 4}}, {3, {1, 1, 1}}};
  write_vector_file(tmp.file("v.safetensors"), file);

  SteeringSpec spec;
  spec.ops.push_back(SteeringOp::given(SteeringAction::kAdd, {1, 0, 0}, 2, 0.5));
  spec.ops.push_back(SteeringOp::file(SteeringAction::kAdd, tmp.file("v.safetensors"), 2));
  spec.ops.push_back(SteeringOp::file(SteeringAction::kAblate, tmp.file("v.safetensors")));
  SteeringOp everywhere = SteeringOp::given(SteeringAction::kAblate, {0, 2, 0}, 0);
  everywhere.layers = "all";
  spec.ops.push_back(everywhere);
  CHECK_FALSE(spec.needs_probes());

  const SteeringVectors vectors = resolve(spec, small_config());
  REQUIRE(vectors.additions.size() == 3);
  CHECK(vectors.additions[0].layer == 2);
  CHECK(vectors.additions[0].coefficient == 0.5);
  CHECK(vectors.additions[0].source == Json({{"vector", true}}));
  CHECK(vectors.additions[1].layer == 1);
  CHECK(vectors.additions[2].layer == 3);
  CHECK(vectors.additions[2].coefficient == 2);
  CHECK(vectors.additions[2].source == Json({{"file", tmp.file("v.safetensors")}}));
  REQUIRE(vectors.ablations.size() == 2 + 4);
  CHECK(vectors.ablations[0].layer == 1);
  CHECK(at::allclose(vectors.ablations[0].unit, at::tensor({0.0f, 0.6f, 0.8f})));
  for (int64_t layer = 0; layer < 4; ++layer) {
    CHECK(vectors.ablations[static_cast<size_t>(2 + layer)].layer == layer);
    CHECK(at::allclose(vectors.ablations[static_cast<size_t>(2 + layer)].unit, at::tensor({0.0f, 1.0f, 0.0f})));
  }
}

TEST_CASE("resolve: a refusal names the operation as it was given") {
  SteeringSpec spec;
  spec.ops.push_back(SteeringOp::given(SteeringAction::kAdd, {1, 0, 0}, 9));
  CHECK_CONTAINS(refusal(spec), "steer vector at layer 9: layer 9 is out of range: the model (gemma3_text) has layers 0 to 3");
  spec.ops = {SteeringOp::given(SteeringAction::kAdd, {1, 0, 0}, -1)};
  CHECK_CONTAINS(refusal(spec), "steer vector at layer -1: layer -1 is out of range");
  spec.ops = {SteeringOp::given(SteeringAction::kAblate, {0, 0, 0}, 1)};
  CHECK_CONTAINS(refusal(spec), "ablate vector at layer 1: a zero vector has no direction to project out");
  spec.ops = {SteeringOp::given(SteeringAction::kAdd, {1, 0}, 1)};
  CHECK_CONTAINS(refusal(spec), "steer vector at layer 1: the vector has 2 values, the model's hidden size is 3");
  spec.ops = {SteeringOp::probe(SteeringAction::kAblate, "reframing", "1")};
  CHECK(spec.needs_probes());
  CHECK_CONTAINS(refusal(spec), "give --probes-dir");
}

TEST_CASE("steering values are checked where they are given: the coefficient, the file name, the layers of --ablate") {
  for (const char* bad : {"reframing@17=inf", "reframing@17=nan", "reframing@17=1e30", "reframing@17=-2e6", "reframing@17=4x"}) {
    CAPTURE(bad);
    const std::string expected = std::string("--steer ") + bad + ": the coefficient";
    CHECK_THROWS_WITH_AS(parse_probe_addition(bad), doctest::Contains(expected.c_str()), UsageError);
  }
  CHECK_THROWS_WITH_AS(parse_probe_addition("reframing@1e30=-2e6"), doctest::Contains("the layer '1e30' is not a layer"),
                       UsageError);
  CHECK(parse_probe_addition("reframing@17=-1e6").coefficient == -1e6);
  // A missing file's '=abc' is a bad coefficient; a file whose name holds '=' is that file.
  CHECK_THROWS_WITH_AS(parse_file_addition("missing.safetensors=abc"),
                       doctest::Contains("--steer-vector missing.safetensors=abc: the coefficient 'abc' is not a number"),
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_file_addition("missing.safetensors=1e9"), doctest::Contains("past 1e+06"), UsageError);
  testing::TempDir tmp;
  const std::string odd = tmp.file("a=b.safetensors");
  testing::write_text(odd, "");
  CHECK(parse_file_addition(odd).path == odd);
  CHECK(parse_file_addition(odd + "=2").coefficient == 2);
  CHECK_THROWS_AS(check_coefficient(1e7, "steer[0]"), UsageError);
}
