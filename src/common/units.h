// Parsing of human-written sizes for flags such as --max-gpu-memory, and sizes written for people.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace probekit {

/// Parses "40GB", "40G", "512MiB", "1.5T" or a plain byte count (powers of 1024); throws UsageError.
int64_t parse_byte_size(const std::string& text, const std::string& flag);

/// A plain decimal (digits only) that an int holds; nullopt for anything else (a sign, spaces, a fraction, a value
/// past what an int holds, which a cast would cut without a word: 4294967298 to 2).
std::optional<int> parse_count(const std::string& text);

/// A finite number written whole ("0.8", "-4", "1e-3"); nullopt for anything else (trailing text, inf, nan).
std::optional<double> parse_number(const std::string& text);

/// A byte count for people, in powers of 1000 as download tools show them: "512 B", "3.4 MB", "1.25 GB".
std::string format_byte_size(double bytes);

/// Bytes in GiB (powers of 1024), as device memory is reported.
inline double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace probekit
