// Which decoder layers a run reads: --layers as the tools take it, and the reference's default choice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace probekit {

/// Default layers of the reference: n // 4, n // 2, 3n // 4, n - 1 (duplicates removed).
std::vector<int64_t> default_layers(int64_t num_layers);
/// Parses --layers ("all", "8,17,25", "8 17", "21-30") against the model's layer count.
std::vector<int64_t> parse_layers(const std::string& text, int64_t num_layers);
/// Parses a list of indices below `count` as --layers takes them ("all", "8,17,25", "8 17", "21-30"), sorted and
/// without repeats; `flag`, `noun` ("layer") and `owner` ("model": "the model has 6 layers") name them in messages.
/// Without an owner the caller checks each index itself, and `count` only bounds ranges, which are refused past it
/// before they are spelled out.
std::vector<int64_t> parse_index_list(const std::string& flag, const std::string& text, int64_t count,
                                      const std::string& noun, const std::string& owner);

}  // namespace probekit
