// probe_server run for real in the tests: probes trained on a fixture model (probe_fixture.h), a ProbeServer serving
// on a free loopback port from a thread of the test, or the tool as a process, and the checks of a refusal.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "generation/flags.h"
#include "probe_fixture.h"
#include "server/probe_server.h"
#include "test_util.h"

extern char** environ;

namespace probekit::testing {

// Probes of layers 2 and 5 trained 10 epochs: enough for the server's tests, which check what it serves, not the
// probes.
inline std::string train_probes(const TempDir& tmp) {
  ProbeFixture fixture;
  fixture.epochs = 10;
  return train_fixture_probes(tmp, fixture);
}

/// The server's engine generating `prompt` greedily itself, `tokens` tokens without stopping: what a stream of the
/// same request must give, token by token.
inline std::vector<inference::ScoredToken> engine_generation(const inference::Engine& engine, const std::string& prompt,
                                                             int64_t tokens) {
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = tokens;
  flags.no_stop = true;
  std::vector<inference::ScoredToken> generated;
  engine.generate({prompt}, generation::resolve_generation_flags(flags, engine.model_dir()),
                  [&](const inference::ScoredToken& t) {
                    generated.push_back(t);
                    return true;
                  });
  return generated;
}

inline server::ServerOptions options_for(const std::string& probes) {
  server::ServerOptions o;
  o.engine.probes_dir = probes;
  o.engine.device = "cpu";
  o.port = 0;
  return o;
}

/// A chat completion asking for 100,000 tokens at temperature 0 (the server's options must allow them): a reply that
/// runs until something else ends it.
inline std::string endless_chat_body() {
  return Json({{"messages", {{{"role", "user"}, {"content", "Tell me a long story"}}}}, {"max_tokens", 100000},
               {"temperature", 0}}).dump();
}

// A ProbeServer serving on a free loopback port from a thread of this process.
class RunningServer {
 public:
  explicit RunningServer(const server::ServerOptions& options)
      : server_(options), port_(server_.bind()), thread_([this] { server_.serve(); }) {}
  ~RunningServer() {
    server_.stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120);
    return c;
  }
  server::ProbeServer& server() { return server_; }
  int port() const { return port_; }

 private:
  server::ProbeServer server_;
  int port_;
  std::thread thread_;
};

inline httplib::Result post(const RunningServer& s, const std::string& path, const std::string& body) {
  return s.client().Post(path, body, "application/json");
}

inline Json post_json(const RunningServer& s, const std::string& path, const Json& body) {
  httplib::Result r = post(s, path, body.dump());
  REQUIRE(r);
  REQUIRE_MESSAGE(r->status == 200, r->body);
  return Json::parse(r->body);
}

// A request the server must refuse with `status`, its message holding each of `parts` and naming `field`.
inline void check_refused(const RunningServer& s, const std::string& path, const std::string& body, int status,
                   std::initializer_list<const char*> parts, const std::string& field = "") {
  httplib::Result r = post(s, path, body);
  REQUIRE(r);
  CHECK_MESSAGE(r->status == status, body.substr(0, 200), " -> ", r->body);
  Json error = Json::parse(r->body);
  for (const char* part : parts) CHECK_CONTAINS(error["error"].get<std::string>(), part);
  if (!field.empty()) CHECK_MESSAGE(error.value("field", "") == field, r->body);
}

// The tool as a process, its output in a file: the URL it prints, and how it ends.
struct ServerProcess {
  pid_t pid = -1;
  std::string log;

  // `environment`: NAME=value entries added to this process's environment.
  ServerProcess(const std::vector<std::string>& args, const std::string& log_path,
                const std::vector<std::string>& environment = {})
      : log(log_path) {
    std::vector<char*> argv;
    std::vector<std::string> all = args;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> added = environment;
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
    for (std::string& e : added) env.push_back(e.data());
    env.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), env.data()) == 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // The port from "on http://127.0.0.1:PORT/", once printed.
  int port() const {
    for (int i = 0; i < 1200; ++i) {
      std::string out = probekit::testing::read_text(log);
      size_t at = out.find("on http://127.0.0.1:");
      if (at != std::string::npos && out.find('/', at + 20) != std::string::npos) return std::stoi(out.substr(at + 20));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL("probe_server printed no URL: " << probekit::testing::read_text(log));
    return -1;
  }
  // Sends `signal` and returns the exit code; one still running after `limit_s` seconds is killed and fails the test.
  int stop(int signal, double limit_s = 60) {
    kill(pid, signal);
    int status = 0;
    auto start = std::chrono::steady_clock::now();
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit_s) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        pid = -1;
        FAIL("probe_server still ran " << limit_s << " s after signal " << signal);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

/// One event of a server-sent event stream.
struct ServerEvent {
  std::string name;
  Json data;
};

/// The events of a server-sent event stream (comment lines, the server's keep-alives, left out).
inline std::vector<ServerEvent> parse_events(const std::string& stream) {
  std::vector<ServerEvent> events;
  size_t start = 0, end;
  while ((end = stream.find("\n\n", start)) != std::string::npos) {
    std::string block = stream.substr(start, end - start);
    start = end + 2;
    if (block.rfind(':', 0) == 0) continue;
    size_t data = block.find("\ndata: ");
    REQUIRE_MESSAGE((block.rfind("event: ", 0) == 0 && data != std::string::npos), block);
    events.push_back({block.substr(7, data - 7), Json::parse(block.substr(data + 7))});
  }
  return events;
}

}  // namespace probekit::testing
