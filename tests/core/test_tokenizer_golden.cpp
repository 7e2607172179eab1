// Golden ids made by Hugging Face tokenizers 0.23: every case of the five small fixture tokenizers and of
// the real Gemma 3, Qwen 3 and Llama 3 tokenizer.json files, the 698 stress texts of fixtures/tokenizers/stress
// on all eight, and encode_batch against encode on all threads.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"
#include "common/json.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

using probekit::Json;
using probekit::tokenizer::Tokenizer;

namespace {

// "first difference at index 3: expected 518, got 517" with both id lists.
std::string describe_difference(const std::vector<int32_t>& expected, const std::vector<int32_t>& actual) {
  size_t index = 0;
  while (index < expected.size() && index < actual.size() && expected[index] == actual[index]) index++;
  std::string at = index < expected.size() && index < actual.size()
                       ? fmt::format("expected {}, got {}", expected[index], actual[index])
                       : fmt::format("lengths {} and {}", expected.size(), actual.size());
  return fmt::format("first difference at index {}: {}\n  expected {}\n  actual   {}", index, at,
                     fmt::join(expected, ", "), fmt::join(actual, ", "));
}

struct CaseCounts {
  size_t passed = 0;
  size_t total = 0;
};

// Checks every case of a cases.json against `tokenizer`; "decoded" is checked when present.
CaseCounts check_cases(const Tokenizer& tokenizer, const Json& cases, const std::string& name) {
  CaseCounts counts;
  for (const Json& c : cases.at("cases")) {
    auto text = c.at("text").get<std::string>();
    auto ids = c.at("ids").get<std::vector<int32_t>>();
    auto ids_no_special = c.at("ids_no_special").get<std::vector<int32_t>>();
    std::vector<int32_t> actual = tokenizer.encode(text, true);
    std::vector<int32_t> actual_no_special = tokenizer.encode(text, false);
    INFO(name, " text: ", Json(text).dump());
    CHECK_MESSAGE(actual == ids, "with special tokens, ", describe_difference(ids, actual));
    CHECK_MESSAGE(actual_no_special == ids_no_special, "without special tokens, ",
                  describe_difference(ids_no_special, actual_no_special));
    bool passed = actual == ids && actual_no_special == ids_no_special;
    if (c.contains("decoded")) {
      auto decoded = c.at("decoded").get<std::string>();
      std::string actual_decoded = tokenizer.decode(ids_no_special, false);
      CHECK_MESSAGE(actual_decoded == decoded, "decoded ", Json(actual_decoded).dump(), " expected ",
                    Json(decoded).dump());
      passed = passed && actual_decoded == decoded;
    }
    counts.passed += passed ? 1 : 0;
    counts.total++;
  }
  return counts;
}

void check_batch_equals_single(const Tokenizer& tokenizer, const Json& cases) {
  std::vector<std::string> texts;
  for (const Json& c : cases.at("cases")) texts.push_back(c.at("text").get<std::string>());
  // Repeated so that every OpenMP thread gets work and the per-thread caches are exercised.
  std::vector<std::string> repeated;
  for (int round = 0; round < 8; round++) repeated.insert(repeated.end(), texts.begin(), texts.end());
  for (bool add_special : {true, false}) {
    std::vector<std::vector<int32_t>> batch = tokenizer.encode_batch(repeated, add_special);
    REQUIRE(batch.size() == repeated.size());
    for (size_t i = 0; i < repeated.size(); i++) {
      INFO("text: ", Json(repeated[i]).dump());
      CHECK(batch[i] == tokenizer.encode(repeated[i], add_special));
    }
  }
}

std::string real_tokenizer_path(const std::string& name) {
  std::string path = std::string(PROBEKIT_TOKENIZER_CACHE) + "/" + name + "/tokenizer.json";
  if (!probekit::is_regular_file(path)) {
    FAIL("missing ", path, ": run scripts/fetch_tokenizers.sh to fetch the real tokenizer.json files");
  }
  return path;
}

// The cases and the stress cases of one tokenizer, and its batch encoding equal to one text at a time.
void check_golden_files(const Tokenizer& tokenizer, const std::string& name, const std::string& cases_path,
                        const std::string& stress_path) {
  Json cases = probekit::read_json_file(cases_path);
  CaseCounts counts = check_cases(tokenizer, cases, name);
  MESSAGE(name, ": ", counts.passed, "/", counts.total, " cases identical");
  check_batch_equals_single(tokenizer, cases);
  counts = check_cases(tokenizer, probekit::read_json_file(stress_path), name + " stress");
  MESSAGE(name, ": ", counts.passed, "/", counts.total, " stress cases identical");
}

}  // namespace

TEST_CASE("golden: the fixture tokenizers give the ids and text of HF tokenizers") {
  for (std::string name : {"bytelevel_llama3", "bytelevel_qwen", "bytelevel_gpt2", "spm_gemma", "spm_llama2"}) {
    std::string dir = PROBEKIT_FIXTURES "/tokenizers/" + name;
    check_golden_files(Tokenizer::from_file(dir + "/tokenizer.json"), name, dir + "/cases.json",
                       PROBEKIT_FIXTURES "/tokenizers/stress/" + name + ".json");
  }
}

TEST_CASE("golden: the real tokenizers loaded from their directories give transformers' AutoTokenizer ids") {
  // transformers 5.17 AutoTokenizer.from_pretrained(directory)("hello world"), tokenizer_config.json beside.
  const std::pair<std::string, std::vector<int32_t>> expected[] = {
      {"gemma3", {2, 23391, 1902}}, {"qwen3", {14990, 1879}}, {"llama3", {15339, 1917}}};
  for (const auto& entry : expected) {
    const auto& name = entry.first;
    const auto& ids = entry.second;
    std::string path = real_tokenizer_path(name);
    std::string dir = path.substr(0, path.rfind('/'));
    CHECK_MESSAGE(Tokenizer::from_file(dir).encode("hello world") == ids, name);
  }
}

TEST_CASE("golden: the real Gemma 3, Qwen 3 and Llama 3 tokenizers give the ids of HF tokenizers") {
  for (std::string name : {"gemma3", "qwen3", "llama3"}) {
    check_golden_files(Tokenizer::from_file(real_tokenizer_path(name)), name,
                       PROBEKIT_FIXTURES "/real_tokenizers/" + name + ".public.json",
                       PROBEKIT_FIXTURES "/real_tokenizers/" + name + ".stress.json");
  }
}
