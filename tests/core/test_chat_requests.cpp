// POST /v1/chat/completions' body on its own (the OpenAI fields, our extensions, each refusal naming its field) and
// the stop strings of a reply that arrives a piece at a time.
#include <doctest/doctest.h>

#include "server/api/chat_request.h"
#include "server/api/stop_text.h"
#include "test_util.h"

using namespace probekit;
using server::RequestError;

namespace {

void check_refusal(const std::string& body, int status, const std::string& field, const std::string& part) {
  server::Limits limits;
  limits.max_new_tokens = 100;
  try {
    server::parse_chat_query(body, limits);
    FAIL("accepted ", body, ", expected a refusal naming ", field);
  } catch (const RequestError& e) {
    CHECK_MESSAGE(e.status() == status, body);
    CHECK_MESSAGE(e.field() == field, body, " -> ", e.field());
    CHECK_CONTAINS(std::string(e.what()), part);
  }
}

}  // namespace

TEST_CASE("chat requests: OpenAI's fields, their defaults, and the probes and steering extensions") {
  server::Limits limits;
  limits.max_new_tokens = 100;
  server::ChatQuery q = server::parse_chat_query(R"({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]})", limits);
  CHECK(q.model == "gpt-4o");
  CHECK(q.messages.size() == 1);
  CHECK(q.max_tokens == 100);  // up to --max-new-tokens
  CHECK(q.temperature == 1);
  CHECK(!q.seed);
  CHECK(!q.stream);
  q = server::parse_chat_query(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
      "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "seed": 3, "stop": "\n\n", "stream": true,
      "stream_options": {"include_usage": true}, "n": 1, "user": "u", "probes": {"top_k": 2, "layers": [5]},
      "steer": [{"label": "reframing", "layer": 2, "coefficient": 4}]})", limits);
  CHECK(q.max_tokens == 7);
  CHECK(q.temperature == 0);
  CHECK(q.top_p == 0.5);
  CHECK(*q.seed == 3);
  CHECK(q.stop == std::vector<std::string>{"\n\n"});
  CHECK(q.stream);
  CHECK(q.include_usage);
  CHECK(q.probes.top_k == 2);
  CHECK(q.probes.layers == std::vector<int64_t>{5});
  CHECK(q.steering.steer.size() == 1);
  CHECK(server::parse_chat_query(R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 9, "stop": ["x", "y"]})", limits)
            .stop.size() == 2);
}

TEST_CASE("chat requests keep their tools' and messages' keys in the order sent, which a template's tojson prints") {
  // Regression: the body was read with sorted keys, so a template printing a tool or a call's arguments rendered a
  // prompt transformers and vLLM never render ({"function": ..., "type": ...}).
  const std::string messages =
      R"([{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"type":"function",)"
      R"("function":{"name":"get_weather","arguments":{"unit":"C","city":"Oslo"}}}]}])";
  const std::string tools = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
                            R"("properties":{"unit":{"type":"string"},"city":{"type":"string"}}}}}])";
  server::Limits limits;
  limits.max_new_tokens = 100;
  const server::ChatQuery q =
      server::parse_chat_query(R"({"tools": )" + tools + R"(, "messages": )" + messages + "}", limits);
  CHECK(q.messages.dump() == messages);
  CHECK(q.tools.dump() == tools);
  CHECK(server::parse_rank_query(R"({"messages": )" + messages + "}", limits).conversation.messages.dump() == messages);
  const server::PerTokenQuery per_token =
      server::parse_per_token_query(R"({"tools": )" + tools + R"(, "messages": )" + messages + "}", limits);
  CHECK(per_token.conversation.messages.dump() == messages);
  CHECK(per_token.conversation.tools.dump() == tools);
  // As OpenAI's clients send a tool round: an assistant turn with tool_calls and no content, and the tool's result
  // as an object (which Llama 3.1's template prints with tojson). Regression: both were refused with a 400.
  const std::string round =
      R"([{"role":"user","content":"Weather?"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function",)"
      R"("function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":{"temperature":21,"unit":"C"}}])";
  CHECK(server::parse_chat_query(R"({"messages": )" + round + "}", limits).messages.dump() == round);
  // The last of a repeated key wins, as in the sorted reading of the other fields.
  CHECK(server::parse_chat_query(R"({"messages": [{"role": "user", "content": "a"}], "messages": )" + messages + "}", limits)
            .messages.dump() == messages);
}

TEST_CASE("chat requests: each refusal names its field") {
  const std::string m = R"("messages": [{"role": "user", "content": "Hi"}])";
  check_refusal("{}", 400, "messages", "'messages' is missing");
  check_refusal(R"({"messages": []})", 400, "messages", "'messages' is empty");
  check_refusal(R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "'messages[0].content' is missing");
  check_refusal(R"({"messages": [{"content": "a"}]})", 400, "messages[0].role", "'messages[0].role'");
  check_refusal(R"({"messages": [{"role": "user", "content": "a", "n": 123456789012345678901234567890}]})", 400, "messages",
                "in 'messages', the integer 123456789012345678901234567890 does not fit in 64 bits");
  // Outside messages and tools, a field's own check speaks (regression: the integer was blamed on 'messages').
  check_refusal("{" + m + R"(, "seed": 123456789012345678901234567890})", 400, "seed", "'seed'");
  // Only an assistant's turn that calls tools may leave its content out.
  check_refusal(R"({"messages": [{"role": "user", "tool_calls": [{"type": "function"}]}]})", 400, "messages[0].content",
                "'messages[0].content' is missing");
  check_refusal(R"({"messages": [{"role": "assistant", "tool_calls": []}]})", 400, "messages[0].content",
                "'messages[0].content' is missing");
  // Parts the models cannot read are refused (regression: an image's part reached the template without a word).
  check_refusal(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})",
                400, "messages[0].content[1].type", "is \"image_url\": the models here read text only");
  check_refusal(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "refusal",
                 "refusal": "No."}]}]})", 400, "messages[1].content[0].type", "is \"refusal\"");
  check_refusal(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", 400, "messages[0].content[0].text",
                "'messages[0].content[0].text' must be a string");
  check_refusal("{" + m + R"(, "n": 2})", 400, "n", "'n' must be 1");
  check_refusal("{" + m + R"(, "max_tokens": 101})", 413, "max_tokens", "--max-new-tokens");
  check_refusal("{" + m + R"(, "max_completion_tokens": 0})", 400, "max_completion_tokens", "from 1");
  // Regressions: both names taken, the older one silently ignored; a whole number past 64 bits "not an integer".
  check_refusal("{" + m + R"(, "max_tokens": 5, "max_completion_tokens": 6})", 400, "max_tokens",
                "'max_tokens' (5) and 'max_completion_tokens' (6) differ");
  server::Limits limits;
  limits.max_new_tokens = 100;
  CHECK(server::parse_chat_query("{" + m + R"(, "max_tokens": 5, "max_completion_tokens": 5})", limits).max_tokens == 5);
  check_refusal("{" + m + R"(, "max_tokens": 100000000000000000000})", 400, "max_tokens", "must be from 1 to");
  check_refusal("{" + m + R"(, "max_tokens": 1.5})", 400, "max_tokens", "must be an integer");
  check_refusal("{" + m + R"(, "temperature": 3})", 400, "temperature", "from 0 to 2");
  check_refusal("{" + m + R"(, "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", "up to 4 strings");
  check_refusal("{" + m + R"(, "stop": [""]})", 400, "stop[0]", "a non-empty string");
  check_refusal("{" + m + R"(, "stream_options": {"include_usage": true}})", 400, "stream_options", "\"stream\": true");
  check_refusal("{" + m + R"(, "probes": {"top_k": 0}})", 400, "probes.top_k", "'probes.top_k' must be from 1");
  check_refusal("{" + m + R"(, "probes": {"colour": 1}})", 400, "probes.colour", "unknown field 'colour'");
  check_refusal("{" + m + R"(, "presence_penalty": 1})", 400, "presence_penalty", "not supported");
  check_refusal("{" + m + R"(, "functions": []})", 400, "functions", "unknown field 'functions'");
}

TEST_CASE("chat errors in OpenAI's shape") {
  Json body = server::openai_error_body(400, "'n' must be 1", "n");
  CHECK(body == Json::parse(R"({"error": {"message": "'n' must be 1", "type": "invalid_request_error", "param": "n", "code": null}})"));
  CHECK(server::openai_error_body(500, "x", "")["error"]["type"] == "server_error");
  CHECK(server::openai_error_body(500, "x", "")["error"]["param"].is_null());
  CHECK(server::openai_error_body(429, "x", "")["error"]["code"] == "rate_limit_exceeded");
}

TEST_CASE("stop strings: the reply ends before the first, text that may start one is held back until it cannot") {
  server::StopText stop({"END", "\n\n"});
  CHECK(stop.add("Hello E") == "Hello ");  // "E" may start "END"
  CHECK(stop.add("x") == "Ex");
  CHECK(stop.add(" \n") == " ");
  CHECK(stop.add("\nmore") == "");  // "\n\n": the reply ends before it
  CHECK(stop.stopped());
  CHECK(stop.add("after") == "");
  CHECK(stop.sent() == "Hello Ex ");
  server::StopText none({"END"});
  CHECK(none.add("the EN") == "the ");
  CHECK(none.flush() == "EN");  // no stop string came: the held text is the reply's
  CHECK(!none.stopped());
  CHECK(none.sent() == "the EN");
  server::StopText split({"END"});
  CHECK(split.add("aEN") == "a");
  CHECK(split.add("Dz") == "");
  CHECK(split.stopped());
}
