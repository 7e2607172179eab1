// A generator of labelled example texts (the project writes its own data; no dataset can be downloaded):
// each text is a first-person situation, one or two sentences that show the label's cognitive action, and
// neutral filler, until it reaches a length drawn from [min_chars, max_chars]. With all 45 labels and 100
// texts each of 250-750 characters it is the benchmark workload of the reference's shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace probekit::data {

struct ExampleSetOptions {
  int64_t labels = 8;          // how many labels (the first N of the built-in list), at most 45
  int64_t per_label = 40;
  int64_t min_chars = 120, max_chars = 400;
  uint64_t seed = 1;
};

/// The built-in label names (the reference's 45 cognitive actions, most distinct first).
const std::vector<std::string>& example_label_names();

/// JSONL lines {"text", "cognitive_action", "domain"}, labels interleaved so any prefix is balanced.
std::vector<std::string> generate_example_lines(const ExampleSetOptions& options);

/// Writes the generated lines to `path` under the overwrite rule (common/outputs.h); returns how many.
size_t write_example_dataset(const std::string& path, const ExampleSetOptions& options, bool overwrite);

}  // namespace probekit::data
