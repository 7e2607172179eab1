// The readout recipe's two codecs (JSON for probes.json, HDF5 attributes for activation files): what one writes the
// other reads back, a missing field takes the value files had before it existed, and a malformed one is refused
// naming the field; recipe_difference names the first field rows depend on.
#include <doctest/doctest.h>

#include <string>

#include "activations/readout_recipe.h"
#include "io/hdf5.h"
#include "test_util.h"

using namespace probekit;
using activations::ReadoutRecipe;
using probekit::testing::TempDir;

namespace {

ReadoutRecipe steered_recipe() {
  ReadoutRecipe recipe;
  recipe.model_name = "org/model";
  recipe.model_revision = "abc123";
  recipe.model_fingerprint = "f00d";
  recipe.site = Site::kMlpOut;
  recipe.position = Position::kMean;
  recipe.prompt_suffix = "\nAnswer:";
  recipe.max_length = 128;
  recipe.dtype = "bf16";
  recipe.steering = Json::parse(R"({"site": "resid_post", "add": [{"layer": 2, "coefficient": 4.0}], "ablate": []})");
  return recipe;
}

void check_equal(const ReadoutRecipe& a, const ReadoutRecipe& b) {
  CHECK(a.identity() == b.identity());
  CHECK(a.to_json() == b.to_json());
}

}  // namespace

TEST_CASE("readout recipe: JSON written is read back, absent fields take the defaults files had") {
  const ReadoutRecipe recipe = steered_recipe();
  const Json json = recipe.to_json();
  CHECK(json.at("site") == "mlp_out");
  CHECK(json.at("position") == "mean");
  CHECK(json.at("max_length") == 128);
  CHECK(json.at("steering").at("add")[0].at("layer") == 2);
  check_equal(ReadoutRecipe::from_json(json, "probes.json"), recipe);

  const ReadoutRecipe empty = ReadoutRecipe::from_json(Json::object(), "probes.json");
  CHECK(empty.site == Site::kResidPost);
  CHECK(empty.position == Position::kLast);
  CHECK(empty.prompt_suffix == activations::kDefaultPromptSuffix);
  CHECK(empty.max_length == 0);
  CHECK(empty.steering.is_null());
  CHECK(empty.to_json().at("steering").is_null());
}

TEST_CASE("readout recipe: a malformed field is refused naming where and the field") {
  auto refusal = [](const char* text) {
    try {
      ReadoutRecipe::from_json(Json::parse(text), "dir/probes.json: readout");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_CONTAINS(refusal(R"({"site": "nowhere"})"), "dir/probes.json: readout: 'site' is 'nowhere', not a site");
  CHECK_CONTAINS(refusal(R"({"position": "first"})"), "'position' is 'first', expected last, mean, max or all");
  CHECK_CONTAINS(refusal(R"({"max_length": -3})"), "'max_length' is -3, expected a non-negative integer");
  CHECK_CONTAINS(refusal(R"({"max_length": 2.5})"), "'max_length' must be an integer, got 2.5");
  CHECK_CONTAINS(refusal(R"({"prompt_suffix": 7})"), "'prompt_suffix' must be a string, got 7");
  CHECK_CONTAINS(refusal(R"({"steering": [1]})"), "'steering' must be an object or null, got [1]");
  CHECK_CONTAINS(refusal(R"([1, 2])"), "dir/probes.json: readout: expected an object");
}

TEST_CASE("readout recipe: HDF5 attributes written are read back; an old file's missing ones take their defaults") {
  TempDir tmp;
  const std::string path = tmp.file("recipe.h5");
  {
    hdf5::Handle file = hdf5::create_file(path);
    steered_recipe().write_attributes(file.get());
  }
  {
    hdf5::Handle file = hdf5::open_file(path, false);
    check_equal(ReadoutRecipe::read_attributes(file.get(), path), steered_recipe());
  }
  const std::string old = tmp.file("old.h5");
  {
    // A reference file: no recipe attributes at all, and a file made before steering was recorded.
    hdf5::Handle file = hdf5::create_file(old);
    hdf5::set_attribute(file.get(), "model_name", std::string("org/model"));
  }
  hdf5::Handle file = hdf5::open_file(old, false);
  const ReadoutRecipe read = ReadoutRecipe::read_attributes(file.get(), old);
  CHECK(read.model_name == "org/model");
  CHECK(read.prompt_suffix == activations::kDefaultPromptSuffix);
  CHECK(read.site == Site::kResidPost);
  CHECK(read.steering.is_null());
}

TEST_CASE("recipe_difference names the first field rows depend on, and ignores the model's name and the dtype") {
  const ReadoutRecipe a = steered_recipe();
  ReadoutRecipe b = a;
  b.model_name = "another/name";
  b.model_revision = "";
  b.dtype = "fp32";
  CHECK(activations::recipe_difference(a, b, "A", "B").empty());
  b.position = Position::kLast;
  CHECK(activations::recipe_difference(a, b, "A", "B") == "position: \"mean\" in A, \"last\" in B");
  b = a;
  b.prompt_suffix = "";
  CHECK(activations::recipe_difference(a, b, "A", "B") == "prompt_suffix: \"\\nAnswer:\" in A, none in B");
  b = a;
  b.steering = Json();
  CHECK_CONTAINS(activations::recipe_difference(a, b, "A", "B"), "steering: {\"ablate\":[]");
  CHECK_CONTAINS(activations::recipe_difference(a, b, "A", "B"), "in A, none in B");
}

TEST_CASE("regression: recipe_difference shows a suffix that is not UTF-8 (read from a file's attribute) instead of failing") {
  // The suffix was serialized strictly: its stray byte made the serializer throw its own error in place of the difference.
  const ReadoutRecipe a = steered_recipe();
  ReadoutRecipe b = a;
  b.prompt_suffix = "\nAnswer\xE6:";
  CHECK(activations::recipe_difference(a, b, "A", "B") == "prompt_suffix: \"\\nAnswer:\" in A, \"\\nAnswer\xEF\xBF\xBD:\" in B");
}
