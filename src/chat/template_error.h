// The errors of a chat template: syntax errors found while parsing and errors met while rendering both name
// the template's line. Code below the renderer (values, filters, methods) does not know the line; it throws
// without one and the renderer adds the line of the statement it was running.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace probekit::chat {

/// A template that cannot be parsed or rendered; what() is "chat template line N: ..." once the line is known.
class TemplateError : public std::invalid_argument {
 public:
  TemplateError(const std::string& message, int line)
      : std::invalid_argument(line > 0 ? fmt::format("chat template line {}: {}", line, message) : message),
        message_(message),
        line_(line) {}

  /// The message without the line.
  const std::string& message() const { return message_; }
  /// The template's line (1-based), 0 while unknown.
  int line() const { return line_; }
  /// Throws this error again, of its own type, at `line`.
  [[noreturn]] void rethrow_at(int line) const { std::rethrow_exception(at_line(line)); }

 protected:
  /// This error, of its own type, at `line`.
  virtual std::exception_ptr at_line(int line) const { return std::make_exception_ptr(TemplateError(message_, line)); }

 private:
  std::string message_;
  int line_;
};

/// The template called raise_exception(message): what() is the template's message, unchanged, as transformers
/// shows it (jinja2's TemplateError(message)).
class TemplateRaised : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Throws a TemplateError at `line` (0 when the caller does not know it).
template <typename... Args>
[[noreturn]] void fail_template(int line, fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(fmt::format(format, std::forward<Args>(args)...), line);
}

/// Throws a TemplateError whose line the renderer fills in: a type error, an undefined value used, ...
template <typename... Args>
[[noreturn]] void fail_render(fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(fmt::format(format, std::forward<Args>(args)...), 0);
}

}  // namespace probekit::chat
