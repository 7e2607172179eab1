#include "data/example_generator.h"

#include <algorithm>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "common/json.h"
#include "data/example_cues.h"
#include "data/python_random.h"

namespace probekit::data {

const std::vector<std::string>& example_label_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const LabelCues& cues : kExampleLabelCues) out.emplace_back(cues.label);
    return out;
  }();
  return names;
}

std::vector<std::string> generate_example_lines(const ExampleSetOptions& options) {
  if (options.labels < 1 || options.labels > static_cast<int64_t>(kExampleLabelCues.size())) {
    fail_usage("--labels {}: between 1 and {}", options.labels, kExampleLabelCues.size());
  }
  if (options.per_label < 1) fail_usage("--per-label must be positive");
  if (options.min_chars < 1 || options.max_chars < options.min_chars) fail_usage("need 1 <= --min-chars <= --max-chars");
  PythonRandom random(options.seed);
  auto pick = [&](const auto& items) { return items[random.randbelow(items.size())]; };
  std::vector<std::string> lines;
  for (int64_t i = 0; i < options.per_label; ++i) {
    for (int64_t l = 0; l < options.labels; ++l) {
      const LabelCues& cues = kExampleLabelCues[static_cast<size_t>(l)];
      auto target = options.min_chars + static_cast<int64_t>(random.randbelow(static_cast<uint64_t>(options.max_chars - options.min_chars + 1)));
      std::string text = std::string(pick(kExampleSettings)) + " " + pick(cues.cues);
      // Neutral filler up to the drawn length, with a second cue half way for longer texts.
      bool second_cue = target > 300;
      while (static_cast<int64_t>(text.size()) < target) {
        if (second_cue && static_cast<int64_t>(text.size()) > target / 2) {
          text += std::string(" ") + pick(cues.cues);
          second_cue = false;
        } else {
          text += std::string(" ") + pick(kExampleFillers);
        }
      }
      if (static_cast<int64_t>(text.size()) > options.max_chars) {
        auto cut = text.rfind(' ', static_cast<size_t>(options.max_chars));
        text.resize(cut == std::string::npos || cut < static_cast<size_t>(options.min_chars) ? static_cast<size_t>(options.max_chars) : cut);
      }
      lines.push_back(Json({{"text", text}, {"cognitive_action", cues.label}, {"domain", pick(kExampleDomains)}}).dump());
    }
  }
  return lines;
}

size_t write_example_dataset(const std::string& path, const ExampleSetOptions& options, bool overwrite) {
  check_output_file(path, overwrite);
  std::vector<std::string> lines = generate_example_lines(options);
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  std::string directory = parent_directory(path);
  if (!directory.empty()) make_directories(directory);
  write_file_atomic(path, text);
  return lines.size();
}

}  // namespace probekit::data
