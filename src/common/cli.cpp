#include "common/cli.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"

namespace probekit {

void use_passive_openmp_threads(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // If re-executing failed the program simply goes on with spinning threads.
}

void add_common_options(CLI::App& app, CommonOptions& options) {
  app.add_flag("-v,--verbose", options.verbose, "Log debug details");
  app.add_flag("-q,--quiet", options.quiet, "Log warnings and errors only, no progress bars");
  app.add_option("--threads", options.threads, "CPU threads for LibTorch and OpenMP (default: one per core)")
      ->check(CLI::NonNegativeNumber);
}

CLI::Option* add_model_options(CLI::App& app, std::string& model, const std::string& help) {
  // --offline is HF_HUB_OFFLINE=1 for this process and what it starts, so the hub client has one switch to read.
  app.add_flag_callback("--offline", [] { setenv("HF_HUB_OFFLINE", "1", 1); },
                        "Never use the network: a hub model must be in the cache (as HF_HUB_OFFLINE=1)");
  return app.add_option("--model", model,
                        help + "; a folder, or a Hugging Face hub name org/name[@revision] (from the cache, else downloaded)");
}

bool is_disk_full_message(const std::string& message) {
  return message.find(std::strerror(ENOSPC)) != std::string::npos || message.find(std::strerror(EFBIG)) != std::string::npos ||
         message.find(std::strerror(EDQUOT)) != std::string::npos;
}

bool is_out_of_memory_message(const std::string& message) {
  return message.find("out of memory") != std::string::npos || message.find("OutOfMemoryError") != std::string::npos;
}

std::string explain_failure(const std::exception& error) {
  std::string message = error.what();
  // c10::Error appends a C++ backtrace that helps nobody running a tool.
  for (const char* marker : {"\nException raised from", "Exception raised from"}) {
    auto at = message.find(marker);
    if (at != std::string::npos) message.erase(at);
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (is_out_of_memory_message(message)) {
    message += "\nThe device ran out of memory: use a smaller --batch-size (or --max-gpu-memory), a lower "
               "--dtype, or free memory used by other processes; the device and its memory are logged at start.";
  }
  if (is_disk_full_message(message)) {
    message += "\nThe disk is full (or a file size limit was reached): free space and run the command again. Files "
               "already complete are kept; capture_activations continues from its last commit with --resume.";
  }
  return message;
}

int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options, const std::function<void()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  configure_logging(options.verbose, options.quiet);
  // Past a file size limit (ulimit -f) a write would raise SIGXFSZ, which kills the tool mid-file without a
  // word; ignored, the write fails with EFBIG and is reported like a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    body();
    return 0;
  } catch (const UsageError& e) {
    spdlog::error("{}", explain_failure(e));
    spdlog::error("Run with --help for the flags.");
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", explain_failure(e));
    return 1;
  } catch (...) {
    spdlog::error("unknown failure");
    return 1;
  }
}

}  // namespace probekit
