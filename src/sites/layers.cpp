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
  std::vector<int64_t> layers;
  if (text == "all") {
    for (int64_t i = 0; i < num_layers; ++i) layers.push_back(i);
    return layers;
  }
  std::string normalized = text;
  std::replace(normalized.begin(), normalized.end(), ',', ' ');
  std::istringstream stream(normalized);
  std::string item;
  auto number = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9) {
      fail_usage("--layers {}: '{}' is not a layer number (use e.g. 8,17,25, a range 21-30, or all)", text, s);
    }
    return std::stoll(s);
  };
  while (stream >> item) {
    auto dash = item.find('-');
    if (dash != std::string::npos && dash > 0) {
      int64_t first = number(item.substr(0, dash)), last = number(item.substr(dash + 1));
      if (last < first) fail_usage("--layers {}: range {} is empty", text, item);
      for (int64_t i = first; i <= last; ++i) layers.push_back(i);
    } else {
      layers.push_back(number(item));
    }
  }
  if (layers.empty()) fail_usage("--layers {}: no layer given", text);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  if (layers.back() >= num_layers) {
    fail_usage("--layers {}: layer {} is out of range: the model has {} layers (0 to {})", text, layers.back(),
               num_layers, num_layers - 1);
  }
  return layers;
}

}  // namespace probekit
