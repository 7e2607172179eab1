#include "capture/summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace probekit::capture {

namespace {

double per_second(double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

}  // namespace

Json summary_json(const CaptureSummary& s) {
  Json skipped = Json::array();
  for (const auto& line : s.skipped) skipped.push_back({{"line", line.line + 1}, {"reason", line.reason}});
  return {{"examples", s.examples},
          {"processed", s.processed},
          {"splits", {{"train", s.split_sizes[0]}, {"val", s.split_sizes[1]}, {"test", s.split_sizes[2]}}},
          {"layers", s.layers},
          {"files", s.files},
          {"label_names", s.label_names},
          {"tokens", s.tokens},
          {"computed_tokens", s.computed_tokens},
          {"batches", s.batches},
          {"padding_fraction", s.computed_tokens > 0 ? 1.0 - static_cast<double>(s.tokens) / s.computed_tokens : 0.0},
          {"truncated", s.truncated},
          {"skipped_lines", skipped},
          {"out_of_memory_retries", s.out_of_memory_retries},
          {"load_seconds", s.load_seconds},
          {"warm_up_seconds", s.warm_up_seconds},
          {"capture_seconds", s.capture_seconds},
          {"examples_per_second", per_second(static_cast<double>(s.processed), s.capture_seconds)},
          {"device", s.device},
          {"dtype", s.dtype},
          {"already_complete", s.already_complete}};
}

std::string summary_text(const CaptureSummary& s, int64_t max_length) {
  std::string out;
  if (s.already_complete) {
    out += "Nothing to do: the activation files are already complete.\n";
  } else {
    out += fmt::format(
        "Captured {} examples (train {}, val {}, test {}) at layers {} in {:.1f} s ({:.1f} examples/s, {:.0f} tokens/s)\n",
        s.examples, s.split_sizes[0], s.split_sizes[1], s.split_sizes[2], fmt::join(s.layers, ", "), s.capture_seconds,
        per_second(static_cast<double>(s.processed), s.capture_seconds),
        per_second(static_cast<double>(s.tokens), s.capture_seconds));
  }
  for (const std::string& file : s.files) out += fmt::format("  {}\n", file);
  if (s.truncated > 0) out += fmt::format("{} texts were cut to --max-length {}\n", s.truncated, max_length);
  if (!s.skipped.empty()) {
    out += fmt::format("{} invalid lines were skipped:\n", s.skipped.size());
    for (const auto& line : s.skipped) out += fmt::format("  {}\n", line.reason);
  }
  return out;
}

}  // namespace probekit::capture
