#include "common/units.h"

#include <limits>

#include <cctype>
#include <cstdlib>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"

namespace probekit {

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    fail_usage("{} {}: expected a size such as 40GB", flag, text);
  }
  std::string unit;
  for (size_t i = used; i < text.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) unit.push_back(static_cast<char>(std::toupper(text[i])));
  }
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    fail_usage("{} {}: unknown unit '{}' (use B, KB, MB, GB or TB)", flag, text, unit);
  }
  if (!(value > 0) || !std::isfinite(value * scale) || value * scale > 9e18) fail_usage("{} {}: must be positive", flag, text);
  return static_cast<int64_t>(value * scale);
}

std::string format_byte_size(double bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 4) {
    bytes /= 1000;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.{}f} {}", bytes, bytes < 10 ? 2 : bytes < 100 ? 1 : 0, kUnits[unit]);
}

std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<int> parse_count(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  int64_t value = 0;
  for (char digit : text) {
    value = value * 10 + (digit - '0');
    if (value > std::numeric_limits<int>::max()) return std::nullopt;
  }
  return static_cast<int>(value);
}

}  // namespace probekit
