// probe_server over real HTTP: each case trains probes on a fixture model, starts the server on a free loopback
// port (in this process, or the tool as a process) and calls it with httplib's client. The API's numbers equal
// multi_probe_inference --json's; every bound and bad request gets its 4xx naming the field or the bound; queued
// requests share one cycle of the device worker and get the numbers they get one at a time; the tool refuses a
// public host without a key and stops cleanly on SIGTERM and SIGINT.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "common/json.h"
#include "generation/flags.h"
#include "server/probe_server.h"
#include "server_runs.h"
#include "test_paths.h"
#include "test_util.h"

extern char** environ;

using namespace probekit;
using namespace probekit::testing;

namespace {

const std::vector<std::string> kTexts = {kReframingText, "I examined each part of the problem step by step.",
                                         "Suddenly I noticed the small crack in the window.", "Day 12.",
                                         "The weather was fine, and nothing at all happened that afternoon in the town.",
                                         "Reframing it, I saw a lesson."};

// The JSON a tool printed (indented, so it starts with "{" or "[" and a line break), after its log lines.
Json printed_json(const CommandResult& r) {
  size_t start = std::min(r.output.find("{\n"), r.output.find("[\n"));
  REQUIRE_MESSAGE(start != std::string::npos, r.output);
  return Json::parse(r.output.substr(start));
}

// Equal JSON, numbers within 1e-6 (texts batched with others are padded to another length).
void check_same_json(const Json& got, const Json& expected, const std::string& where, double tolerance = 1e-6) {
  if (expected.is_number_float()) {
    REQUIRE_MESSAGE(got.is_number(), where, ": ", got.dump());
    CHECK_MESSAGE(std::fabs(got.get<double>() - expected.get<double>()) <= tolerance, where, ": ", got, " vs ", expected);
  } else if (expected.is_object() || expected.is_array()) {
    REQUIRE_MESSAGE(got.size() == expected.size(), where, ": ", got.dump(), " vs ", expected.dump());
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      std::string key = expected.is_object() ? it.key() : std::to_string(std::distance(expected.begin(), it));
      const Json& mine = expected.is_object() ? got.at(it.key()) : got.at(static_cast<size_t>(std::distance(expected.begin(), it)));
      check_same_json(mine, *it, where + "/" + key, tolerance);
    }
  } else {
    CHECK_MESSAGE(got == expected, where, ": ", got.dump(), " vs ", expected.dump());
  }
}

}  // namespace

TEST_CASE("probe_server: /v1/rank and /v1/per-token equal multi_probe_inference --json; /v1/info, /healthz, the page") {
  TempDir tmp;
  std::string probes = train_probes(tmp);
  RunningServer s(options_for(probes));
  std::string texts_file = tmp.file("texts.txt");
  probekit::testing::write_text(texts_file, kTexts[0] + "\n" + kTexts[1] + "\n" + kTexts[2] + "\n");
  std::string cli = fmt::format("{} --probes-dir {} --device cpu --json --file {}", tool("multi_probe_inference"), probes,
                                texts_file);
  Json texts = {kTexts[0], kTexts[1], kTexts[2]};
  struct Variant {
    Json request;
    std::string flags;
  };
  for (const Variant& v : {Variant{{{"top_k", 4}}, "--top-k 4"},
                           Variant{{{"layers", {5}}, {"threshold", 0.3}}, "--layers 5 --threshold 0.3"},
                           Variant{{{"mode", "by-action"}, {"aggregate", "mean"}}, "--mode by-action --aggregate mean"},
                           Variant{{{"mode", "by-layer"}, {"calibrated", true}}, "--mode by-layer --calibrated"}}) {
    CAPTURE(v.flags);
    Json request = v.request;
    request["texts"] = texts;
    Json served = post_json(s, "/v1/rank", request);
    CommandResult printed = run_command(cli + " " + v.flags);
    REQUIRE_MESSAGE(printed.exit_code == 0, printed.output);
    check_same_json(served["results"], printed_json(printed), v.flags);
  }
  // One conversation, ranked at the assistant's tokens (the probes were trained on texts).
  const Json messages = Json::array({{{"role", "user"}, {"content", "How did the review go?"}},
                                     {{"role", "assistant"}, {"content", kTexts[1]}}});
  probekit::testing::write_text(tmp.file("chat.json"), messages.dump());
  Json served_chat = post_json(s, "/v1/rank", {{"messages", messages}, {"top_k", 3}});
  CommandResult printed_chat = run_command(fmt::format("{} --probes-dir {} --device cpu --json --top-k 3 --messages {}",
                                                       tool("multi_probe_inference"), probes, tmp.file("chat.json")));
  REQUIRE_MESSAGE(printed_chat.exit_code == 0, printed_chat.output);
  check_same_json(served_chat["results"], Json::array({printed_json(printed_chat)}), "messages");
  check_refused(s, "/v1/rank", Json({{"messages", messages}, {"texts", texts}}).dump(), 400, {"not both"}, "messages");
  Json per_token = post_json(s, "/v1/per-token", {{"text", kReframingText}});
  CommandResult printed = run_command(fmt::format("{} --probes-dir {} --device cpu --json --per-token --text \"{}\"",
                                                  tool("multi_probe_inference"), probes, kReframingText));
  REQUIRE_MESSAGE(printed.exit_code == 0, printed.output);
  check_same_json(per_token, printed_json(printed), "per-token");
  CHECK(per_token["tokens"][1]["text"].is_string());
  Json chat_tokens = post_json(s, "/v1/per-token", {{"messages", messages}});
  CommandResult printed_tokens = run_command(fmt::format("{} --probes-dir {} --device cpu --json --per-token --messages {}",
                                                         tool("multi_probe_inference"), probes, tmp.file("chat.json")));
  REQUIRE_MESSAGE(printed_tokens.exit_code == 0, printed_tokens.output);
  check_same_json(chat_tokens, printed_json(printed_tokens), "per-token messages");
  CHECK(chat_tokens["tokens"][0]["in_mask"] == false);
  check_refused(s, "/v1/per-token", Json({{"messages", messages}, {"text", "a"}}).dump(), 400, {"not both"}, "messages");
  // A conversation the template refuses names 'messages' as its field (regression: none).
  const Json unordered = Json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
  for (const char* path : {"/v1/rank", "/v1/per-token"}) {
    check_refused(s, path, Json({{"messages", unordered}}).dump(), 400, {"Conversation roles must alternate"}, "messages");
  }

  httplib::Result info = s.client().Get("/v1/info");
  REQUIRE(info);
  Json i = Json::parse(info->body);
  CHECK(i["layers"] == Json({2, 5}));
  CHECK(i["labels"] == Json({"analyzing", "noticing", "reframing"}));
  CHECK(i["device"] == "cpu");
  CHECK_CONTAINS(i["model"].get<std::string>(), "gemma3_text");
  CHECK(i["limits"]["max_texts"] == 64);
  CHECK(i["limits"]["client_timeout_s"] == 10.0);
  CHECK(i["limits"]["max_connections"] == 512);
  CHECK(i["limits"]["http_threads"] == 16);
  httplib::Result health = s.client().Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  httplib::Result page = s.client().Get("/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK_CONTAINS(page->body, "<title>probekit probe server</title>");
  // Self-contained: nothing is fetched from elsewhere, and the browser is told so.
  CHECK(page->body.find("http://") == std::string::npos);
  CHECK(page->body.find("https://") == std::string::npos);
  CHECK(page->body.find("<link") == std::string::npos);
  CHECK(page->body.find(" src=") == std::string::npos);
  CHECK_CONTAINS(page->get_header_value("Content-Security-Policy"), "default-src 'none'");
}

TEST_CASE("probe_server: a conversation's tools reach the template in /v1/rank and /v1/per-token, as in --messages") {
  TempDir tmp;
  const std::string probes = train_probes(tmp);
  // The fixture's Gemma 3 template prints no tools: this one prints them before the turns, as Qwen 3's does.
  const std::string model = tmp.file("model");
  copy_dir(kGemmaModel, model);
  probekit::testing::write_text(
      model + "/chat_template.jinja",
      "{{ bos_token }}{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}{% for m in messages %}"
      "<start_of_turn>{% if m.role == 'assistant' %}model{% else %}{{ m.role }}{% endif %}\n{{ m.content }}"
      "<end_of_turn>\n{% endfor %}");
  server::ServerOptions o = options_for(probes);
  o.engine.model_dir = model;
  o.engine.force = true;
  RunningServer s(o);
  const Json messages = Json::array({{{"role", "user"}, {"content", "How did the review go?"}},
                                     {{"role", "assistant"}, {"content", kTexts[1]}}});
  const Json tools =
      Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  probekit::testing::write_text(tmp.file("chat.json"), Json({{"messages", messages}, {"tools", tools}}).dump());
  const std::string cli = fmt::format("{} --probes-dir {} --model {} --force --device cpu --json --messages {}",
                                      tool("multi_probe_inference"), probes, model, tmp.file("chat.json"));
  // Regression: both endpoints answered "unknown field 'tools'" (capture, --messages and chat completions took them).
  const Json ranked = post_json(s, "/v1/rank", {{"messages", messages}, {"tools", tools}});
  CommandResult printed = run_command(cli);
  REQUIRE_MESSAGE(printed.exit_code == 0, printed.output);
  check_same_json(ranked["results"], Json::array({printed_json(printed)}), "rank with tools");
  // The tools are rendered, not dropped: the assistant's tokens read them, so the scores move.
  const Json ranked_without = post_json(s, "/v1/rank", {{"messages", messages}});
  CHECK(ranked_without["results"] != ranked["results"]);
  const Json tokens = post_json(s, "/v1/per-token", {{"messages", messages}, {"tools", tools}});
  CommandResult printed_tokens = run_command(cli + " --per-token");
  REQUIRE_MESSAGE(printed_tokens.exit_code == 0, printed_tokens.output);
  check_same_json(tokens, printed_json(printed_tokens), "per-token with tools");
  const Json tokens_without = post_json(s, "/v1/per-token", {{"messages", messages}});
  CHECK(tokens["tokens"].size() > tokens_without["tokens"].size() + 5);  // the tools' tokens
  // Tools without messages: no template would render them.
  check_refused(s, "/v1/rank", Json({{"texts", Json::array({"a"})}, {"tools", tools}}).dump(), 400,
                {"'tools' need 'messages'"}, "tools");
  check_refused(s, "/v1/per-token", Json({{"text", "a"}, {"tools", tools}}).dump(), 400, {"'tools' need 'messages'"},
                "tools");
  const Json web_tools = Json::parse(R"([{"type": "web"}])");
  check_refused(s, "/v1/per-token", Json({{"messages", messages}, {"tools", web_tools}}).dump(), 400,
                {"'tools[0].type' must be \"function\""}, "tools[0].type");
}

namespace {

// A server with small bounds: 4000 bytes a body, 2 texts, 20 tokens a text, 8 new tokens.
server::ServerOptions bounded_options(const TempDir& tmp) {
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_body_bytes = 4000;
  o.limits.max_texts = 2;
  o.limits.max_tokens = 20;
  o.limits.max_new_tokens = 8;
  return o;
}

}  // namespace

TEST_CASE("probe_server: bad requests get 400 naming the field; requests past a bound get a 4xx naming the bound") {
  TempDir tmp;
  RunningServer s(bounded_options(tmp));
  check_refused(s, "/v1/rank", "{\"texts\": [\"a\"", 400, {"invalid JSON at column", "syntax error while parsing array"});
  check_refused(s, "/v1/rank", "[\"a\"]", 400, {"the request body must be a JSON object"});
  check_refused(s, "/v1/rank", "{}", 400, {"'texts' is missing"}, "texts");
  check_refused(s, "/v1/rank", R"({"texts": "a text"})", 400, {"'texts' must be a list of strings"}, "texts");
  check_refused(s, "/v1/rank", R"({"texts": []})", 400, {"'texts' is empty"}, "texts");
  check_refused(s, "/v1/rank", R"({"texts": ["a", 7]})", 400, {"'texts[1]' must be a string, got 7"}, "texts[1]");
  check_refused(s, "/v1/rank", R"({"texts": ["  "]})", 400, {"'texts[0]' is empty"}, "texts[0]");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "top_k": "5"})", 400, {"'top_k' must be an integer"}, "top_k");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "top_k": 0})", 400, {"'top_k' must be from 1"}, "top_k");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "threshold": 1.5})", 400, {"'threshold' must be a number from 0 to 1"}, "threshold");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "calibrated": 1})", 400, {"'calibrated' must be true or false"}, "calibrated");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "layers": [5, 9]})", 400, {"layer 9 has no probes loaded (loaded layers: 2, 5)"},
                "layers[1]");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "layers": 5})", 400, {"'layers' must be a list of layer numbers"}, "layers");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "mode": "every"})", 400, {"'mode' must be one of all, by-action, by-layer"}, "mode");
  check_refused(s, "/v1/rank", R"({"texts": ["a"], "topk": 3})", 400, {"unknown field 'topk'"}, "topk");
  check_refused(s, "/v1/per-token", R"({"texts": ["a"]})", 400, {"'text' is missing"}, "text");
  check_refused(s, "/v1/per-token", R"({"text": "a", "mode": "by-layer"})", 400, {"unknown field 'mode'"}, "mode");
  check_refused(s, "/v1/rank", "{\"texts\": [\"caf\xc3\"]}", 400, {"invalid JSON"});
  // The bounds, each named by its flag.
  check_refused(s, "/v1/rank", R"({"texts": ["a", "b", "c"]})", 413, {"holds 3 texts", "limit of 2 per request (--max-texts)"},
                "texts");
  std::string long_text(30, 'w');
  for (int i = 0; i < 30; ++i) long_text += " word";
  check_refused(s, "/v1/rank", Json({{"texts", {"short", long_text}}}).dump(), 413, {"'texts[1]' is", "(--max-tokens)"}, "texts[1]");
  check_refused(s, "/v1/per-token", Json({{"text", long_text}}).dump(), 413, {"limit of 20 tokens per text (--max-tokens)"}, "text");
  check_refused(s, "/v1/rank", Json({{"texts", {std::string(5000, 'a')}}}).dump(), 413,
                {"larger than this server's limit of 4000 bytes (--max-body-bytes)"});
  // Regression: a conversation given to /v1/rank was not held to --max-tokens, as /v1/per-token holds it.
  const Json long_chat = Json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", long_text}}});
  check_refused(s, "/v1/rank", Json({{"messages", long_chat}}).dump(), 413, {"'messages' is", "(--max-tokens)"}, "messages");
}

TEST_CASE("probe_server: a body past its bound in OpenAI's shape, media types, unknown paths, methods, Keep-Alive") {
  TempDir tmp;
  RunningServer s(bounded_options(tmp));
  // Regression: refused before the request was whole, /v1/chat/completions answered in probekit's shape, uncounted.
  httplib::Result big = post(s, "/v1/chat/completions",
                             Json({{"messages", {{{"role", "user"}, {"content", std::string(5000, 'a')}}}}}).dump());
  REQUIRE(big);
  CHECK(big->status == 413);
  const Json openai = Json::parse(big->body);
  REQUIRE(openai["error"].is_object());
  CHECK_CONTAINS(openai["error"]["message"].get<std::string>(), "(--max-body-bytes)");
  httplib::Result metrics = s.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK_CONTAINS(metrics->body, "probekit_requests_total{endpoint=\"/v1/chat/completions\",status=\"413\"} 1");
  // Not JSON, no such endpoint.
  httplib::Result r = s.client().Post("/v1/rank", R"({"texts": ["a"]})", "text/plain");
  REQUIRE(r);
  CHECK(r->status == 415);
  CHECK_CONTAINS(r->body, "Content-Type: application/json");
  // The media type in any case and with parameters; not one that only starts like it (regression: the header's
  // start was compared, case and all).
  CHECK(s.client().Post("/v1/rank", R"({"texts": ["a"]})", "Application/JSON; charset=utf-8")->status == 200);
  CHECK(s.client().Post("/v1/rank", R"({"texts": ["a"]})", "application/jsonl")->status == 415);
  r = s.client().Get("/v1/ranking");
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK_CONTAINS(r->body, "no endpoint GET /v1/ranking (the endpoints: GET /, GET /healthz");
  // A served path asked with another method is a 405 naming the one it takes (regression: a 404).
  r = s.client().Get("/v1/rank");
  REQUIRE(r);
  CHECK(r->status == 405);
  CHECK(r->get_header_value("Allow") == "POST");
  CHECK_CONTAINS(r->body, "GET /v1/rank is not served: this endpoint takes POST");
  r = s.client().Post("/v1/info", "{}", "application/json");
  REQUIRE(r);
  CHECK(r->status == 405);
  CHECK(r->get_header_value("Allow") == "GET");
  // A kept-alive connection is told this server's idle limit (--client-timeout, 10 s), not httplib's own 5 s.
  httplib::Client kept = s.client();
  kept.set_keep_alive(true);
  r = kept.Get("/healthz");
  REQUIRE(r);
  CHECK(r->get_header_value("Keep-Alive") == "timeout=10, max=2147483647");
  // After all that, the server still answers.
  CHECK(post_json(s, "/v1/rank", {{"texts", {"A short text."}}})["results"].size() == 1);
}

TEST_CASE("probe_server: the time limit per request, the queue's bound and the API key") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.request_timeout_s = 0.5;
  o.limits.max_queued_texts = 2;
  o.api_key = "s3cret";
  RunningServer s(o);
  auto with_key = [&] {
    httplib::Client c = s.client();
    c.set_bearer_token_auth("s3cret");
    return c;
  };
  // The key: every /v1/ request needs it; the page and /healthz do not.
  httplib::Result r = s.client().Get("/v1/info");
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK_CONTAINS(r->body, "Authorization: Bearer KEY (--api-key)");
  CHECK(r->get_header_value("WWW-Authenticate") == "Bearer");
  httplib::Client wrong = s.client();
  wrong.set_bearer_token_auth("s3cres");
  httplib::Result refused = wrong.Get("/v1/info");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  CHECK_CONTAINS(refused->body, "the header Authorization does not carry this server's API key");
  // The scheme's name in any case (regression: only "Bearer" was taken).
  CHECK(s.client().Get("/v1/info", {{"Authorization", "bearer s3cret"}})->status == 200);
  CHECK(s.client().Get("/v1/info", {{"Authorization", "BEARER s3cres"}})->status == 401);
  CHECK(s.client().Get("/v1/info", {{"Authorization", "Basic s3cret"}})->status == 401);
  CHECK(with_key().Get("/v1/info")->status == 200);
  CHECK(s.client().Get("/healthz")->status == 200);
  CHECK(s.client().Get("/")->status == 200);
  {
    // While the worker is held, a request waits in the queue until its time is up; the queue takes 2 texts.
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    std::optional<httplib::Result> late;
    std::thread waiting([&] { late.emplace(with_key().Post("/v1/rank", R"({"texts": ["one", "two"]})", "application/json")); });
    while (s.server().scheduler().queued_texts() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r = with_key().Post("/v1/rank", R"({"texts": ["three"]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 429);
    CHECK_CONTAINS(r->body, "2 texts are already waiting for the device, and this server queues at most 2 (--max-queued-texts)");
    // A request that could never be queued is told so, not asked to try again (regression: a 429).
    r = with_key().Post("/v1/rank", R"({"texts": ["a", "b", "c"]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK_CONTAINS(r->body, "this request's 3 texts are more than this server queues at once (2: --max-queued-texts)");
    waiting.join();
    REQUIRE((late && *late));
    CHECK((*late)->status == 408);
    CHECK_CONTAINS((*late)->body, "longer than this server's time limit per request (--request-timeout)");
    // Regression: a request whose time is up frees its place in the queue at once, not when the worker is free.
    CHECK(s.server().scheduler().queued_texts() == 0);
  }
  r = with_key().Post("/v1/rank", R"({"texts": ["four"]})", "application/json");
  REQUIRE(r);
  CHECK_MESSAGE(r->status == 200, r->body);
  // What a long job (per-token prefixes, a prompt monitor's reading) calls before each pass: it ends the job once its
  // deadline has passed or its reader has gone.
  auto status_of = [](const std::function<void()>& before_pass) {
    try {
      before_pass();
    } catch (const server::RequestError& e) {
      return e.status();
    }
    return 0;
  };
  const server::Scheduler& scheduler = s.server().scheduler();
  const server::Clock::time_point later = server::Clock::now() + std::chrono::minutes(1);
  CHECK(status_of(scheduler.pass_guard(later)) == 0);
  CHECK(status_of(scheduler.pass_guard(later, [] { return false; })) == 0);
  CHECK(status_of(scheduler.pass_guard(server::Clock::now())) == 408);
  CHECK(status_of(scheduler.pass_guard(later, [] { return true; })) == 499);
}

TEST_CASE("probe_server: concurrent requests are scored in one cycle and get the numbers they get one at a time") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  std::vector<Json> alone;
  for (const std::string& text : kTexts) alone.push_back(post_json(s, "/v1/rank", {{"texts", {text}}, {"top_k", 6}}));
  server::SchedulerStats before = s.server().scheduler().stats();
  std::vector<std::optional<httplib::Result>> together(kTexts.size());
  {
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    std::vector<std::thread> clients;
    for (size_t i = 0; i < kTexts.size(); ++i) {
      clients.emplace_back([&, i] { together[i].emplace(post(s, "/v1/rank", Json({{"texts", {kTexts[i]}}, {"top_k", 6}}).dump())); });
    }
    while (s.server().scheduler().queued_texts() < static_cast<int64_t>(kTexts.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    hold.reset();
    for (std::thread& client : clients) client.join();
  }
  server::SchedulerStats after = s.server().scheduler().stats();
  CHECK(after.cycles - before.cycles == 1);
  CHECK(after.batched_requests - before.batched_requests == static_cast<int64_t>(kTexts.size()));
  CHECK(after.texts_scored - before.texts_scored == static_cast<int64_t>(kTexts.size()));
  for (size_t i = 0; i < kTexts.size(); ++i) {
    REQUIRE((together[i] && *together[i]));
    const httplib::Response& response = **together[i];
    REQUIRE_MESSAGE(response.status == 200, response.body);
    // To the bit on the CPU in fp32 (regression: 18 scores a layer took ATen's vectorized sigmoid, one text's 3 its
    // scalar one, a bit apart).
    check_same_json(Json::parse(response.body), alone[i], kTexts[i], 0.0);
  }
}


TEST_CASE("probe_server the tool: a public host needs --api-key; it serves, and stops cleanly on SIGTERM and SIGINT") {
  TempDir tmp;
  std::string probes = train_probes(tmp);
  std::string run = fmt::format("{} --probes-dir {} --device cpu", tool("probe_server"), probes);
  probekit::testing::check_failure(run_command(run + " --host 0.0.0.0"), 2,
                                   {"--host 0.0.0.0: listening beyond this machine (loopback) needs --api-key"});
  probekit::testing::check_failure(run_command(run + " --max-streams 16 --http-threads 16"), 2,
                                   {"--max-streams 16 leaves none of the 16 --http-threads"});
  probekit::testing::check_failure(run_command(run + " --max-texts 0"), 2, {"--max-texts"});
  for (int signal : {SIGTERM, SIGINT}) {
    CAPTURE(signal);
    ServerProcess process({tool("probe_server"), "--probes-dir", probes, "--device", "cpu", "--port", "0"}, tmp.file("log"));
    httplib::Client client("127.0.0.1", process.port());
    client.set_read_timeout(60);
    httplib::Result r = client.Post("/v1/rank", Json({{"texts", {kReframingText}}}).dump(), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(Json::parse(r->body)["results"][0]["predictions"].size() >= 1);
    CHECK(process.stop(signal) == 0);
    std::string log = probekit::testing::read_text(tmp.file("log"));
    CHECK_CONTAINS(log, "probe_server: 3 labels, layers 2,5, on http://127.0.0.1:");
    CHECK_CONTAINS(log, signal == SIGTERM ? "Terminated: shutting down" : "Interrupt: shutting down");
    CHECK_CONTAINS(log, "stopped");
  }
}

TEST_CASE("probe_server the tool: started with SIGINT ignored, it keeps serving through SIGINT and stops on SIGTERM") {
  TempDir tmp;
  std::string probes = train_probes(tmp);
  // As sh starts a script's background job: the server inherits SIGINT ignored (regression: it installed its own
  // handler, and the terminal's Ctrl-C stopped a server the script had started in the background).
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGINT, &ignore, &previous);
  ServerProcess process({tool("probe_server"), "--probes-dir", probes, "--device", "cpu", "--port", "0"}, tmp.file("log"));
  sigaction(SIGINT, &previous, nullptr);
  httplib::Client client("127.0.0.1", process.port());
  kill(process.pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  httplib::Result r = client.Get("/healthz");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(process.stop(SIGTERM) == 0);
  std::string log = probekit::testing::read_text(tmp.file("log"));
  CHECK(log.find("Interrupt: shutting down") == std::string::npos);
  CHECK_CONTAINS(log, "Terminated: shutting down");
}

namespace {

// POST /v1/generate, its body handed to `receive` as it arrives (returning false hangs up).
httplib::Result generate(const RunningServer& s, const Json& body, const httplib::ContentReceiverWithProgress& receive) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/generate";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = receive;
  return s.client().send(req);
}

// The events of /v1/generate for "Once upon a time" (6 tokens, no stop): the same tokens and scores as the engine's
// own generation, token by token, then "done".
void check_streamed_generation(RunningServer& s, const std::vector<ServerEvent>& events) {
  // To the last bit (epsilon 1e-9 of a double holding a float), since the server's decode steps and the engine's differ
  // only in their batch and the cache's visible length, which change no bit of the CPU's fixed-order products and
  // attention on any kernel.
  const std::vector<inference::ScoredToken> expected = engine_generation(s.server().engine(), "Once upon a time", 6);
  REQUIRE(expected.size() == 6);
  std::string text;
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    const Json& token = events[i].data;
    CHECK(events[i].name == "token");
    CHECK(token["index"] == i);
    CHECK(token["id"] == expected[i].id);
    text += token["token_text"].get<std::string>();
    CHECK(token["text"] == text);
    REQUIRE(token["predictions"].size() == 6);  // 3 labels x 2 layers
    for (const Json& p : token["predictions"]) {
      const std::vector<int64_t>& layers = s.server().engine().layers();
      const std::vector<std::string>& labels = s.server().engine().labels();
      size_t l = static_cast<size_t>(std::find(layers.begin(), layers.end(), p["layer"].get<int64_t>()) - layers.begin());
      size_t k = static_cast<size_t>(std::find(labels.begin(), labels.end(), p["label"].get<std::string>()) - labels.begin());
      CHECK(p["confidence"].get<double>() == doctest::Approx(expected[i].probability[l][k]).epsilon(1e-9));
    }
  }
  CHECK(events[6].name == "done");
  CHECK(events[6].data["reason"] == "length");
  CHECK(events[6].data["tokens"] == 6);
  CHECK(events[6].data["text"] == text);
}

// /v1/generate's bounds (at most 8 new tokens, `max_tokens` prompt tokens) and its fields' checks.
void check_generate_bounds(RunningServer& s, int64_t max_tokens) {
  check_refused(s, "/v1/generate", R"({"prompt": "Once", "max_new_tokens": 9})", 413,
                {"asks for 9 tokens, more than this server's limit of 8 (--max-new-tokens)"}, "max_new_tokens");
  check_refused(s, "/v1/generate", Json({{"prompt", std::string(30, 'a') + " b c d e f g h i j k l m n o p q r s t u v"}}).dump(),
                413, {"(--max-tokens)"}, "prompt");
  // Regression: the prompt was counted without the BOS it is generated with, so one of exactly --max-tokens tokens ran
  // with one more.
  const tokenizer::Tokenizer& tokenizer = s.server().engine().tokenizer();
  auto tokens = [&](const std::string& text) { return static_cast<int64_t>(tokenizer.encode(text, false).size()); };
  std::string exact;
  for (const char* word : {" w", " the", " cat", " a"}) {
    for (exact = "Once"; tokens(exact) < max_tokens;) exact += word;
    if (tokens(exact) == max_tokens) break;
  }
  REQUIRE(tokens(exact) == max_tokens);
  check_refused(s, "/v1/generate", Json({{"prompt", exact}}).dump(), 413,
                {fmt::format("'prompt' is {} tokens long", max_tokens + 1).c_str()}, "prompt");
  check_refused(s, "/v1/generate", R"({"prompt": "Once", "temperature": -1})", 400, {"'temperature' must be a number from 0"},
                "temperature");
  check_refused(s, "/v1/generate", R"({"prompt": "Once", "layers": [4]})", 400, {"layer 4 has no probes loaded"}, "layers[0]");
}

}  // namespace

TEST_CASE("probe_server: /v1/generate streams tokens with their probe scores; its bounds; a client that hangs up frees its slot" * doctest::test_suite("numeric")) {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_new_tokens = 8;
  o.limits.max_streams = 1;
  o.limits.max_tokens = 20;
  RunningServer s(o);
  Json body = {{"prompt", "Once upon a time"}, {"max_new_tokens", 6}, {"stop", false}, {"top_k", 6}};
  std::string received;
  // A ranking sent while the stream runs is scored between two of its tokens, and disturbs neither.
  std::optional<httplib::Result> ranked;
  std::thread ranking;
  httplib::Result r = generate(s, body, [&](const char* data, size_t size, uint64_t, uint64_t) {
    received.append(data, size);
    if (!ranking.joinable()) ranking = std::thread([&] { ranked.emplace(post(s, "/v1/rank", R"({"texts": ["Day 3."]})")); });
    return true;
  });
  ranking.join();
  REQUIRE((ranked && *ranked));
  CHECK((*ranked)->status == 200);
  check_same_json(Json::parse((*ranked)->body), post_json(s, "/v1/rank", {{"texts", {"Day 3."}}}), "ranked during the stream");
  REQUIRE(r);
  REQUIRE_MESSAGE(r->status == 200, received);
  CHECK(r->get_header_value("Content-Type") == "text/event-stream");
  std::vector<ServerEvent> events = parse_events(received);
  REQUIRE(events.size() == 7);
  check_streamed_generation(s, events);

  check_generate_bounds(s, o.limits.max_tokens);
  {
    // While the worker is held, a stream stays open, waiting: the one slot is taken, and the client hangs up.
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    std::thread hanging_up([&] { generate(s, body, [](const char*, size_t, uint64_t, uint64_t) { return false; }); });
    while (s.server().open_streams() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    check_refused(s, "/v1/generate", body.dump(), 429, {"1 generation streams are open, this server's limit (--max-streams)"});
    hanging_up.join();
    // The server sees the hang-up when a write fails (it writes a comment every second), and ends the connection.
    for (int i = 0; i < 300 && s.server().open_connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(s.server().open_connections() == 0);
    // Its generation still waits for the worker, so it keeps the slot (regression: the slot was freed when the
    // connection ended, and streams whose clients hung up at once put any number of prompts on the device).
    check_refused(s, "/v1/generate", body.dump(), 429, {"(--max-streams)"});
    const int64_t joined = s.server().scheduler().stats().streams_joined;
    hold.reset();
    for (int i = 0; i < 300 && s.server().open_streams() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(s.server().open_streams() == 0);
    CHECK(s.server().scheduler().stats().streams_joined == joined);  // refused before its prompt ran
  }
  received.clear();
  r = generate(s, {{"prompt", "Once upon a time"}, {"max_new_tokens", 2}}, [&](const char* data, size_t size, uint64_t, uint64_t) {
    received.append(data, size);
    return true;
  });
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(parse_events(received).back().name == "done");
}
