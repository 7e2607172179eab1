// tokenizer_bench: how fast a tokenizer.json loads and encodes, single-threaded and in batches, to compare
// with Hugging Face tokenizers (bench/python_tokenizers_bench.py measures it the same way).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "cli/cli.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A text from a JSON value: a string, or an object's `field`.
std::string text_of(const Json& value, const std::string& field, const std::string& source) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains(field) && value[field].is_string()) return value[field].get<std::string>();
  fail("{}: expected strings or objects with a string \"{}\"", source, field);
}

// Texts from JSON Lines, or from a JSON array (or an object whose "cases" or "texts" is one).
std::vector<std::string> read_texts(const std::string& path, const std::string& field) {
  std::vector<std::string> texts;
  if (path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0) {
    std::ifstream in(path);
    if (!in) fail("{}: cannot open", path);
    std::string line;
    size_t number = 0;
    while (std::getline(in, line)) {
      number++;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      texts.push_back(text_of(parse_json(line, fmt::format("{} line {}", path, number)), field, path));
    }
    return texts;
  }
  Json document = read_json_file(path);
  if (document.is_object()) document = document.contains("cases") ? document["cases"] : document.value("texts", Json());
  if (!document.is_array()) fail("{}: expected an array of texts", path);
  for (const Json& item : document) texts.push_back(text_of(item, field, path));
  return texts;
}

// Compares encodings with the "ids" of a cases file written by python_tokenizers_bench.py --dump-ids over the
// same texts; returns how many are identical and throws at the first text that differs.
size_t check_expected_ids(const std::string& path, const std::vector<std::string>& texts,
                          const std::vector<std::vector<int32_t>>& encodings) {
  Json cases = read_json_file(path).at("cases");
  if (cases.size() != texts.size()) fail("{}: {} cases for {} texts", path, cases.size(), texts.size());
  for (size_t i = 0; i < texts.size(); i++) {
    if (cases[i].at("text").get<std::string>() != texts[i]) fail("{}: case {} is another text", path, i);
    auto expected = cases[i].at("ids").get<std::vector<int32_t>>();
    if (expected != encodings[i]) {
      size_t at = 0;
      while (at < expected.size() && at < encodings[i].size() && expected[at] == encodings[i][at]) at++;
      fail("{}: text {} ({}) differs at id {}: expected {}, got {}", path, i, Json(texts[i]).dump(), at,
           Json(expected).dump(), Json(encodings[i]).dump());
    }
  }
  return texts.size();
}

size_t count_code_points(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

int main(int argc, char** argv) {
  ToolCommandLine tool("Measure tokenizer load time and encode throughput");
  std::string tokenizer_path, texts_path, field = "text", suffix, expect_ids;
  int repeat = 3;
  tool.app.add_option("--tokenizer", tokenizer_path, "tokenizer.json or a checkpoint directory")->required();
  tool.app.add_option("--texts", texts_path, "texts as .jsonl or .json")->required();
  tool.app.add_option("--field", field, "the text field of JSON objects")->capture_default_str();
  tool.app.add_option("--suffix", suffix, "appended to every text (e.g. the anchor prompt)");
  tool.app.add_option("--expect-ids", expect_ids, "cases file from python_tokenizers_bench.py --dump-ids to compare with");
  tool.app.add_option("--repeat", repeat, "timed passes; the fastest counts")->capture_default_str()->check(CLI::PositiveNumber);

  return tool.run(argc, argv, [&] {
    std::vector<std::string> texts = read_texts(texts_path, field);
    if (texts.empty()) fail_usage("{}: no texts", texts_path);
    size_t chars = 0;
    for (std::string& text : texts) {
      text += suffix;
      chars += count_code_points(text);
    }
    int threads = tool.common.threads > 0 ? tool.common.threads : omp_get_num_procs();

    double load_seconds = 1e30;
    std::optional<tokenizer::Tokenizer> tokenizer;
    for (int i = 0; i < 3; i++) {
      auto start = std::chrono::steady_clock::now();
      tokenizer.emplace(tokenizer::Tokenizer::from_file(tokenizer_path));
      load_seconds = std::min(load_seconds, seconds_since(start));
    }

    size_t tokens = 0;
    double single_seconds = 1e30;
    for (int pass = 0; pass < repeat; pass++) {
      tokens = 0;
      auto start = std::chrono::steady_clock::now();
      for (const std::string& text : texts) tokens += tokenizer->encode(text).size();
      single_seconds = std::min(single_seconds, seconds_since(start));
    }

    omp_set_num_threads(threads);
    double batch_seconds = 1e30;
    std::vector<std::vector<int32_t>> batch;
    for (int pass = 0; pass < repeat; pass++) {
      auto start = std::chrono::steady_clock::now();
      batch = tokenizer->encode_batch(texts);
      batch_seconds = std::min(batch_seconds, seconds_since(start));
    }
    if (!expect_ids.empty()) {
      fmt::print("ids identical to {}: {}/{} texts\n", expect_ids, check_expected_ids(expect_ids, texts, batch),
                 texts.size());
    }

    Json report = {{"tokenizer", tokenizer_path},
                   {"texts", texts.size()},
                   {"tokens", tokens},
                   {"chars", chars},
                   {"load_s", load_seconds},
                   {"single_tokens_per_s", tokens / single_seconds},
                   {"single_chars_per_s", chars / single_seconds},
                   {"batch_threads", threads},
                   {"batch_tokens_per_s", tokens / batch_seconds}};
    fmt::print("{}\n", report.dump());
    fmt::print("load {:.3f} s | single thread {:.3f} M tokens/s, {:.2f} M chars/s | {} threads {:.3f} M tokens/s "
               "({} texts, {} tokens)\n",
               load_seconds, tokens / single_seconds / 1e6, chars / single_seconds / 1e6, threads,
               tokens / batch_seconds / 1e6, texts.size(), tokens);
  });
}
