// probe_server under hostile and careless clients, over real sockets on loopback: bodies counted as they arrive
// whatever their framing (chunked, compressed, too long a Content-Length), slow and idle connections that hold no
// worker and are closed at --client-timeout, connections past --max-connections made to wait, the API key checked
// on the headers, a port never shared, SIGTERM obeyed within seconds whatever the clients do, the key kept out of
// the command line, a checkpoint without an LM head refused with the flag that serves it, and a reply or ranking
// whose client hung up let go of.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "server/probe_server.h"
#include "server_runs.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

void send_text(int fd, const std::string& text) { ::send(fd, text.data(), text.size(), MSG_NOSIGNAL); }

// What the server sends on `fd` within `seconds`; `closed` tells whether it closed the connection by then.
std::string receive(int fd, double seconds, bool& closed) {
  std::string got;
  closed = false;
  auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 50) <= 0) continue;
    char buffer[4096];
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

// Whether `got` holds a whole response: its headers and as many bytes of body as its Content-Length says.
bool whole_response(const std::string& got) {
  size_t end = got.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  size_t length = got.find("Content-Length: ");
  if (length == std::string::npos || length > end) return true;
  return got.size() >= end + 4 + std::stoul(got.substr(length + 16));
}

// One response read off `fd`, within `seconds`.
std::string read_response(int fd, double seconds) {
  std::string got;
  auto start = Clock::now();
  while (!whole_response(got) && seconds_since(start) < seconds) {
    bool closed = false;
    got += receive(fd, 0.05, closed);
    if (closed) break;
  }
  return got;
}

// A client that sends `request` and reads one response, within `seconds`.
std::string exchange(int port, const std::string& request, double seconds) {
  int fd = connect_loopback(port);
  send_text(fd, request);
  std::string got = read_response(fd, seconds);
  ::close(fd);
  return got;
}

const std::string kRankBody = R"({"texts": ["A short text."]})";

}  // namespace

TEST_CASE("probe_server: every body is counted as it arrives, whatever its framing; past --max-body-bytes is a 413") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_body_bytes = 1 << 20;
  RunningServer s(o);
  const Json expected = post_json(s, "/v1/rank", Json::parse(kRankBody));
  // Regression: a chunked body (no Content-Length) of 3 MB passed a 1 MB bound.
  const std::string big = Json({{"texts", {std::string(3 << 20, 'a')}}}).dump();
  auto chunked = [](const std::string& body) {
    return [body](size_t offset, httplib::DataSink& sink) {
      size_t n = std::min<size_t>(64 * 1024, body.size() - offset);
      sink.write(body.data() + offset, n);
      if (offset + n == body.size()) sink.done();
      return true;
    };
  };
  httplib::Result r = s.client().Post("/v1/rank", chunked(big), "application/json");
  REQUIRE(r);
  CHECK(r->status == 413);
  CHECK_CONTAINS(r->body, "larger than this server's limit of 1048576 bytes (--max-body-bytes)");
  // A chunked body within the bound is read as a Content-Length one is.
  r = s.client().Post("/v1/rank", chunked(kRankBody), "application/json");
  REQUIRE(r);
  REQUIRE_MESSAGE(r->status == 200, r->body);
  CHECK(Json::parse(r->body) == expected);
  // Regression: a 3 KB gzip body that inflated to 3 MB was accepted. Compressed bodies are refused, small or not.
  httplib::Client compressing = s.client();
  compressing.set_compress(true);
  for (const std::string& body : {big, kRankBody}) {
    r = compressing.Post("/v1/rank", body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 415);
    CHECK_CONTAINS(r->body, "compressed request bodies are not accepted (Content-Encoding: gzip)");
  }
  // A Content-Length or a chunk size past the bound is refused at once, before any of the body arrives.
  const std::string head = "POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  auto start = Clock::now();
  std::string got = exchange(s.port(), head + "Content-Length: 3000000\r\n\r\n", 5);
  CHECK_CONTAINS(got, "HTTP/1.1 413");
  CHECK_CONTAINS(got, "(--max-body-bytes)");
  got = exchange(s.port(), head + "Transfer-Encoding: chunked\r\n\r\n200000\r\n", 5);
  CHECK_CONTAINS(got, "HTTP/1.1 413");
  CHECK(seconds_since(start) < 3);
  // Framing that two readers could take two ways is refused.
  CHECK_CONTAINS(exchange(s.port(), head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 5), "HTTP/1.1 400");
  CHECK_CONTAINS(exchange(s.port(), head + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 5), "HTTP/1.1 400");
  CHECK_CONTAINS(exchange(s.port(), head + "Transfer-Encoding: gzip\r\n\r\n", 5), "HTTP/1.1 501");
  CHECK_CONTAINS(exchange(s.port(), head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 5), "HTTP/1.1 400");
  CHECK_CONTAINS(exchange(s.port(), "GET /healthz HTTP/1.1\r\n" + std::string(70000, 'h') + "\r\n\r\n", 5), "HTTP/1.1 431");
  // Regression: 100,000 levels of JSON killed the server.
  check_refused(s, "/v1/rank", std::string(100000, '[') + std::string(100000, ']'), 400, {"more than 32 levels deep"});
  check_refused(s, "/v1/rank", R"({"texts": )" + std::string(100000, '[') + "\"a\"" + std::string(100000, ']') + "}", 400,
                {"more than 32 levels deep"});
  // After all that the server still answers.
  CHECK(post_json(s, "/v1/rank", Json::parse(kRankBody)) == expected);
}

TEST_CASE("probe_server: slow and idle clients hold no worker; /healthz answers while 40 hang on; --client-timeout ends them") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.http_threads = 4;
  o.limits.max_streams = 1;
  o.client_timeout_s = 4;
  RunningServer s(o);
  std::vector<int> slow, idle;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(connect_loopback(s.port()));
    send_text(slow.back(), "POST /v1/rank HTTP/1.1\r\n");
    idle.push_back(connect_loopback(s.port()));
  }
  const auto start = Clock::now();
  // Regression: clients sending a header line every 2 s held every --http-threads, and /healthz went unanswered.
  std::atomic<bool> dripping{true};
  std::thread drip([&] {
    for (int line = 0; dripping; ++line) {
      for (int step = 0; step < 20 && dripping; ++step) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (int fd : slow) send_text(fd, fmt::format("X-Slow-{}: 1\r\n", line));
    }
  });
  for (int i = 0; i < 5; ++i) {
    auto asked = Clock::now();
    httplib::Result r = s.client().Get("/healthz");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(seconds_since(asked) < 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  CHECK(post_json(s, "/v1/rank", Json::parse(kRankBody))["results"].size() == 1);
  // At their deadline the slow ones are answered 408 naming the flag, the idle ones closed without a word.
  for (int fd : slow) {
    bool closed = false;
    std::string got = receive(fd, 10, closed);
    CHECK(closed);
    CHECK_CONTAINS(got, "HTTP/1.1 408");
    CHECK_CONTAINS(got, "time limit of 4 s for a request's headers and body (--client-timeout)");
  }
  for (int fd : idle) {
    bool closed = false;
    CHECK(receive(fd, 10, closed).empty());
    CHECK(closed);
  }
  CHECK(seconds_since(start) < 8);
  dripping = false;
  drip.join();
  for (int fd : slow) ::close(fd);
  for (int fd : idle) ::close(fd);
  for (int i = 0; i < 100 && s.server().open_connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(s.server().open_connections() == 0);
}

TEST_CASE("probe_server: past --max-connections new clients wait to be accepted, none is refused") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.max_connections = 4;
  o.client_timeout_s = 60;
  RunningServer s(o);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_loopback(s.port()));
  while (s.server().open_connections() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // A fifth client waits in the kernel's queue until a place is free; then it is answered.
  std::atomic<int> status{0};
  std::thread waiting([&] {
    httplib::Result r = s.client().Get("/healthz");
    status = r ? r->status : -1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(status == 0);
  ::close(idle[0]);
  waiting.join();
  CHECK(status == 200);
  for (size_t i = 1; i < idle.size(); ++i) ::close(idle[i]);
  // Many clients of one address at once (as behind a local proxy): all answered, never more than 4 open.
  std::atomic<int> answered{0};
  std::atomic<int64_t> most{0};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      most = std::max<int64_t>(most, s.server().open_connections());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::thread> clients;
  for (int i = 0; i < 40; ++i) {
    clients.emplace_back([&] {
      httplib::Result r = s.client().Get("/healthz");
      if (r && r->status == 200) ++answered;
    });
  }
  for (std::thread& client : clients) client.join();
  sampling = false;
  sampler.join();
  CHECK(answered == 40);
  CHECK(most <= 4);
}

TEST_CASE("probe_server: the API key is checked as soon as the headers are in, before any body is waited for") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.api_key = "s3cret";
  RunningServer s(o);
  const std::string head = "POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  // Without the key, a body announced but never sent is not waited for, and no 100 Continue invites it.
  auto start = Clock::now();
  std::string got = exchange(s.port(), head + "Content-Length: 900000\r\nExpect: 100-continue\r\n\r\n", 5);
  CHECK_CONTAINS(got, "HTTP/1.1 401");
  CHECK(got.find("100 Continue") == std::string::npos);
  CHECK_CONTAINS(got, "Connection: close");
  CHECK(seconds_since(start) < 3);
  got = exchange(s.port(), head + "Authorization: Bearer wrong\r\nContent-Length: 900000\r\n\r\n", 5);
  CHECK_CONTAINS(got, "HTTP/1.1 401");
  // Every path but the page and /healthz needs it, an unknown one too (the key guards what exists).
  CHECK(s.client().Get("/healthz")->status == 200);
  CHECK(s.client().Get("/")->status == 200);
  CHECK(s.client().Get("/v1/nothing")->status == 401);
  CHECK(s.client().Get("/nothing")->status == 401);
  // With the key, Expect: 100-continue gets its invitation, then the answer.
  int fd = connect_loopback(s.port());
  send_text(fd, head + fmt::format("Authorization: Bearer s3cret\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
                                   kRankBody.size()));
  bool closed = false;
  CHECK_CONTAINS(receive(fd, 1, closed), "HTTP/1.1 100 Continue");
  send_text(fd, kRankBody);
  got = read_response(fd, 30);
  ::close(fd);
  CHECK_CONTAINS(got, "HTTP/1.1 200");
  CHECK_CONTAINS(got, "\"results\"");
}

TEST_CASE("probe_server: a port another server listens on is an error naming it, never shared") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  RunningServer first(o);
  server::ServerOptions again = o;
  again.port = first.port();
  // Regression: a second server shared the port (SO_REUSEPORT) and took half of the new connections silently.
  server::ProbeServer second(again);
  CHECK_THROWS_WITH_AS(second.bind(),
                       doctest::Contains(fmt::format("cannot listen on 127.0.0.1 port {}: port {} is in use", first.port(),
                                                     first.port())
                                             .c_str()),
                       std::runtime_error);
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --device cpu --port {}", tool("probe_server"),
                                            o.engine.probes_dir, first.port()));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, fmt::format("port {} is in use: another program (another probe_server?) listens on it", first.port()));
  for (int i = 0; i < 20; ++i) CHECK(first.client().Get("/healthz")->status == 200);
}

TEST_CASE("probe_server the tool: SIGTERM stops it within seconds whatever its clients do") {
  TempDir tmp;
  std::string probes = train_probes(tmp);
  ServerProcess process({tool("probe_server"), "--probes-dir", probes, "--device", "cpu", "--port", "0", "--api-key",
                         "s3cret", "--http-threads", "4", "--max-streams", "1"},
                        tmp.file("log"));
  const int port = process.port();
  httplib::Client client("127.0.0.1", port);
  client.set_bearer_token_auth("s3cret");
  client.set_read_timeout(60);
  httplib::Result r = client.Post("/v1/rank", kRankBody, "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  // Slow and idle clients, with the key and without, and one whose body never finishes.
  std::vector<int> clients;
  for (int i = 0; i < 40; ++i) {
    clients.push_back(connect_loopback(port));
    send_text(clients.back(), i % 2 == 0 ? "POST /v1/rank HTTP/1.1\r\nX-Slow: 1\r\n"
                                         : "POST /v1/rank HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nContent-Length: 100\r\n\r\n{");
  }
  for (int i = 0; i < 5; ++i) clients.push_back(connect_loopback(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Regression: the server waited for its slow clients before it stopped.
  auto start = Clock::now();
  CHECK(process.stop(SIGTERM, 20) == 0);
  CHECK(seconds_since(start) < 3);
  for (int fd : clients) ::close(fd);
  CHECK_CONTAINS(read_text(tmp.file("log")), "Terminated: shutting down");
}

TEST_CASE("probe_server the tool: the API key from the command line (then blanked there), a file or the environment") {
  TempDir tmp;
  std::string probes = train_probes(tmp);
  write_text(tmp.file("key"), "fr0m-file\n");
  write_text(tmp.file("empty"), "\n");
  write_text(tmp.file("spaced"), "two words\n");
  struct Way {
    std::vector<std::string> flags;
    std::vector<std::string> environment;
    std::string key;
  };
  for (const Way& way : {Way{{"--api-key", "fr0m-args"}, {}, "fr0m-args"}, Way{{"--api-key=fr0m-args"}, {}, "fr0m-args"},
                         Way{{"--api-key-file", tmp.file("key")}, {}, "fr0m-file"},
                         Way{{}, {"PROBE_SERVER_API_KEY=fr0m-env"}, "fr0m-env"}}) {
    CAPTURE(way.key);
    std::vector<std::string> args = {tool("probe_server"), "--probes-dir", probes, "--device", "cpu", "--port", "0"};
    args.insert(args.end(), way.flags.begin(), way.flags.end());
    ServerProcess process(args, tmp.file("log"), way.environment);
    httplib::Client client("127.0.0.1", process.port());
    client.set_read_timeout(60);
    CHECK(client.Get("/v1/info")->status == 401);
    client.set_bearer_token_auth(way.key);
    CHECK(client.Get("/v1/info")->status == 200);
    // Regression: a key given with --api-key stayed in /proc/PID/cmdline, which every local user reads (`ps`).
    const std::string cmdline = read_text(fmt::format("/proc/{}/cmdline", process.pid));
    CHECK(cmdline.find(way.key) == std::string::npos);
    CHECK_CONTAINS(cmdline, "--probes-dir");
    CHECK(process.stop(SIGTERM, 20) == 0);
  }
  std::string run = fmt::format("{} --probes-dir {} --device cpu --port 0", tool("probe_server"), probes);
  check_failure(run_command(run + " --api-key a --api-key-file " + tmp.file("key")), 2, {"excludes"});
  check_failure(run_command(run + " --api-key-file " + tmp.file("empty")), 2, {"the file's first line is empty"});
  const std::string missing = "--api-key-file " + tmp.file("nokey") + ": no such file (it holds the API key)";
  check_failure(run_command(run + " --api-key-file " + tmp.file("nokey")), 2, {missing.c_str()});
  check_failure(run_command(run + " --api-key-file " + tmp.file("spaced")), 2, {"holds a space or a control character"});
  check_failure(run_command("PROBE_SERVER_API_KEY= " + run), 2, {"$PROBE_SERVER_API_KEY is set but empty"});
}

TEST_CASE("probe_server the tool: a checkpoint without an LM head is refused saying --no-generate serves it") {
  TempDir tmp;
  std::string probes = train_probes(tmp);
  copy_dir(kGemmaModel, tmp.file("untied"));
  Json config = read_json_file(tmp.file("untied/config.json"));
  config["tie_word_embeddings"] = false;
  write_json_file(tmp.file("untied/config.json"), config);
  // Its config differs from the probes' model: --force.
  std::string run = fmt::format("{} --probes-dir {} --model {} --device cpu --port 0 --force", tool("probe_server"), probes,
                                tmp.file("untied"));
  CommandResult r = run_command(run);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "no LM head lm_head.weight");
  CHECK_CONTAINS(r.output, "pass --no-generate to serve rankings and per-token scores without it");
  ServerProcess process({tool("probe_server"), "--probes-dir", probes, "--model", tmp.file("untied"), "--device", "cpu",
                         "--port", "0", "--no-generate", "--force"},
                        tmp.file("log"));
  httplib::Client client("127.0.0.1", process.port());
  client.set_read_timeout(60);
  httplib::Result ranked = client.Post("/v1/rank", kRankBody, "application/json");
  REQUIRE(ranked);
  CHECK(ranked->status == 200);
  CHECK(process.stop(SIGTERM, 20) == 0);
}

TEST_CASE("probe_server: /v1/generate at any positive temperature, however small, gives the greedy tokens") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_new_tokens = 8;
  RunningServer s(o);
  auto token_ids = [&](double temperature) {
    Json body = {{"prompt", "Once upon a time"}, {"max_new_tokens", 8}, {"stop", false}, {"temperature", temperature}};
    httplib::Result r = post(s, "/v1/generate", body.dump());
    REQUIRE(r);
    REQUIRE_MESSAGE(r->status == 200, r->body);
    std::vector<int64_t> ids;
    for (size_t at = r->body.find("event: token\ndata: "); at != std::string::npos;
         at = r->body.find("event: token\ndata: ", at + 1)) {
      size_t start = at + 19;
      ids.push_back(Json::parse(r->body.substr(start, r->body.find('\n', start) - start))["id"].get<int64_t>());
    }
    CHECK_MESSAGE(r->body.find("event: error") == std::string::npos, r->body);
    return ids;
  };
  std::vector<int64_t> greedy = token_ids(0);
  REQUIRE(greedy.size() == 8);
  // Regression: logits / 1e-40 overflowed to infinity and the softmax turned to NaN (arbitrary tokens).
  for (double temperature : {1e-40, 1e-300, 5e-324}) {
    CAPTURE(temperature);
    CHECK(token_ids(temperature) == greedy);
  }
}

TEST_CASE("probe_server: a chat completion whose client hangs up while it waits lets go of its stream at once") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_new_tokens = 100000;
  RunningServer s(o);
  const std::string body = endless_chat_body();
  httplib::Client client = s.client();
  client.set_read_timeout(0, 500000);  // the client gives up after half a second and closes its connection
  CHECK_FALSE(client.Post("/v1/chat/completions", body, "application/json"));
  // Regression: nobody waited for the reply, yet it ran on towards its 100,000 tokens holding its --max-streams slot.
  for (int i = 0; i < 500 && s.server().open_streams() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(s.server().open_streams() == 0);
  // A ranking waiting on the worker whose client hangs up is withdrawn from the queue.
  {
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    httplib::Client impatient = s.client();
    impatient.set_read_timeout(0, 300000);
    CHECK_FALSE(impatient.Post("/v1/rank", R"({"texts": ["a text nobody waits for"]})", "application/json"));
    for (int i = 0; i < 500 && s.server().scheduler().queue_depth() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(s.server().scheduler().queue_depth() == 0);
  }
  // A job already running (a long text's per-token passes) ends at its next pass once its request has stopped
  // waiting: here at its deadline, as when its client hangs up (regression: its passes checked the deadline and the
  // server only, so a client that hung up left it running to its deadline).
  std::atomic<int> ended_with{0};
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  auto late_pass = [&ended_with, deadline](const std::function<void()>& before_pass) {
    std::this_thread::sleep_until(deadline + std::chrono::seconds(1));  // its request has left by then
    try {
      before_pass();
    } catch (const server::RequestError& e) {
      ended_with = e.status();
      throw;
    }
    return 0;
  };
  CHECK_THROWS_WITH_AS(s.server().scheduler().run_alone<int>(late_pass, deadline), doctest::Contains("time limit"),
                       server::RequestError);
  for (int i = 0; i < 1000 && ended_with == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(ended_with == 499);  // let go by its request (its own deadline check would say 408)
}

TEST_CASE("probe_server /v1/chat/completions: OpenAI's developer role is the template's system role; unread tools refused") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  auto ask = [&](const Json& messages, const Json& extra = Json::object()) {
    Json body = {{"messages", messages}, {"max_tokens", 1}, {"temperature", 0}};
    body.update(extra);
    httplib::Result r = post(s, "/v1/chat/completions", body.dump());
    REQUIRE(r);
    return std::make_pair(r->status, Json::parse(r->body));
  };
  const Json user = {{"role", "user"}, {"content", "Hi"}};
  const auto as_system = ask(Json::array({{{"role", "system"}, {"content", "Be brief."}}, user}));
  const auto as_developer = ask(Json::array({{{"role", "developer"}, {"content", "Be brief."}}, user}));
  REQUIRE(as_system.first == 200);
  // Regression: the fixture's Gemma 3 template, which knows no developer role, refused the conversation.
  REQUIRE(as_developer.first == 200);
  CHECK(as_developer.second["usage"] == as_system.second["usage"]);
  CHECK(as_developer.second["choices"] == as_system.second["choices"]);
  // Its template never reads tools: offering them is refused, not dropped (regression: a 200 that ignored them).
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  const auto with_tools = ask(Json::array({user}), {{"tools", tools}});
  CHECK(with_tools.first == 400);
  CHECK_CONTAINS(with_tools.second["error"]["message"].get<std::string>(), "this chat template never reads 'tools'");
  CHECK(with_tools.second["error"]["param"] == "tools");  // regression: it named messages
}
