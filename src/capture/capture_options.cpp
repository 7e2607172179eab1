#include "capture/capture_options.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace probekit::capture {

void parse_shard(const std::string& text, CaptureOptions& options) {
  const size_t slash = text.find('/');
  std::optional<int> index = parse_count(text.substr(0, slash));
  std::optional<int> count = slash == std::string::npos ? std::nullopt : parse_count(text.substr(slash + 1));
  if (!index || !count) {
    fail_usage("--shard {}: expected I/N, e.g. 0/4 (whole numbers up to {})", text, std::numeric_limits<int>::max());
  }
  options.shard_index = *index;
  options.shard_count = *count;
}

void apply_launch_rank(const LaunchRank& launch, size_t gpu_count, CaptureOptions& options) {
  options.shard_index = launch.rank;
  options.shard_count = launch.world_size;
  bool picks_gpu = launch.local_rank >= 0 && gpu_count > 0 && options.devices.empty() &&
                   (options.device == "auto" || options.device == "cuda");
  if (picks_gpu) options.device = fmt::format("cuda:{}", launch.local_rank % static_cast<int64_t>(gpu_count));
  spdlog::info("--shard auto: {} ({}): shard {} of {}{}", launch.launcher, launch.source, launch.rank, launch.world_size,
               picks_gpu ? fmt::format(", local rank {} on {}", launch.local_rank, options.device) : "");
}

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

}  // namespace probekit::capture
