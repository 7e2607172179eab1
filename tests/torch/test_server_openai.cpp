// probe_server as an OpenAI-compatible server, on loopback: /v1/chat/completions (a completion and a stream of the
// same request agree at temperature 0, the probes ride along, the usage is counted, stop strings, errors in
// OpenAI's shape, tools offered to the template, a hostile template failing only its own request), /v1/models;
// concurrent streams decoded in one batch, each giving what it gives alone; /metrics; a reply past its time limit
// holding its --max-streams slot while the worker still holds its generation.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "chat/conversation.h"
#include "server_runs.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const Json kMessages = Json::parse(R"([{"role": "system", "content": "Answer briefly."},
  {"role": "user", "content": "Instead of a setback, I saw a chance to learn. What do you see?"}])");

// A POST whose body arrives piece by piece (a stream): its status and all of its body.
std::pair<int, std::string> post_streamed(const RunningServer& s, const std::string& path, const Json& body) {
  std::string received;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    received.append(data, size);
    return true;
  };
  httplib::Result r = s.client().send(req);
  return {r ? r->status : -1, received};
}

std::string post_stream(const RunningServer& s, const std::string& path, const Json& body) {
  const std::pair<int, std::string> result = post_streamed(s, path, body);
  REQUIRE_MESSAGE(result.first == 200, result.second);
  return result.second;
}

// The "data: ..." payloads of an OpenAI stream, in order (comment lines left out).
std::vector<std::string> data_lines(const std::string& stream) {
  std::vector<std::string> data;
  size_t start = 0, end;
  while ((end = stream.find("\n\n", start)) != std::string::npos) {
    std::string block = stream.substr(start, end - start);
    start = end + 2;
    if (block.rfind(':', 0) == 0) continue;
    REQUIRE_MESSAGE(block.rfind("data: ", 0) == 0, block);
    data.push_back(block.substr(6));
  }
  return data;
}

// The events of a /v1/generate stream: each "token" event's data, then the "done" event's.
std::vector<Json> parse_generate_events(const std::string& stream) {
  std::vector<Json> events;
  for (ServerEvent& event : parse_events(stream)) {
    event.data["event"] = event.name;
    events.push_back(std::move(event.data));
  }
  return events;
}

std::vector<Json> generate_events(const RunningServer& s, const Json& body) {
  return parse_generate_events(post_stream(s, "/v1/generate", body));
}

// Waits until the server has closed every stream (a client has its last event before the server frees its slot).
void wait_for_streams_closed(RunningServer& s) {
  for (int i = 0; i < 1000 && s.server().open_streams() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(s.server().open_streams() == 0);
}

}  // namespace

TEST_CASE("probe_server /v1/chat/completions: a completion and a stream agree at temperature 0, with probes and usage") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  Json models = Json::parse(s.client().Get("/v1/models")->body);
  REQUIRE(models["data"].size() == 1);
  const std::string name = models["data"][0]["id"];
  CHECK(models["object"] == "list");
  CHECK(Json(name) == Json::parse(s.client().Get("/v1/info")->body)["model"]);

  Json request = {{"model", "whatever"}, {"messages", kMessages}, {"max_tokens", 6}, {"temperature", 0}};
  Json completion = post_json(s, "/v1/chat/completions", request);
  CHECK(completion["object"] == "chat.completion");
  CHECK(completion["model"] == name);
  const Json& choice = completion["choices"][0];
  CHECK(choice["message"]["role"] == "assistant");
  CHECK(choice["finish_reason"] == "length");
  const std::string prompt = chat::render_conversation(kGemmaModel, chat::OrderedJson::parse(kMessages.dump()));
  const auto prompt_tokens = tokenizer::Tokenizer::from_file(kGemmaModel).encode(prompt, false).size();
  CHECK(completion["usage"] == Json({{"prompt_tokens", prompt_tokens}, {"completion_tokens", 6}, {"total_tokens", prompt_tokens + 6}}));
  REQUIRE(completion["probes"].size() == 6);
  std::string joined;
  for (const Json& token : completion["probes"]) {
    joined += token["text"].get<std::string>();
    CHECK(token["predictions"].size() == 5);
  }
  CHECK(joined == choice["message"]["content"]);

  // The same request streamed: the same text, a chunk per token carrying the probes, the usage at the end.
  Json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  std::vector<std::string> data = data_lines(post_stream(s, "/v1/chat/completions", streamed));
  REQUIRE(data.size() == 1 + 6 + 1 + 1 + 1);  // role, tokens, finish, usage, [DONE]
  CHECK(data.back() == "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    Json chunk = Json::parse(data[i]);
    CHECK(chunk["object"] == "chat.completion.chunk");
    CHECK(chunk["model"] == name);
    CHECK(chunk["id"] == Json::parse(data[0])["id"]);
    if (i >= 1 && i <= 6) {
      CHECK(chunk["probes"] == completion["probes"][i - 1]["predictions"]);
      text += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  CHECK(Json::parse(data[0])["choices"][0]["delta"] == Json({{"role", "assistant"}, {"content", ""}}));
  CHECK(text == choice["message"]["content"]);
  CHECK(Json::parse(data[7])["choices"][0]["finish_reason"] == "length");
  CHECK(Json::parse(data[8])["choices"].empty());
  CHECK(Json::parse(data[8])["usage"] == completion["usage"]);

  // A stop string taken from the reply (its second character): the reply ends before it.
  const std::string content = choice["message"]["content"];
  auto next_character = [&](size_t at) {
    do ++at;
    while (at < content.size() && (static_cast<unsigned char>(content[at]) & 0xC0) == 0x80);
    return at;
  };
  const size_t second = next_character(0);
  REQUIRE_MESSAGE(second < content.size(), "the reply has one character: ", content);
  const std::string stop = content.substr(second, next_character(second) - second);
  Json stopped = request;
  stopped["stop"] = stop;
  Json reply = post_json(s, "/v1/chat/completions", stopped);
  CHECK(reply["choices"][0]["message"]["content"] == content.substr(0, content.find(stop)));
  CHECK(reply["choices"][0]["finish_reason"] == "stop");
  // A stop string the reply ends with the start of: held back, then part of the reply (regression: sent twice).
  size_t last_character = content.size() - 1;
  while (last_character > 0 && (static_cast<unsigned char>(content[last_character]) & 0xC0) == 0x80) --last_character;
  stopped["stop"] = content.substr(last_character) + "\x01\x02";
  reply = post_json(s, "/v1/chat/completions", stopped);
  CHECK(reply["choices"][0]["message"]["content"] == content);
  CHECK(reply["choices"][0]["finish_reason"] == "length");
}

namespace {

// A monitor that stops `reply` (a chat completion with every probe's score) at its first token k > 0 that follows a
// byte token whose text is held back (its piece empty): the first such k where some probe's score passes all of its
// scores before; nullopt when there is none. Returns the monitor and k.
std::optional<std::pair<Json, size_t>> stop_after_held_byte(const Json& reply) {
  const Json& tokens = reply["probes"];
  const std::regex byte_token("<0x[0-9A-F]{2}>");
  for (size_t k = 1; k < tokens.size(); ++k) {
    const Json& before = tokens[k - 1];
    if (!std::regex_match(before["token"].get<std::string>(), byte_token) || !before["text"].get<std::string>().empty()) {
      continue;
    }
    for (const Json& prediction : tokens[k]["predictions"]) {
      const double score = prediction["confidence"];
      bool highest = true;
      for (size_t i = 0; i < k; ++i) {
        for (const Json& earlier : tokens[i]["predictions"]) {
          if (earlier["label"] == prediction["label"] && earlier["layer"] == prediction["layer"]) {
            highest = highest && earlier["confidence"].get<double>() < score;
          }
        }
      }
      if (!highest) continue;
      return std::pair{Json{{"label", prediction["label"]}, {"layer", prediction["layer"]}, {"threshold", score},
                            {"aggregate", "max"}, {"action", "stop"}},
                       k};
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("probe_server /v1/chat/completions: a monitor's stop after a held-back byte token keeps that token's text") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(kGemmaModel);
  for (int seed = 0; seed < 200; ++seed) {
    Json request = {{"messages", kMessages}, {"max_tokens", 6}, {"temperature", 1}, {"seed", seed}, {"probes", {{"top_k", 32}}}};
    const std::optional<std::pair<Json, size_t>> found = stop_after_held_byte(post_json(s, "/v1/chat/completions", request));
    if (!found) continue;
    const auto& [monitor, k] = *found;
    request["monitors"] = Json::array({monitor});
    const Json reply = post_json(s, "/v1/chat/completions", request);
    REQUIRE(reply["choices"][0]["finish_reason"] == "content_filter");
    REQUIRE(reply["probes"].size() == k);
    std::vector<int32_t> ids;
    for (const Json& token : reply["probes"]) ids.push_back(*tokenizer.token_to_id(token["token"].get<std::string>()));
    const std::string expected = tokenizer.decode(ids);
    REQUIRE(!expected.empty());
    // Regression: the held-back bytes reached neither the reply nor the stream.
    CHECK(reply["choices"][0]["message"]["content"] == expected);
    request["stream"] = true;
    std::string streamed;
    for (const std::string& data : data_lines(post_stream(s, "/v1/chat/completions", request))) {
      if (data == "[DONE]") continue;
      const Json chunk = Json::parse(data);
      if (!chunk["choices"].empty()) streamed += chunk["choices"][0]["delta"].value("content", "");
    }
    CHECK(streamed == expected);
    return;
  }
  FAIL("no seed of 200 gave a reply with a byte token held back before a probe's new highest score");
}

TEST_CASE("probe_server /v1/chat/completions: errors in OpenAI's shape, naming the parameter") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  auto refused = [&](const Json& body, int status, const std::string& param, const std::string& part) {
    httplib::Result r = post(s, "/v1/chat/completions", body.dump());
    REQUIRE(r);
    CHECK_MESSAGE(r->status == status, r->body);
    Json error = Json::parse(r->body)["error"];
    CHECK_CONTAINS(error["message"].get<std::string>(), part);
    CHECK(error["type"] == "invalid_request_error");
    CHECK(error["param"] == (param.empty() ? Json() : Json(param)));
  };
  refused({{"messages", Json::array()}}, 400, "messages", "'messages' is empty");
  refused({{"messages", kMessages}, {"n", 2}}, 400, "n", "'n' must be 1");
  refused({{"messages", kMessages}, {"max_tokens", 100000}}, 413, "max_tokens", "--max-new-tokens");
  refused({{"messages", Json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])")}}, 400,
          "messages", "Conversation roles must alternate");
  // Regression: named "layers[0]", not where the request holds it.
  refused({{"messages", kMessages}, {"probes", {{"layers", {3}}}}}, 400, "probes.layers[0]",
          "'probes.layers[0]': layer 3 has no probes loaded");
  // GET /v1/models/{model} (regression: a 404 for the model served too).
  const std::string name = Json::parse(s.client().Get("/v1/models")->body)["data"][0]["id"];
  httplib::Result found = s.client().Get(("/v1/models/" + name).c_str());
  REQUIRE(found);
  CHECK(found->status == 200);
  CHECK(Json::parse(found->body)["id"] == name);
  CHECK(Json::parse(found->body)["object"] == "model");
  httplib::Result missing = s.client().Get("/v1/models/none");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(Json::parse(missing->body)["error"]["code"] == "not_found");
  CHECK_CONTAINS(missing->body, "the model 'none' does not exist");
  missing = s.client().Post("/v1/chat/completions/x", "{}", "application/json");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(s.client().Post("/v1/models", "{}", "application/json")->status == 405);
  // The OpenAI API's endpoints this server does not serve answer in its shape too (regression: in ours, which
  // OpenAI clients do not read); a path of ours answers in ours.
  for (const char* path : {"/v1/completions", "/v1/embeddings", "/v1/responses/r1/input_items"}) {
    CAPTURE(path);
    missing = s.client().Post(path, R"({"model": "m"})", "application/json");
    REQUIRE(missing);
    CHECK(missing->status == 404);
    const Json body = Json::parse(missing->body);
    CHECK(body["error"]["code"] == "not_found");
    CHECK_CONTAINS(body["error"]["message"].get<std::string>(), std::string("no endpoint POST ") + path);
  }
  for (const char* path : {"/v1/completionsx", "/v1/ranks"}) {
    CAPTURE(path);
    missing = s.client().Post(path, R"({})", "application/json");
    REQUIRE(missing);
    CHECK(missing->status == 404);
    CHECK(Json::parse(missing->body)["error"].is_string());
  }

  // A model without a chat template: the error names the files looked at.
  TempDir bare;
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    write_text(bare.file(file), read_text(kGemmaModel + "/" + file));
  }
  server::ServerOptions o = options_for(tmp.file("probes"));
  o.engine.model_dir = bare.path();
  o.engine.force = true;
  RunningServer plain(o);
  httplib::Result r = post(plain, "/v1/chat/completions", Json({{"messages", kMessages}}).dump());
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK_CONTAINS(r->body, "this model cannot chat");
  CHECK_CONTAINS(r->body, "chat_template.jinja");
}

TEST_CASE("probe_server: four streams started together decode in one batch, each giving the tokens it gives alone" * doctest::test_suite("numeric")) {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  // Different prompts and lengths (one leaves early), sampling with a seed, steering: each its own row.
  const std::vector<Json> bodies = {
      {{"prompt", "Once upon a time"}, {"max_new_tokens", 8}, {"stop", false}},
      {{"prompt", kReframingText}, {"max_new_tokens", 3}, {"stop", false}},
      {{"prompt", "The weather today"}, {"max_new_tokens", 8}, {"temperature", 0.9}, {"seed", 7}, {"stop", false}},
      {{"prompt", "Suddenly I noticed"}, {"max_new_tokens", 6}, {"stop", false},
       {"steer", {{{"label", "reframing"}, {"layer", 2}, {"coefficient", 6}}}}},
  };
  std::vector<std::vector<Json>> alone;
  for (const Json& body : bodies) alone.push_back(generate_events(s, body));
  wait_for_streams_closed(s);
  const server::SchedulerStats before = s.server().scheduler().stats();
  std::vector<std::pair<int, std::string>> together(bodies.size());
  {
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    std::vector<std::thread> clients;
    for (size_t i = 0; i < bodies.size(); ++i) {
      clients.emplace_back([&, i] { together[i] = post_streamed(s, "/v1/generate", bodies[i]); });
    }
    while (s.server().scheduler().queue_depth() < static_cast<int64_t>(bodies.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    hold.reset();
    for (std::thread& client : clients) client.join();
  }
  const server::SchedulerStats after = s.server().scheduler().stats();
  CHECK(after.largest_batch == 4);
  CHECK(after.streams_joined - before.streams_joined == 4);
  CHECK(after.decode_steps - before.decode_steps == 8);  // the longest stream's tokens: the others rode along
  for (size_t i = 0; i < bodies.size(); ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(together[i].first == 200, together[i].second);
    std::vector<Json> events = parse_generate_events(together[i].second);
    REQUIRE(events.size() == alone[i].size());
    // Every field the same, the probes' scores to the bit: in fp32 on the CPU each row's products and attention are
    // one fixed function of its own values (device::row_stable_linear, model::fixed_order_attention), whatever the
    // batch, its padding, the cache's visible length and OpenBLAS's kernel (.ci/run runs this under a second one).
    for (size_t t = 0; t < events.size(); ++t) CHECK(events[t] == alone[i][t]);
  }
  CHECK(alone[1].back()["tokens"] == 3);
  CHECK(alone[3].back()["steered"] == true);
}

// 16 clients started together reached an idle worker over a few milliseconds, and the first one's prompt ran alone.
TEST_CASE("probe_server: streams arriving at an idle worker within --join-window of each other join in one pass") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.join_window_ms = 400;  // far above the clients' spacing below, whatever this machine's load
  RunningServer s(o);
  const server::SchedulerStats before = s.server().scheduler().stats();
  std::vector<std::pair<int, std::string>> answers(3);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    clients.emplace_back([&, i] {
      answers[i] = post_streamed(s, "/v1/generate", {{"prompt", "Once upon a time"}, {"max_new_tokens", 2}, {"stop", false}});
    });
  }
  for (std::thread& client : clients) client.join();
  for (const auto& answer : answers) CHECK_MESSAGE(answer.first == 200, answer.second);
  const server::SchedulerStats after = s.server().scheduler().stats();
  CHECK(after.streams_joined - before.streams_joined == 3);
  CHECK(after.joins - before.joins == 1);
  CHECK(after.largest_batch == 3);
}

// Steps are pipelined (the next launched before this one's tokens are handed out): a stream joining while another
// has a step in flight starts at the next launch, and both give what they give alone.
TEST_CASE("probe_server: a stream that joins while another decodes gives what it gives alone, and so does the other" * doctest::test_suite("numeric")) {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  const Json first = {{"prompt", "Once upon a time"}, {"max_new_tokens", 40}, {"stop", false}};
  const Json second = {{"prompt", "The weather today"}, {"max_new_tokens", 5}, {"temperature", 0.9}, {"seed", 3}, {"stop", false}};
  const std::vector<Json> first_alone = generate_events(s, first), second_alone = generate_events(s, second);
  wait_for_streams_closed(s);
  const server::SchedulerStats before = s.server().scheduler().stats();
  std::pair<int, std::string> first_together;
  std::thread client([&] { first_together = post_streamed(s, "/v1/generate", first); });
  for (int i = 0; i < 10000 && s.server().scheduler().stats().decode_steps < before.decode_steps + 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::vector<Json> second_together = generate_events(s, second);
  client.join();
  CHECK(s.server().scheduler().stats().largest_batch == 2);
  REQUIRE_MESSAGE(first_together.first == 200, first_together.second);
  // Bitwise, as above: the fixed-order products and attention make a row independent of the rows beside it.
  CHECK(parse_generate_events(first_together.second) == first_alone);
  CHECK(second_together == second_alone);
}

namespace {

// The samples of a Prometheus text exposition: "name{labels}" -> value; every line checked against the format.
std::map<std::string, double> parse_exposition(const std::string& text) {
  static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_]+="[^"]*"(,[a-zA-Z_]+="[^"]*")*\})?) (\S+))");
  static const std::regex comment(R"(# (HELP|TYPE) probekit_[a-z_]+ .+)");
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, comment)) continue;
    REQUIRE_MESSAGE(std::regex_match(line, m, sample), "not a sample: ", line);
    CHECK(m[1].str().rfind("probekit_", 0) == 0);
    samples[m[1]] = std::stod(m[4]);
  }
  return samples;
}

// The Gemma fixture's checkpoint and tokenizer in `model`, with `chat_template` as its chat_template.jinja.
void write_model_with_template(const TempDir& model, const std::string& chat_template) {
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    write_text(model.file(file), read_text(kGemmaModel + "/" + file));
  }
  write_text(model.file("chat_template.jinja"), chat_template);
}

}  // namespace

TEST_CASE("probe_server GET /metrics: requests by endpoint and status, streams, batch sizes, tokens, latencies") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  post_json(s, "/v1/rank", {{"texts", {kReframingText}}});
  post(s, "/v1/rank", "{}");
  post_json(s, "/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 4}, {"temperature", 0}});
  generate_events(s, {{"prompt", "Once upon a time"}, {"max_new_tokens", 3}, {"stop", false}});
  wait_for_streams_closed(s);
  // The server counts a stream's answer once it has written it, after the client has read it all.
  const std::string generated = R"(probekit_requests_total{endpoint="/v1/generate",status="200"})";
  std::map<std::string, double> m;
  for (int i = 0; i < 500 && m[generated] == 0; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    httplib::Result r = s.client().Get("/metrics");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK_CONTAINS(r->get_header_value("Content-Type"), "text/plain; version=0.0.4");
    m = parse_exposition(r->body);
  }
  CHECK(m[R"(probekit_requests_total{endpoint="/v1/rank",status="200"})"] == 1);
  CHECK(m[R"(probekit_requests_total{endpoint="/v1/rank",status="400"})"] == 1);
  CHECK(m[R"(probekit_requests_total{endpoint="/v1/chat/completions",status="200"})"] == 1);
  CHECK(m[R"(probekit_requests_total{endpoint="/v1/generate",status="200"})"] == 1);
  CHECK(m["probekit_tokens_generated_total"] == 7);
  CHECK(m["probekit_open_streams"] == 0);
  CHECK(m["probekit_queue_depth"] == 0);
  CHECK(m["probekit_decode_steps_total"] == 7);
  CHECK(m[R"(probekit_batch_size_bucket{le="1"})"] == 7);
  CHECK(m[R"(probekit_batch_size_bucket{le="+Inf"})"] == m["probekit_batch_size_count"]);
  CHECK(m["probekit_time_to_first_token_seconds_count"] == 2);
  CHECK(m["probekit_time_per_token_seconds_count"] == 5);
  CHECK(m["probekit_time_to_first_token_seconds_sum"] > 0);
  double previous = 0;
  for (const char* le : {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"}) {
    double count = m[fmt::format("probekit_time_to_first_token_seconds_bucket{{le=\"{}\"}}", le)];
    CHECK(count >= previous);  // cumulative
    previous = count;
  }
  CHECK(previous == 2);
}

TEST_CASE("probe_server /v1/chat/completions: a hostile chat template fails its own request only; tools reach the template") {
  TempDir tmp;
  const std::string probes = train_probes(tmp);
  TempDir model;
  write_model_with_template(
      model,
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{% set content = messages[-1].content %}"
      "{% if content == 'recurse' %}{{ f(0) }}"
      "{% elif content == 'loop' %}{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}"
      "{% elif content == 'grow' %}{{ content * 10 ** 12 }}"
      "{% elif content == 'cycle' %}{% set ns = namespace() %}{% set ns.me = ns %}"
      "{% else %}{{ bos_token }}<start_of_turn>user\n{% if tools %}{{ tools | tojson }}\n{% endif %}{{ content }}"
      "<end_of_turn>\n<start_of_turn>model\n{% endif %}");
  server::ServerOptions o = options_for(probes);
  o.engine.model_dir = model.path();
  o.engine.force = true;
  RunningServer s(o);
  struct Answer {
    int status;
    Json body;
  };
  auto ask = [&](const std::string& content, const Json& extra = Json::object()) {
    Json body = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 2}, {"temperature", 0}};
    body.update(extra);
    httplib::Result r = post(s, "/v1/chat/completions", body.dump());
    REQUIRE(r);
    return Answer{r->status, Json::parse(r->body)};
  };
  const Answer reply = ask("recurse");
  CHECK(reply.status == 400);
  CHECK(reply.body["error"]["param"] == "messages");
  CHECK_CONTAINS(reply.body["error"]["message"].get<std::string>(), "deeper than 500 levels");
  for (const char* kind : {"grow", "cycle"}) {
    const Answer refused = ask(kind);
    CHECK(refused.status == 400);
    CHECK_CONTAINS(refused.body["error"]["message"].get<std::string>(),
                   std::string(kind) == "grow" ? "budget of 256 MiB" : "a namespace cannot hold a namespace");
  }
  // While a render works through its budget, the server answers others.
  int loop_status = 0;
  std::string loop_body;
  std::thread looping([&] {
    const Json body = {{"messages", {{{"role", "user"}, {"content", "loop"}}}}};
    if (httplib::Result r = post(s, "/v1/chat/completions", body.dump())) {
      loop_status = r->status;
      loop_body = r->body;
    }
  });
  httplib::Result health = s.client().Get("/healthz");
  looping.join();
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(loop_status == 400);
  CHECK_CONTAINS(loop_body, "budget of 20000000 steps");

  // Tools are rendered into the prompt (the template prints them); a malformed one is refused naming its field.
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  const Answer plain = ask("Hello");
  const Answer with_tools = ask("Hello", {{"tools", tools}, {"tool_choice", "auto"}});
  REQUIRE(plain.status == 200);
  REQUIRE(with_tools.status == 200);
  CHECK(with_tools.body["usage"]["prompt_tokens"].get<int>() > plain.body["usage"]["prompt_tokens"].get<int>() + 5);
  const Answer bad = ask("Hello", {{"tools", Json::parse(R"([{"type": "function", "function": {}}])")}});
  CHECK(bad.status == 400);
  CHECK(bad.body["error"]["param"] == "tools[0].function.name");
  const Answer choice = ask("Hello", {{"tools", tools}, {"tool_choice", "required"}});
  CHECK(choice.status == 400);
  CHECK(choice.body["error"]["param"] == "tool_choice");
}

TEST_CASE("probe_server /v1/chat/completions: a template past the parser's bound cannot chat; a render past its time is a 408") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  TempDir model;
  o.engine.model_dir = model.path();
  o.engine.force = true;
  // A template nested past the parser's bound: the model cannot chat, and says why; the server serves the rest.
  write_model_with_template(model, "{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}");
  {
    RunningServer unparsed(o);
    httplib::Result r = post(unparsed, "/v1/chat/completions", Json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}).dump());
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK_CONTAINS(r->body, "this model cannot chat");
    CHECK_CONTAINS(r->body, "deeper than 256 levels");
    CHECK_CONTAINS(r->body, "/chat_template.jinja: ");  // regression: the file was not named
    httplib::Result alive = unparsed.client().Get("/healthz");
    REQUIRE(alive);
    CHECK(alive->status == 200);
  }
  // Out of time: a 408 naming --request-timeout.
  write_model_with_template(model, "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}");
  o.limits.request_timeout_s = 0.01;
  RunningServer hurried(o);
  httplib::Result r = post(hurried, "/v1/chat/completions", Json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}).dump());
  REQUIRE(r);
  CHECK(r->status == 408);
  CHECK_CONTAINS(r->body, "did not finish rendering these messages within the request's time (--request-timeout)");
}

TEST_CASE("probe_server: a chat completion the server's shutdown cuts short is an error, not a finish by length") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_new_tokens = 100000;
  RunningServer s(o);
  const std::string body = endless_chat_body();
  int status = 0;
  std::string answer;
  std::thread client([&] {
    httplib::Result result = post(s, "/v1/chat/completions", body);
    if (result) status = result->status, answer = result->body;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  s.server().stop();
  client.join();
  // Regression: the reply cut short by the shutdown came back as a normal one, finish_reason "length".
  CHECK(status == 503);
  const Json error = Json::parse(answer);
  REQUIRE(error["error"].is_object());
  CHECK_CONTAINS(error["error"]["message"].get<std::string>(), "the server is shutting down");
}

TEST_CASE("probe_server: a chat completion past its time limit keeps its --max-streams slot until the worker lets it go") {
  TempDir tmp;
  server::ServerOptions o = options_for(train_probes(tmp));
  o.limits.max_streams = 1;
  o.limits.request_timeout_s = 0.3;
  RunningServer s(o);
  const std::string body =
      Json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}, {"temperature", 0}}).dump();
  {
    // While the worker is held, the reply waits for it until its time is up.
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    httplib::Result late = post(s, "/v1/chat/completions", body);
    REQUIRE(late);
    CHECK(late->status == 408);
    // Its generation is still queued: the slot stays taken, so a client retrying at once is refused rather than put
    // on the device beside it.
    CHECK(s.server().open_streams() == 1);
    httplib::Result again = post(s, "/v1/chat/completions", body);
    REQUIRE(again);
    CHECK(again->status == 429);
    CHECK(Json::parse(again->body)["error"]["code"] == "rate_limit_exceeded");
  }
  // The worker drops the expired reply, and its slot goes with it.
  wait_for_streams_closed(s);
  httplib::Result r = post(s, "/v1/chat/completions", body);
  REQUIRE(r);
  CHECK_MESSAGE(r->status == 200, r->body);
}
