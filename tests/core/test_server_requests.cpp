// probe_server's request parser on its own: defaults, every field read with its type and range, the field named
// in each refusal, and the bounds with their status and flag (the HTTP tests in tests/torch/test_server.cpp
// check the same through a real server).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "server/api/requests.h"
#include "test_util.h"

using namespace probekit;
using server::RequestError;

namespace {

// The refusal `parse` throws: its status, field and a part of its message.
template <typename Parse>
void check_refusal(Parse&& parse, int status, const std::string& field, const std::string& part) {
  try {
    parse();
    FAIL("accepted, expected a refusal naming ", field);
  } catch (const RequestError& e) {
    CHECK(e.status() == status);
    CHECK(e.field() == field);
    CHECK_CONTAINS(std::string(e.what()), part);
  }
}

}  // namespace

TEST_CASE("server requests: defaults, and every field read") {
  server::Limits limits;
  server::RankQuery rank = server::parse_rank_query(R"({"texts": ["one", "two"]})", limits);
  CHECK(rank.texts == std::vector<std::string>{"one", "two"});
  CHECK(rank.view.top_k == 5);
  CHECK(rank.view.threshold == 0.1);
  CHECK(rank.view.layers.empty());
  CHECK(rank.view.mode == "all");
  rank = server::parse_rank_query(R"({"texts": ["x"], "top_k": 2, "threshold": 0, "calibrated": true, "layers": [3, 1],
                                      "mode": "by-layer", "aggregate": "mean", "top_k": 3})",
                                  limits);
  CHECK(rank.view.top_k == 3);  // a repeated key: the last one, as JSON parsers keep it
  CHECK(rank.view.threshold == 0);
  CHECK(rank.view.calibrated);
  CHECK(rank.view.layers == std::vector<int64_t>{3, 1});
  CHECK(rank.view.aggregate == "mean");
  server::GenerateQuery generate = server::parse_generate_query(R"({"prompt": "Once", "top_p": 0.5, "seed": 9, "stop": false})", limits);
  CHECK(generate.max_new_tokens == 64);
  CHECK(generate.top_p == 0.5);
  CHECK(generate.seed == 9);
  CHECK_FALSE(generate.stop);
  CHECK(server::parse_per_token_query(R"({"text": "a b", "layers": [2]})", limits).text == "a b");
}

TEST_CASE("server requests: refusals name the field, bounds name their flag") {
  server::Limits limits;
  limits.max_texts = 2;
  limits.max_new_tokens = 10;
  auto rank = [&](const std::string& body) { return [&limits, body] { server::parse_rank_query(body, limits); }; };
  check_refusal(rank("{"), 400, "", "the request body: invalid JSON at column");
  check_refusal(rank("1e400"), 400, "", "invalid JSON");
  check_refusal(rank(R"({"texts": ["a"], "top_k": 18446744073709551615})"), 400, "top_k", "'top_k' must be from 1 to");
  check_refusal(rank(R"({"texts": ["a"], "top_k": -1})"), 400, "top_k", "'top_k' must be from 1 to");
  check_refusal(rank(R"({"texts": ["a"], "threshold": "high"})"), 400, "threshold", "'threshold' must be a number, got \"high\"");
  check_refusal(rank(R"({"texts": ["a"], "layers": []})"), 400, "layers", "'layers' is empty");
  check_refusal(rank(R"({"texts": ["a"], "layers": [1.5]})"), 400, "layers[0]", "'layers[0]' must be a layer number");
  check_refusal(rank(R"({"texts": ["a"], "aggregate": "sum"})"), 400, "aggregate", "must be one of max, mean");
  check_refusal(rank(R"({"texts": ["a", "b", "c"]})"), 413, "texts", "limit of 2 per request (--max-texts)");
  check_refusal(rank(R"({"texts": ["a"], "text": "b"})"), 400, "text", "unknown field 'text' (this request takes");
  auto generate = [&](const std::string& body) { return [&limits, body] { server::parse_generate_query(body, limits); }; };
  check_refusal(generate(R"({"prompt": "a", "max_new_tokens": 11})"), 413, "max_new_tokens",
                "asks for 11 tokens, more than this server's limit of 10 (--max-new-tokens)");
  check_refusal(generate(R"({"prompt": "a", "max_new_tokens": 0})"), 400, "max_new_tokens", "must be from 1");
  check_refusal(generate(R"({"prompt": "a", "top_p": 2})"), 400, "top_p", "'top_p' must be a number from 0 to 1");
  check_refusal(generate(R"({"prompt": ""})"), 400, "prompt", "'prompt' is empty");
  // A long value is cut short in the message.
  std::string long_value(500, 'x');
  try {
    server::parse_rank_query(R"({"texts": ["a"], "mode": ")" + long_value + "\"}", limits);
    FAIL("accepted an unknown mode");
  } catch (const RequestError& e) {
    CHECK(std::string(e.what()).size() < 200);
  }
}

TEST_CASE("server requests: nesting past the depth bound is refused before parsing; values are shown cut short") {
  server::Limits limits;
  auto rank = [&](const std::string& body) { return [&limits, body] { server::parse_rank_query(body, limits); }; };
  const std::string limit_named = fmt::format("more than {} levels deep", server::kMaxJsonDepth);
  // Regression: 100,000 levels, as the whole body or inside a field, overflowed the stack when the message printed
  // the value; every endpoint parses through the same entry point.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  check_refusal(rank(deep), 400, "", limit_named);
  check_refusal(rank(R"({"texts": )" + deep + "}"), 400, "", limit_named);
  check_refusal(rank(R"({"texts": ["a"], "layers": )" + std::string(100000, '{')), 400, "", limit_named);
  check_refusal([&] { server::parse_generate_query(R"({"prompt": )" + deep + "}", limits); }, 400, "", limit_named);
  check_refusal([&] { server::parse_per_token_query(R"({"text": )" + deep + "}", limits); }, 400, "", limit_named);
  // At the bound the body parses and is refused for what it holds; brackets inside strings do not count.
  const int inner = server::kMaxJsonDepth - 2;  // the body's object and 'texts' take two levels
  std::string at_bound = R"({"texts": [)" + std::string(static_cast<size_t>(inner), '[') +
                         std::string(static_cast<size_t>(inner), ']') + "]}";
  check_refusal(rank(at_bound), 400, "texts[0]", "'texts[0]' must be a string, got [[[[");
  CHECK(server::parse_rank_query(R"({"texts": [")" + std::string(1000, '[') + "\"]}", limits).texts.size() == 1);
  CHECK(server::parse_rank_query(R"({"texts": ["\"[[[[\\"]})", limits).texts.front() == "\"[[[[\\");
  // A message shows at most a few dozen characters of any value, wide, deep or long.
  std::string wide = "[";
  for (int i = 0; i < 100000; ++i) wide += "1, ";
  for (int i = 0; i < 1000; ++i) wide += "[\"" + std::string(1000, 'y') + "\"], ";
  wide += "{\"" + std::string(100000, 'k') + "\": 2}";
  for (const std::string& value : {wide + "]", std::string(R"(")") + std::string(1000000, 'z') + "\""}) {
    try {
      server::parse_rank_query(R"({"texts": ["a"], "mode": )" + value + "}", limits);
      FAIL("accepted a mode that is not a name");
    } catch (const RequestError& e) {
      CHECK(std::string(e.what()).size() < 200);
    }
  }
  // A parser's message quotes the token it stopped at: cut short too.
  try {
    server::parse_rank_query(R"({"texts": [")" + std::string(1000000, 'w') + "\x01\"]}", limits);
    FAIL("accepted a control character in a string");
  } catch (const RequestError& e) {
    CHECK(std::string(e.what()).size() <= 300);
    CHECK_CONTAINS(std::string(e.what()), "invalid JSON");
  }
}

TEST_CASE("server requests: /v1/rank and /v1/per-token take a conversation's tools with its messages, and only then") {
  server::Limits limits;
  const std::string messages = R"([{"role": "user", "content": "Weather in Oslo?"}])";
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather"}}])";
  const server::RankQuery rank =
      server::parse_rank_query(R"({"messages": )" + messages + R"(, "tools": )" + tools + "}", limits);
  CHECK(rank.texts.empty());
  CHECK(rank.conversation.messages == OrderedJson::parse(messages));
  CHECK(rank.conversation.tools == OrderedJson::parse(tools));
  CHECK(server::parse_rank_query(R"({"messages": )" + messages + "}", limits).conversation.tools.is_null());
  // Regression: both endpoints answered "unknown field 'tools'"; given without messages, nothing would render them.
  auto rank_body = [&](const std::string& body) { return [&limits, body] { server::parse_rank_query(body, limits); }; };
  auto per_token_body = [&](const std::string& body) {
    return [&limits, body] { server::parse_per_token_query(body, limits); };
  };
  check_refusal(rank_body(R"({"texts": ["a"], "tools": )" + tools + "}"), 400, "tools", "'tools' need 'messages'");
  check_refusal(per_token_body(R"({"text": "a", "tools": )" + tools + "}"), 400, "tools",
                "and 'text' is scored as written");
  check_refusal(per_token_body(R"({"messages": )" + messages + R"(, "tools": [{"type": "web"}]})"), 400,
                "tools[0].type", "'tools[0].type' must be \"function\"");
  check_refusal(rank_body(R"({"messages": )" + messages + R"(, "tools": {"name": "f"}})"), 400, "tools",
                "'tools' must be a list of functions");
}
