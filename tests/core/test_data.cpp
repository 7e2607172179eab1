// Python's random module, the reference's stratified split, and the JSONL dataset reader.
#include <doctest/doctest.h>

#include "common/error.h"
#include "common/json.h"
#include "data/dataset.h"
#include "data/python_random.h"
#include "data/reference_labels.h"
#include "data/splits.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::TempDir;
using probekit::testing::write_text;

namespace {
Json python_outputs() { return read_json_file(std::string(PROBEKIT_FIXTURES) + "/splits/python_splits.json"); }
}  // namespace

TEST_CASE("the Mersenne Twister seeded as random.seed(n) matches CPython") {
  const Json outputs = python_outputs();
  for (const Json& c : outputs["raw"]) {
    data::PythonRandom random(c["seed"].get<uint64_t>());
    for (const Json& expected : c["outputs"]) {
      CHECK_MESSAGE(random.getrandbits(32) == expected.get<uint64_t>(), "seed ", c["seed"].dump());
    }
  }
}

TEST_CASE("shuffle matches random.shuffle") {
  const Json outputs = python_outputs();
  for (const Json& c : outputs["shuffles"]) {
    data::PythonRandom random(c["seed"].get<uint64_t>());
    std::vector<int64_t> items(c["n"].get<size_t>());
    for (size_t i = 0; i < items.size(); ++i) items[i] = static_cast<int64_t>(i);
    random.shuffle(items);
    CHECK(items == c["result"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("stratified splits equal the reference's membership and order") {
  int checked = 0;
  const Json outputs = python_outputs();
  for (const Json& c : outputs["splits"]) {
    auto labels = c["labels"].get<std::vector<std::string>>();
    auto r = c["ratios"].get<std::vector<double>>();
    auto splits = data::stratified_split(labels, data::SplitRatios{r[0], r[1], r[2]}, c["seed"].get<uint64_t>());
    for (size_t s = 0; s < 3; ++s) {
      CHECK_MESSAGE(splits[s] == c["splits"][s].get<std::vector<int64_t>>(), c["name"].get<std::string>(), " seed ",
                    c["seed"].dump(), " ratios ", c["ratios"].dump(), " split ", s);
    }
    ++checked;
  }
  CHECK(checked >= 19);
}

TEST_CASE("split ratios are validated") {
  CHECK(data::parse_split_ratios("0.8,0.1,0.1").train == 0.8);
  CHECK_THROWS_AS(data::parse_split_ratios("0.7,0.2"), UsageError);
  CHECK_THROWS_AS(data::parse_split_ratios("0.7,0.2,0.2"), UsageError);
  CHECK_THROWS_AS(data::parse_split_ratios("0.7,x,0.3"), UsageError);
}

TEST_CASE("datasets in the reference's two formats, labels indexed as the reference does, blank lines ignored") {
  TempDir tmp;
  std::string path = tmp.file("d.jsonl");
  write_text(path,
             "{\"text\": \"b text\", \"cognitive_action\": \"zooming_in\", \"domain\": \"work\"}\n"
             "\n"
             "{\"text\": \"a text\", \"cognitive_action\": \"analyzing\"}\r\n"
             "{\"text\": \"c text\", \"cognitive_action\": \"zooming_in\", \"domain\": 3}\n");
  data::DatasetOptions options;
  options.keep_fields = {"domain"};
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.label_field == "cognitive_action");
  REQUIRE(d.examples.size() == 3);
  // Its cognitive actions index the reference's sorted list of 45, whatever subset the file holds.
  CHECK(d.label_names == data::reference_label_names());
  CHECK(d.labels == std::vector<int64_t>{43, 3, 43});  // zooming_in, analyzing
  CHECK(d.examples[1].line == 2);
  CHECK(d.examples[0].kept[0] == "work");
  CHECK(d.examples[1].kept[0] == "");
  CHECK(d.examples[2].kept[0] == "3");

  // Other datasets index their sorted distinct labels: a label outside the 45, another label field.
  write_text(path, "{\"text\": \"a\", \"cognitive_action\": \"zooming_in\"}\n{\"text\": \"b\", \"cognitive_action\": \"daydreaming\"}\n");
  d = data::read_dataset(path, {});
  CHECK(d.label_names == std::vector<std::string>{"daydreaming", "zooming_in"});
  CHECK(d.labels == std::vector<int64_t>{1, 0});
  data::DatasetOptions topic;
  topic.label_field = "topic";
  write_text(path, "{\"text\": \"a\", \"topic\": \"zooming_in\"}\n{\"text\": \"b\", \"topic\": \"analyzing\"}\n");
  CHECK(data::read_dataset(path, topic).label_names == std::vector<std::string>{"analyzing", "zooming_in"});

  write_text(path, "{\"text\": \"good\", \"sentiment\": \"positive\", \"cognitive_action\": \"x\"}\n");
  CHECK(data::read_dataset(path, {}).label_field == "sentiment");
  options = {};
  options.max_examples = 1;
  write_text(path, "{\"text\": \"a\", \"sentiment\": \"positive\"}\n{\"text\": \"b\", \"sentiment\": \"negative\"}\n");
  CHECK(data::read_dataset(path, options).examples.size() == 1);
}

TEST_CASE("bad dataset lines name the file, the line and the field") {
  TempDir tmp;
  std::string path = tmp.file("bad.jsonl");
  auto error_of = [&](const std::string& contents, data::DatasetOptions options = {}) -> std::string {
    write_text(path, contents);
    try {
      data::read_dataset(path, options);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    FAIL("expected an error for " << contents);
    return "";
  };
  std::string good = "{\"text\": \"fine\", \"cognitive_action\": \"noticing\"}\n";
  CHECK_CONTAINS(error_of(good + "{\"text\": \"broken\n"), "bad.jsonl:2: invalid JSON");
  CHECK_CONTAINS(error_of(good + "{\"cognitive_action\": \"noticing\"}\n"), "bad.jsonl:2: missing field 'text'");
  CHECK_CONTAINS(error_of(good + "{\"text\": \"  \", \"cognitive_action\": \"noticing\"}\n"), "bad.jsonl:2: field 'text' is empty");
  CHECK_CONTAINS(error_of(good + "{\"text\": 5, \"cognitive_action\": \"noticing\"}\n"), "must be a string");
  CHECK_CONTAINS(error_of(good + "{\"text\": \"x\"}\n"), "missing label field 'cognitive_action'");
  CHECK_CONTAINS(error_of("{\"text\": \"x\", \"topic\": \"y\"}\n"), "unknown label field");
  CHECK_CONTAINS(error_of(good + "{\"text\": \"caf\xe9\", \"cognitive_action\": \"noticing\"}\n"), "bad.jsonl:2: the line is not valid UTF-8");
  CHECK_CONTAINS(error_of(good + "[1, 2]\n"), "expected a JSON object");
  CHECK_CONTAINS(error_of(""), "no usable examples");
  data::DatasetOptions labelled;
  labelled.label_field = "topic";
  CHECK_CONTAINS(error_of(good, labelled), "missing label field 'topic'");
}

TEST_CASE("fuzz regression (fuzz_dataset): a number beyond a double's range is a bad line, not a crash") {
  // nlohmann's parser throws out_of_range rather than parse_error for it, which escaped the line's context.
  TempDir tmp;
  std::string path = tmp.file("overflow.jsonl");
  write_text(path, "{\"text\": \"fine\", \"cognitive_action\": \"noticing\"}\n2e308\n{\"text\": \"x\", \"score\": -1e999}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, {}), doctest::Contains("overflow.jsonl:2: invalid JSON: number overflow parsing '2e308'"),
                       std::invalid_argument);
  data::DatasetOptions options;
  options.skip_invalid = true;
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.examples.size() == 1);
  REQUIRE(d.skipped.size() == 2);
  CHECK_CONTAINS(d.skipped[1].reason, "overflow.jsonl:3: invalid JSON: number overflow");
}

TEST_CASE("skip_invalid counts and reports bad lines instead of failing") {
  TempDir tmp;
  std::string path = tmp.file("mixed.jsonl");
  write_text(path,
             "{\"text\": \"one\", \"cognitive_action\": \"a\"}\n"
             "not json\n"
             "{\"text\": \"\", \"cognitive_action\": \"a\"}\n"
             "{\"text\": \"two\", \"cognitive_action\": \"b\"}\n");
  data::DatasetOptions options;
  options.skip_invalid = true;
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.examples.size() == 2);
  REQUIRE(d.skipped.size() == 2);
  CHECK(d.skipped[0].line == 1);
  CHECK_CONTAINS(d.skipped[1].reason, "is empty");
}
