// Helpers shared by the tests: temporary directories, file copies, running the built tools, the fixture models.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

#include "common/files.h"
#include "common/json.h"
#include "test_paths.h"

namespace probekit::testing {

// Sets environment variables for one test and puts the old values back.
class ScopedEnvironment {
 public:
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

/// A fresh directory under the system's temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = probekit::temp_directory() + "/probekit-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    REQUIRE(made != nullptr);
    path_ = made;
  }
  ~TempDir() {
    try {
      probekit::remove_tree(path_);
    } catch (const std::exception&) {  // a test must not fail while cleaning up after itself
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// Writes `count` texts in the reference's cognitive-action format to `path`: three of its 45 actions in turn
/// (analyzing, reframing, noticing), each text its label's cue, which probes learn easily.
inline void write_three_action_dataset(const std::string& path, int count = 60) {
  static const char* labels[] = {"analyzing", "reframing", "noticing"};
  static const char* cues[] = {"I examined each part of the problem step by step.",
                               "Instead of a setback, I saw it as a chance to learn.",
                               "Suddenly I noticed the small crack in the window."};
  std::string lines;
  for (int i = 0; i < count; ++i) {
    lines += probekit::Json({{"text", fmt::format("{} Day {}.", cues[i % 3], i)}, {"cognitive_action", labels[i % 3]}}).dump() + "\n";
  }
  write_text(path, lines);
}

/// Copies a directory tree (a fixture checkpoint) so a test can damage the copy.
inline void copy_dir(const std::string& from, const std::string& to) { probekit::copy_tree(from, to); }

/// The path of a built tool.
inline std::string tool(const std::string& name) { return std::string(PROBEKIT_TOOLS_DIR) + "/" + name; }

/// A fixture checkpoint: tests/fixtures/models/NAME.
inline std::string fixture_model(const std::string& name) { return std::string(PROBEKIT_FIXTURES) + "/models/" + name; }

/// The fixture most tests run on: a tiny Gemma 3 text model of 6 layers.
inline const std::string kGemmaModel = fixture_model("gemma3_text");
/// A tiny Qwen 3 whose weights are sharded over three files with an index, as the hub serves large models.
inline const std::string kShardedModel = fixture_model("qwen3_sharded");
/// A text of the reference's kind (a reframing), for the tests that score one text.
inline const std::string kReframingText = "Instead of seeing it as a setback, I saw a chance to learn.";

/// Result of running a command through the shell: exit code and combined output.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};

/// Runs `command` (stdout and stderr captured together).
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  std::string full = command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Asserts that `text` contains `part`, showing both otherwise.
#define CHECK_CONTAINS(text, part) \
  CHECK_MESSAGE((text).find(part) != std::string::npos, "expected to find [", std::string(part), "] in [", text, "]")

/// Asserts that a command exited with `exit_code` and that its output holds each of `parts`.
inline void check_failure(const CommandResult& r, int exit_code, std::initializer_list<const char*> parts) {
  CHECK_MESSAGE(r.exit_code == exit_code, r.output);
  for (const char* part : parts) CHECK_CONTAINS(r.output, part);
}

/// Checks that every flag `output` names (--name) is one `command` takes, as its --help lists them: a message
/// never advises a flag of another tool. `command` is the tool with its subcommand, if any.
inline void check_named_flags(const std::string& command, const std::string& output) {
  const std::string help = run_command(command + " --help").output;
  const std::regex flag(R"(--[a-z][a-z0-9-]*)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), flag); it != std::sregex_iterator(); ++it) {
    const std::string name = it->str();
    const std::regex listed("(^|[\\s,])" + name + "($|[\\s,=])");
    CHECK_MESSAGE(std::regex_search(help, listed), command, " does not take ", name, ", which its output names: ", output);
  }
}

// Collects what spdlog's default logger writes while it lives.
class LoggedLines {
 public:
  LoggedLines() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LoggedLines() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LoggedLines(const LoggedLines&) = delete;
  LoggedLines& operator=(const LoggedLines&) = delete;

  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace probekit::testing
