#include "cli/cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <regex>
#include <sstream>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "common/units.h"
#include "device/runtime.h"

namespace probekit {

void add_common_options(CLI::App& app, CommonOptions& options) {
  app.set_version_flag("--version", std::string("probekit ") + PROBEKIT_VERSION);
  // These flags may also stand after a subcommand (inspect_model info --model M -v).
  app.fallthrough();
  app.add_flag("-v,--verbose", options.verbose, "Log debug details");
  app.add_flag("-q,--quiet", options.quiet, "Log warnings and errors only, no progress bars");
  app.add_option("--threads", options.threads, "CPU threads for LibTorch and OpenMP (default: one per core)")
      ->check(CLI::Range(0, 4096));
}

void add_device_options(CLI::App& app, std::string& device, std::string& dtype, const std::string& dtype_note) {
  app.add_option("--device", device, "auto|cpu|cuda|cuda:N|rocm|mps")->capture_default_str();
  std::string dtype_help = "auto|fp32|bf16|fp16";
  if (!dtype_note.empty()) dtype_help += " " + dtype_note;
  app.add_option("--dtype", dtype, dtype_help)->capture_default_str();
}

void add_fp8_products_option(CLI::App& app, std::string& fp8_products) {
  app.add_option("--fp8-products", fp8_products,
                 "Fine-grained FP8 checkpoints on a GPU: decoded (each weight decoded to --dtype for its product: the "
                 "dequantized weights' numbers) or fp8 (Hopper, bf16/fp16: products in FP8 with the block scales, "
                 "activations quantized per token per 128 inputs as transformers' GPU kernels do; faster than bf16, "
                 "with ten times bf16's rounding error)")
      ->capture_default_str()
      ->check(CLI::IsMember({"decoded", "fp8"}));
}

void add_placement_options(CLI::App& app, std::vector<int>& devices, std::string& placement,
                           const std::string& devices_help) {
  app.add_option("--devices", devices, devices_help)->delimiter(',');
  app.add_option("--placement", placement,
                 "With --devices: replicas (one whole model per GPU), layers (consecutive layers on consecutive GPUs, "
                 "batches pipelined through them), or auto (layers split only when the model does not fit one GPU's "
                 "free memory; replicas of the split when there are GPUs for several)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "replicas", "layers"}));
}

ToolCommandLine::ToolCommandLine(const std::string& description) : app(description) {
  add_common_options(app, common);
}

int ToolCommandLine::run(int argc, char** argv, const std::function<void()>& body) {
  return run_tool(app, argc, argv, common, body);
}

CLI::Validator whole_number_in(int64_t low, int64_t high) {
  return CLI::Validator(
      [low, high](std::string& input) -> std::string {
        size_t used = 0;
        long long value = 0;
        bool too_large = false;
        try {
          value = std::stoll(input, &used);
        } catch (const std::out_of_range&) {
          // Past 64 bits either way, when it is a number at all (regression: "999...9abc" was called out of range).
          const size_t digits = input.find_first_not_of("0123456789", input[0] == '-' || input[0] == '+' ? 1 : 0);
          too_large = digits == std::string::npos;
          used = too_large ? input.size() : 0;
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != input.size()) return fmt::format("must be a whole number, got {}", input);
        const bool unbounded = high == std::numeric_limits<int64_t>::max();
        if (!too_large && value < low && unbounded) return fmt::format("must be {} or more, got {}", low, input);
        if (too_large || value < low || value > high) return fmt::format("must be from {} to {}, got {}", low, high, input);
        return "";
      },
      high == std::numeric_limits<int64_t>::max() ? fmt::format(">={}", low) : fmt::format("[{}, {}]", low, high));
}

CLI::Validator at_least(int64_t low) { return whole_number_in(low, std::numeric_limits<int64_t>::max()); }

CLI::Option* add_model_options(CLI::App& app, std::string& model, const std::string& help) {
  // --offline is HF_HUB_OFFLINE=1 for this process and what it starts, so the hub client has one switch to read.
  app.add_flag_callback("--offline", [] { setenv("HF_HUB_OFFLINE", "1", 1); },
                        "Never use the network: a hub model must be in the cache (as HF_HUB_OFFLINE=1)");
  return app.add_option("--model", model,
                        help + "; a folder, or a Hugging Face hub name org/name[@revision] (from the cache, else downloaded)");
}

CLI::Option* add_layers_option(CLI::App& app, std::string& layers, const std::string& help) {
  return app
      .add_option_function<std::vector<std::string>>(
          "--layers", [&layers](const std::vector<std::string>& values) { layers = fmt::format("{}", fmt::join(values, ",")); },
          help)
      ->delimiter(',');
}

void add_overwrite_flag(CLI::App& app, bool& overwrite, const std::string& output_flag) {
  app.add_flag("--overwrite", overwrite,
               fmt::format("Replace an earlier output in {} (one a probekit tool wrote; other folders are refused)",
                           output_flag));
}

std::string explain_failure(const std::exception& error, const std::string& disk_full_advice) {
  std::string message = error.what();
  // c10::Error appends a C++ backtrace that helps nobody running a tool (after "Exception raised from", or, for
  // an enforce failure such as an allocation's, straight after the message as "frame #0: ...").
  for (const char* marker : {"\nException raised from", "Exception raised from", "\nframe #0:"}) {
    auto at = message.find(marker);
    if (at != std::string::npos) message.erase(at);
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  std::string device_advice = device::failure_advice(message);
  if (!device_advice.empty()) message += "\n" + device_advice;
  if (is_disk_full_message(message)) {
    message += "\nThe disk is full (or a file size limit was reached): free space and run the command again.";
    if (!disk_full_advice.empty()) message += " " + disk_full_advice;
  }
  return message;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The options of `app` and of the subcommand that was given.
std::vector<const CLI::Option*> given_options(const CLI::App& app) {
  std::vector<const CLI::Option*> options = app.get_options();
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* option : sub->get_options()) options.push_back(option);
  }
  return options;
}

// The flags of `app` and of the subcommand that was given.
std::vector<std::string> known_flags(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : given_options(app)) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  }
  return names;
}

// "--thresold" -> " (did you mean --threshold?)" for each unexpected argument that is near a known flag.
std::string nearest_flag_hints(const CLI::App& app, const std::vector<std::string>& unexpected) {
  std::string hints;
  for (std::string given : unexpected) {
    given = given.substr(0, given.find('='));
    if (given.rfind("--", 0) != 0) continue;
    std::string best = nearest_name(given, known_flags(app));
    if (!best.empty()) hints += "\n" + given + ": did you mean " + best + "?";
  }
  return hints;
}

// "-x", "--name" or "--name=value", not "--" nor a negative number.
bool looks_like_flag(const std::string& argument) {
  return argument.size() > 1 && argument[0] == '-' && argument != "--" &&
         std::isdigit(static_cast<unsigned char>(argument[1])) == 0;
}

// "unknown subcommand 'inf' (expected one of: info, hidden, ...)" for the first word CLI11 could not use, or ""
// where there is none. A word straight after a flag (the subcommand's, given before its name) is that flag's value.
std::string unknown_subcommand_line(const CLI::App& app, const std::vector<std::string>& unused) {
  auto word = unused.end();
  for (auto it = unused.begin(); it != unused.end() && word == unused.end(); ++it) {
    bool after_flag = it != unused.begin() && looks_like_flag(*(it - 1)) && (it - 1)->find('=') == std::string::npos;
    if (*it != "--" && !looks_like_flag(*it) && !after_flag) word = it;
  }
  if (word == unused.end()) return "";
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty() && !sub->get_disabled()) names.push_back(sub->get_name());  // unnamed: option groups
  }
  return fmt::format("unknown subcommand '{}' (expected one of: {})", *word, fmt::join(names, ", "));
}

// "--modle: unknown flag (did you mean --model?)" for each unused flag; where there are none, each unused word.
std::vector<std::string> unknown_flag_lines(const CLI::App& app, const std::vector<std::string>& unused) {
  const std::vector<std::string> flags = known_flags(app);
  std::vector<std::string> lines;
  for (const std::string& argument : unused) {
    if (!looks_like_flag(argument)) continue;
    const std::string given = argument.substr(0, argument.find('='));
    bool known = std::find(flags.begin(), flags.end(), given) != flags.end();
    if (known && !app.get_subcommands().empty()) {  // the subcommand's flag, given before the subcommand's name
      lines.push_back(given + ": a flag of the subcommand; give it after the subcommand's name");
      continue;
    }
    const std::string best = given.rfind("--", 0) == 0 ? nearest_name(given, flags) : "";
    lines.push_back(given + ": unknown flag" + (best.empty() ? "" : " (did you mean " + best + "?)"));
  }
  // Words after an unknown flag are most likely its values, not worth a line each.
  if (!lines.empty()) return lines;
  for (const std::string& argument : unused) {
    if (argument != "--") lines.push_back(fmt::format("unexpected argument '{}'", argument));
  }
  return lines;
}

// CLI11 checks required flags and subcommands before it refuses the arguments it could not use, so a misspelt
// flag or subcommand read as the one it was meant to be, missing: what was not used is named first.
std::vector<std::string> required_error_lines(const CLI::App& app, const CLI::RequiredError& error) {
  const std::vector<std::string> unused = app.remaining(true);
  if (unused.empty()) return {error.what()};
  if (app.get_require_subcommand_min() > 0 && app.get_subcommands().empty()) {
    std::string line = unknown_subcommand_line(app, unused);
    return {line.empty() ? std::string(error.what()) : line};
  }
  std::vector<std::string> lines = unknown_flag_lines(app, unused);
  lines.push_back(error.what());
  return lines;
}

// The type CLI11 names for a flag's value (INT, UINT, FLOAT, ...) in words; empty for no flag of that name.
// The type CLI11 gives the option `flag` names ("UINT", "FLOAT:POSITIVE": the type, then its validators); empty when
// none of the given options has that name.
std::string option_type(const CLI::App& app, const std::string& flag) {
  const size_t name_start = flag.find_first_not_of('-');
  if (name_start == std::string::npos) return "";
  for (const CLI::Option* option : given_options(app)) {
    const std::vector<std::string>& names = option->get_lnames();
    if (std::find(names.begin(), names.end(), flag.substr(name_start)) != names.end()) return option->get_type_name();
  }
  return "";
}

std::string value_type_words(const CLI::App& app, const std::string& flag) {
  const std::string type = option_type(app, flag);
  if (type.empty()) return "";
  if (type.find("UINT") != std::string::npos) return "a whole number, 0 or more";
  if (type.find("INT") != std::string::npos) return "an integer";
  if (type.find("FLOAT") != std::string::npos) return "a number";
  return "a value of type " + type;
}

// CLI11's words for a value it could not take ("Could not convert: --epochs = abc", "--threads: Value abc not in range
// 0 to 4096", "--mode: by-actoin not in {by-action,by-layer}") as the tools' own usage errors say it: the flag, the
// value, what was expected.
std::string readable_value_error(const CLI::App& app, const std::string& message) {
  static const std::regex conversion(R"(Could not convert: (\S+) = (.*))");
  static const std::regex range(R"((\S+): Value (.*) not in range (\S+) to (\S+))");
  static const std::regex choice(R"((\S+): (.*) not in \{(.*)\})");
  std::smatch m;
  if (std::regex_match(message, m, conversion)) {
    const std::string expected = value_type_words(app, m[1].str());
    return expected.empty() ? message : fmt::format("{} {}: expected {}", m[1].str(), m[2].str(), expected);
  }
  if (std::regex_match(message, m, range)) {
    const auto shortest = [](const std::string& bound) {  // a range of doubles prints as 0.001000
      const std::optional<double> number = parse_number(bound);
      return number ? fmt::format("{:g}", *number) : bound;
    };
    // CLI11's PositiveNumber and NonNegativeNumber: from the smallest double (printed 0.000000) or 0 to the largest.
    const std::optional<double> high = parse_number(m[4].str());
    if (high && *high >= std::numeric_limits<double>::max()) {
      const std::string type = option_type(app, m[1].str());
      const char* kind = type.find("INT") != std::string::npos ? "a whole number" : "a number";
      const bool positive = type.find(":POSITIVE") != std::string::npos;
      return fmt::format("{} {}: expected {}{}", m[1].str(), m[2].str(), kind, positive ? " above 0" : ", 0 or more");
    }
    return fmt::format("{} {}: expected a number from {} to {}", m[1].str(), m[2].str(), shortest(m[3].str()),
                       shortest(m[4].str()));
  }
  if (std::regex_match(message, m, choice)) {
    std::vector<std::string> choices;
    std::stringstream list(m[3].str());
    for (std::string item; std::getline(list, item, ',');) choices.push_back(item);
    const std::string best = nearest_name(m[2].str(), choices);
    return fmt::format("{} {}: expected one of {}{}", m[1].str(), m[2].str(), fmt::join(choices, ", "),
                       best.empty() ? "" : " (did you mean " + best + "?)");
  }
  return message;
}

// Output written with printf-style calls is only known to have reached its destination once flushed: a full
// disk or a closed pipe shows up here, and must not end in a zero exit code.
void flush_standard_output() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fail("cannot write the output to standard output: {}", std::strerror(errno != 0 ? errno : EIO));
  }
}


// The first SIGINT or SIGTERM asks the work to stop at its next step and gives the signal back its default, so
// that a second one kills at once. Both calls are async-signal-safe (an atomic store, signal()).
extern "C" void request_interrupt_on_signal(int signal) {
  request_interrupt();
  std::signal(signal, SIG_DFL);
}

// The flags whose empty value means something: --prompt-suffix "" (no suffix), inspect_model tokenize --text ""
// (the empty text's ids), as {subcommand, flag}, "" for any. Any other flag given an empty value is refused: it read
// as the flag left out (--csv "" wrote no file, --file "" read stdin) or failed late naming no flag (--output-dir ""
// after training).
const std::pair<const char*, const char*> kFlagsTakingEmpty[] = {{"", "--prompt-suffix"}, {"tokenize", "--text"}};

bool takes_empty(const CLI::App& app, const std::string& flag) {
  return std::any_of(std::begin(kFlagsTakingEmpty), std::end(kFlagsTakingEmpty), [&](const auto& taking) {
    return flag == taking.second && (taking.first[0] == '\0' || app.get_name() == taking.first);
  });
}

}  // namespace

void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() == 0 || option->get_expected_max() == 0 || takes_empty(app, option->get_name())) continue;
    for (const std::string& value : option->results()) {
      if (value.empty()) {
        fail_usage("{} is empty: give a value{}", option->get_name(), option->get_required() ? "" : ", or leave the flag out");
      }
    }
  }
  for (const CLI::App* subcommand : app.get_subcommands()) refuse_empty_values(*subcommand);
}

std::string nearest_name(const std::string& given, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = 3;  // only names within two edits: further off, a suggestion is more likely wrong than right
  for (const std::string& name : names) {
    size_t distance = edit_distance(given, name);
    if (distance < best_distance) best_distance = distance, best = name;
  }
  return best;
}

int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options, const std::function<void()>& body) {
  try {
    app.parse(argc, argv);
    refuse_empty_values(app);
  } catch (const CLI::ExtrasError& e) {
    configure_logging(false, false);
    spdlog::error("{}{}", e.what(), nearest_flag_hints(app, app.remaining(true)));
    spdlog::error("Run with --help for the flags.");
    return 2;
  } catch (const CLI::RequiredError& e) {
    configure_logging(false, false);
    for (const std::string& line : required_error_lines(app, e)) spdlog::error("{}", line);
    spdlog::error("Run with --help for the flags.");
    return 2;
  } catch (const CLI::ParseError& e) {
    // --help and --version print through CLI11; every flag error reads as the tools' own usage errors do.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    configure_logging(false, false);
    spdlog::error("{}", readable_value_error(app, e.what()));
    spdlog::error("Run with --help for the flags.");
    return 2;
  } catch (const UsageError& e) {  // a flag's own parser (a callback) refused its value
    configure_logging(false, false);
    spdlog::error("{}", e.what());
    spdlog::error("Run with --help for the flags.");
    return 2;
  }
  configure_logging(options.verbose, options.quiet);
  // Past a file size limit (ulimit -f) a write would raise SIGXFSZ, which kills the tool mid-file without a
  // word; ignored, the write fails with EFBIG and is reported like a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  // A closed pipe on stdout becomes a write error with a message rather than a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  if (!options.interrupt_note.empty()) {
    for (int signal_number : {SIGINT, SIGTERM}) {
      // One the process started with ignored stays ignored: sh starts a script's background job with SIGINT ignored
      // so that the terminal's Ctrl-C leaves it running (Python and the shells' own tools keep it so too).
      struct sigaction started {};
      if (::sigaction(signal_number, nullptr, &started) == 0 && started.sa_handler == SIG_IGN) continue;
      std::signal(signal_number, request_interrupt_on_signal);
    }
  }
  try {
    body();
    flush_standard_output();
    return 0;
  } catch (const Interrupted&) {
    spdlog::warn("interrupted: {}", options.interrupt_note);
    return 130;  // as a shell reports a command ended by Ctrl-C
  } catch (const UsageError& e) {
    spdlog::error("{}", explain_failure(e, options.disk_full_advice));
    spdlog::error("Run with --help for the flags.");
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", explain_failure(e, options.disk_full_advice));
    return 1;
  } catch (...) {
    spdlog::error("unknown failure");
    return 1;
  }
}

}  // namespace probekit
