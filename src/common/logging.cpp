#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "common/terminal_text.h"

namespace probekit {

namespace {

// Every message reaches the terminal with its control characters escaped (a label or a path holding ESC[31m or
// BEL quotes it rather than colouring or ringing); the level's own colour is the inner sink's.
class TerminalSafeSink : public spdlog::sinks::sink {
 public:
  explicit TerminalSafeSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& message) override {
    std::string safe = terminal_text(std::string_view(message.payload.data(), message.payload.size()), true);
    spdlog::details::log_msg copy = message;
    copy.payload = spdlog::string_view_t(safe.data(), safe.size());
    inner_->log(copy);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override { inner_->set_formatter(std::move(formatter)); }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

void configure_logging(bool verbose, bool quiet) {
  auto logger = spdlog::get("probekit");
  if (!logger) {
    auto sink = std::make_shared<TerminalSafeSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    logger = std::make_shared<spdlog::logger>("probekit", sink);
    spdlog::register_logger(logger);
  }
  logger->set_pattern("%^[%l]%$ %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(quiet ? spdlog::level::warn : verbose ? spdlog::level::debug : spdlog::level::info);
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

}  // namespace probekit
