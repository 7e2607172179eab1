#include "capture/capture_options.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/units.h"

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


}  // namespace probekit::capture
