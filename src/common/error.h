// Error helpers: every failure is an exception carrying its context (file, line, field, tensor), caught once in
// each tool's main. std::invalid_argument marks the caller's mistakes, std::runtime_error the file or the
// environment, UsageError a bad command-line value (exit code 2, as CLI11's own parse errors).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace probekit {

/// A command-line value that cannot be used; tools exit with code 2 on it.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Throws std::runtime_error with a formatted message (bad file, bad environment).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw std::runtime_error(fmt::format(format, std::forward<Args>(args)...));
}

/// Throws std::invalid_argument with a formatted message (the caller passed something unusable).
template <typename... Args>
[[noreturn]] void fail_input(fmt::format_string<Args...> format, Args&&... args) {
  throw std::invalid_argument(fmt::format(format, std::forward<Args>(args)...));
}

/// Throws UsageError with a formatted message (a flag's value is wrong).
template <typename... Args>
[[noreturn]] void fail_usage(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

/// True when the message carries the system's reason for a full disk, a file size limit or a quota.
bool is_disk_full_message(const std::string& message);

/// Re-throws the exception in flight with `context: ` in front of its message, keeping its type.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace probekit
