#include "sites/layers.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace probekit {

std::vector<int64_t> default_layers(int64_t n) {
  std::vector<int64_t> layers = {n / 4, n / 2, 3 * n / 4, n - 1};
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

std::vector<int64_t> parse_layers(const std::string& text, int64_t num_layers) {
  if (text.empty()) return default_layers(num_layers);
  return parse_index_list("--layers", text, num_layers, "layer", "model");
}

std::vector<int64_t> parse_index_list(const std::string& flag, const std::string& text, int64_t count,
                                      const std::string& noun, const std::string& owner) {
  std::vector<int64_t> indices;
  if (text == "all") {
    for (int64_t i = 0; i < count; ++i) indices.push_back(i);
    return indices;
  }
  std::string normalized = text;
  std::replace(normalized.begin(), normalized.end(), ',', ' ');
  std::istringstream stream(normalized);
  std::string item;
  // A list may be thousands of items long: messages quote it cut short.
  auto cut = [](const std::string& s) { return s.size() > 60 ? s.substr(0, 57) + "..." : s; };
  const std::string shown = cut(text);
  auto out_of_range = [&](const std::string& index) {
    if (owner.empty()) fail_usage("{} {}: {} {} is past what any model has (at most {})", flag, shown, noun, index, count - 1);
    fail_usage("{} {}: {} {} is out of range: the {} has {} {}s (0 to {})", flag, shown, noun, index, owner, count, noun,
               count - 1);
  };
  auto number = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
      fail_usage("{} {}: '{}' is not a {} number (use e.g. 8,17,25, a range 21-30, or all)", flag, shown, cut(s), noun);
    }
    if (s.size() > 9) out_of_range(cut(s));
    return std::stoll(s);
  };
  while (stream >> item) {
    auto dash = item.find('-');
    if (dash != std::string::npos && dash > 0) {
      int64_t first = number(item.substr(0, dash)), last = number(item.substr(dash + 1));
      if (last < first) fail_usage("{} {}: range {} is empty", flag, shown, cut(item));
      if (last >= count) out_of_range(std::to_string(last));  // before the range is spelled out: it may be a billion long
      for (int64_t i = first; i <= last; ++i) indices.push_back(i);
    } else {
      indices.push_back(number(item));
    }
  }
  if (indices.empty()) fail_usage("{} {}: no {} given", flag, shown, noun);
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  if (!owner.empty() && indices.back() >= count) out_of_range(std::to_string(indices.back()));
  return indices;
}

}  // namespace probekit
