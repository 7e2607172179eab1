// What every tool shares: --verbose/--quiet/--threads, and one main wrapper that parses flags and turns
// exceptions into one clear message and an exit code (0 ok, 1 error, 2 usage).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace probekit {

struct CommonOptions {
  bool verbose = false;
  bool quiet = false;
  int threads = 0;  // 0: one per core
  /// Added to the message of a failure that a full disk caused: what the tool can recover (set by the tool).
  std::string disk_full_advice;
  /// When set (by the tool), Ctrl-C or SIGTERM stops the work at its next progress report instead of killing the
  /// tool, which then says "interrupted: " and this (what was kept and what was not) and exits 130; a second
  /// signal kills at once.
  std::string interrupt_note;
};

/// Adds --verbose, --quiet and --threads to `app`.
void add_common_options(CLI::App& app, CommonOptions& options);

/// Adds --device (auto|cpu|cuda|cuda:N|rocm|mps) and --dtype (auto|fp32|bf16|fp16) bound to `device` and
/// `dtype`, whose values are shown as the defaults. `dtype_note` follows the dtype choices in the help, for a
/// tool to say what auto picks or what it refuses.
void add_device_options(CLI::App& app, std::string& device, std::string& dtype, const std::string& dtype_note = "");

/// Adds --fp8-products (decoded|fp8) bound to `fp8_products`: how fine-grained FP8 checkpoints multiply on a GPU.
void add_fp8_products_option(CLI::App& app, std::string& fp8_products);

/// Adds --devices (GPU indices, e.g. 0,1) and --placement (auto|replicas|layers) for the tools that run a model
/// on several GPUs; `devices_help` says what this tool does with them.
void add_placement_options(CLI::App& app, std::vector<int>& devices, std::string& placement,
                           const std::string& devices_help);

/// A tool's command line: the app with the common flags declared; a tool's main declares its own flags on
/// `app` and hands its work to run().
class ToolCommandLine {
 public:
  /// (Idle OpenMP threads sleep or spin as the tool's executable chose before it started: tools/start/tool_start.cpp.)
  explicit ToolCommandLine(const std::string& description);

  /// See run_tool.
  int run(int argc, char** argv, const std::function<void()>& body);

  CLI::App app;
  CommonOptions common;
};

/// A check that a flag's whole number is at least `low`, failing as "--flag: must be 1 or more, got 0" (CLI11's
/// PositiveNumber names the largest double, all 309 digits of it, as the top of its range), or as "must be from 1 to
/// 9223372036854775807" past 64 bits (which CLI11 itself reads wrapped).
CLI::Validator at_least(int64_t low);
/// A check that a flag's whole number is from `low` to `high`: "--flag: must be from 1 to 1000000, got 0".
CLI::Validator whole_number_in(int64_t low, int64_t high);

/// Adds --model (a checkpoint folder or a hub name, org/name[@revision]) and --offline to a tool or subcommand that
/// loads a model; returns --model's option so the caller can make it required.
CLI::Option* add_model_options(CLI::App& app, std::string& model, const std::string& help);

/// Adds --layers taking the reference's spelling, space-separated values (`--layers 21 22 23`), as well as
/// commas and ranges (`8,17`, `21-30`, `all`); they are written to `layers` joined by commas.
CLI::Option* add_layers_option(CLI::App& app, std::string& layers, const std::string& help);

/// Adds --overwrite to a tool whose output is a directory (StagedDirectory), named `output_flag` in its help.
void add_overwrite_flag(CLI::App& app, bool& overwrite, const std::string& output_flag = "--output-dir");

/// Throws UsageError for a flag given an empty value, in `app` or a subcommand given (an empty value would read as the
/// flag left out: `--csv ""` wrote nothing); --prompt-suffix and `tokenize --text` take one.
void refuse_empty_values(const CLI::App& app);

/// The one of `names` nearest to `given`, within two edits, for a "did you mean ...?"; "" where none is that near.
std::string nearest_name(const std::string& given, const std::vector<std::string>& names);

/// Parses the command line, sets up logging, runs `body` and maps failures to exit codes:
/// CLI11 parse errors and UsageError exit 2, every other exception exits 1 after one "error: ..." line; an
/// interruption the tool catches (options.interrupt_note) exits 130.
int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options, const std::function<void()>& body);

/// The message to show for a failure: LibTorch's C++ backtrace removed, advice added for out-of-memory and a
/// full disk (`disk_full_advice`: what the tool can recover once space is freed).
std::string explain_failure(const std::exception& error, const std::string& disk_full_advice = "");

}  // namespace probekit
