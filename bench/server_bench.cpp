// Client-side latency of a running probe_server: a warm POST /v1/rank of one text, one request at a time (p50,
// p99), then `--clients` clients sending requests for `--seconds` at once (requests per second, p50, p99).
// Prints one JSON object.
//
//   probe_server --probes-dir P --port 8080 &
//   server_bench --port 8080 [--requests 300] [--clients 32] [--seconds 10] [--words 100]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/json.h"

using namespace probekit;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int requests = 300;
  int clients = 32;
  double seconds = 10;
  int words = 100;
};

// A text of `words` common English words (about one token each for the usual tokenizers).
std::string text_of(int words) {
  static const char* vocabulary[] = {"the", "day", "I", "saw", "a", "chance", "to", "learn", "from", "what", "had",
                                     "gone", "wrong", "and", "so", "we", "tried", "again", "with", "care"};
  std::string text;
  for (int i = 0; i < words; ++i) text += (i ? " " : "") + std::string(vocabulary[i % 20]);
  return text + ".";
}

// Milliseconds one /v1/rank request took, client-side.
double timed_rank(httplib::Client& client, const std::string& body) {
  auto start = Clock::now();
  httplib::Result r = client.Post("/v1/rank", body, "application/json");
  if (!r || r->status != 200) {
    throw std::runtime_error(r ? fmt::format("HTTP {}: {}", r->status, r->body) : "no answer: " + httplib::to_string(r.error()));
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))];
}

httplib::Client client_for(const BenchOptions& o) {
  httplib::Client client(o.host, o.port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);  // as curl and browsers do
  client.set_read_timeout(120);
  if (!o.api_key.empty()) client.set_bearer_token_auth(o.api_key);
  return client;
}

Json sequential(const BenchOptions& o, const std::string& body) {
  httplib::Client client = client_for(o);
  for (int i = 0; i < 10; ++i) timed_rank(client, body);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < o.requests; ++i) ms.push_back(timed_rank(client, body));
  return {{"requests", o.requests}, {"p50_ms", percentile(ms, 0.5)}, {"p99_ms", percentile(ms, 0.99)}};
}

Json concurrent(const BenchOptions& o, const std::string& body) {
  std::vector<std::vector<double>> ms(static_cast<size_t>(o.clients));
  std::atomic<bool> failed{false};
  auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t c = 0; c < ms.size(); ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client = client_for(o);
      try {
        while (Clock::now() < end) ms[c].push_back(timed_rank(client, body));
      } catch (const std::exception& e) {
        fmt::print(stderr, "client {}: {}\n", c, e.what());
        failed = true;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& m : ms) all.insert(all.end(), m.begin(), m.end());
  if (failed || all.empty()) throw std::runtime_error("some requests failed");
  return {{"clients", o.clients}, {"requests", all.size()}, {"seconds", elapsed},
          {"requests_per_s", static_cast<double>(all.size()) / elapsed}, {"p50_ms", percentile(all, 0.5)},
          {"p99_ms", percentile(all, 0.99)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Latency of a running probe_server's /v1/rank, one client and many");
  BenchOptions o;
  app.add_option("--host", o.host, "The server's address")->capture_default_str();
  app.add_option("--port", o.port, "The server's port")->capture_default_str();
  app.add_option("--api-key", o.api_key, "Sent as the bearer token, for a server started with --api-key");
  app.add_option("--requests", o.requests, "Sequential requests measured")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--clients", o.clients, "Concurrent clients")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seconds", o.seconds, "How long the concurrent clients send")->capture_default_str();
  app.add_option("--words", o.words, "Words of the text ranked")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    std::string body = Json{{"texts", {text_of(o.words)}}}.dump();
    Json result = {{"words", o.words}, {"sequential", sequential(o, body)}, {"concurrent", concurrent(o, body)}};
    fmt::print("{}\n", result.dump(2));
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
