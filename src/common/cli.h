// What every tool shares: --verbose/--quiet/--threads, and one main wrapper that parses flags and turns
// exceptions into one clear message and an exit code (0 ok, 1 error, 2 usage).
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <string>

namespace probekit {

struct CommonOptions {
  bool verbose = false;
  bool quiet = false;
  int threads = 0;  // 0: one per core
};

/// Makes idle OpenMP threads sleep rather than spin, by re-executing the program once with
/// OMP_WAIT_POLICY=PASSIVE unless the user set a policy. Spinning threads of LibTorch's and OpenBLAS's pools
/// take whole cores from the threads doing the work whenever cores are few or shared, which made small models
/// run 5x slower on 2 cores. Call it first in main(); the variable must be set before OpenMP starts.
void use_passive_openmp_threads(char** argv);

/// Adds --verbose, --quiet and --threads to `app`.
void add_common_options(CLI::App& app, CommonOptions& options);

/// Adds --model (a checkpoint folder or a hub name, org/name[@revision]) and --offline to a tool or subcommand that
/// loads a model; returns --model's option so the caller can make it required.
CLI::Option* add_model_options(CLI::App& app, std::string& model, const std::string& help);

/// Parses the command line, sets up logging, runs `body` and maps failures to exit codes:
/// CLI11 parse errors and UsageError exit 2, every other exception exits 1 after one "error: ..." line.
int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options, const std::function<void()>& body);

/// The message to show for a failure: LibTorch's C++ backtrace removed, advice added for out-of-memory and a
/// full disk.
std::string explain_failure(const std::exception& error);

/// True when the message carries the system's reason for a full disk, a file size limit or a quota.
bool is_disk_full_message(const std::string& message);

/// True when the message is an accelerator's out-of-memory error (CUDA, HIP or MPS).
bool is_out_of_memory_message(const std::string& message);

}  // namespace probekit
