// What the main of every tool that computes with LibTorch does: the common flags (cli/cli.h), LibTorch's and
// OpenMP's threads set from --threads before the work, failures turned into one message and an exit code.
#pragma once

#include <functional>
#include <string>

#include "cli/cli.h"

namespace probekit {

class TorchTool : public ToolCommandLine {
 public:
  using ToolCommandLine::ToolCommandLine;

  /// Parses the flags, sets the threads (threads() tells how many), runs `body` and ends the process with the exit
  /// code, its output flushed, without the libraries' teardown (torch_tool.cpp says why): it does not return.
  int run(int argc, char** argv, const std::function<void()>& body);
  int threads() const { return threads_; }

 private:
  int threads_ = 0;
};

/// The whole main of a tool whose flags fill one struct: `add_flags` declares them, `body` runs with their values;
/// `interrupt_note`, when given, makes Ctrl-C stop the work and say it (CommonOptions::interrupt_note).
template <typename Flags>
int run_tool_main(int argc, char** argv, const std::string& description, void (*add_flags)(CLI::App&, Flags&),
                  const std::function<void(Flags&)>& body, const std::string& interrupt_note = "") {
  TorchTool tool(description);
  tool.common.interrupt_note = interrupt_note;
  Flags flags;
  add_flags(tool.app, flags);
  return tool.run(argc, argv, [&] { body(flags); });
}

}  // namespace probekit
