// Chat templates in the tools: inspect_model chat-template prints the prompt exactly as jinja2 (set up as
// transformers sets it up) renders it, from a checkpoint or a folder of tokenizer files alone; multi_probe_inference
// --generate --chat and --messages generate after that prompt, tokenized without adding special tokens again; a
// model without a template is an error naming the files looked at.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "chat/conversation.h"
#include "common/json.h"
#include "core/chat_parity.h"
#include "probe_fixture.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const char* const kConversation = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
  {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Café, 日本語 🤖"}])";

// What inspect_model chat-template printed on stdout alone (its logs go elsewhere).
std::string rendered_by_tool(const TempDir& tmp, const std::string& dir, const std::string& messages, const std::string& flags = "") {
  CommandResult r = run_command(fmt::format("{{ {} chat-template --model {} --messages {} {} > {}; }}", tool("inspect_model"),
                                            dir, messages, flags, tmp.file("stdout.txt")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_text(tmp.file("stdout.txt"));
}

// jinja2's render of the template in `source` with the special tokens of `dir`.
std::string rendered_by_jinja2(const std::string& source, const std::string& dir, const OrderedJson& messages, bool prompt) {
  chat::ChatTemplate chat_template(source, chat::ChatTemplate::from_tokenizer_dir(dir).special_tokens());
  chat::ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.add_generation_prompt = prompt;
  std::vector<JinjaResult> results = render_with_jinja2(
      OrderedJson::array({OrderedJson{{"template", source}, {"variables", chat_template.variables(inputs)}}}));
  REQUIRE_MESSAGE(results[0].rendered, results[0].error);
  return results[0].output;
}

}  // namespace

TEST_CASE("inspect_model chat-template prints jinja2's render, nothing else, with or without the reply prompt") {
  TempDir tmp;
  write_text(tmp.file("messages.json"), kConversation);
  const std::string source = read_text(kGemmaModel + "/chat_template.jinja");
  const OrderedJson messages = OrderedJson::parse(kConversation);
  for (const bool prompt : {true, false}) {
    CAPTURE(prompt);
    std::string expected = rendered_by_jinja2(source, kGemmaModel, messages, prompt);
    std::string got = rendered_by_tool(tmp, kGemmaModel, tmp.file("messages.json"), prompt ? "" : "--no-generation-prompt");
    CHECK_MESSAGE(got == expected, describe_text_difference(expected, got));
    CHECK(got.rfind("<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n", 0) == 0);
    const std::string reply_prompt = "<start_of_turn>model\n";
    CHECK((got.size() > reply_prompt.size() && got.substr(got.size() - reply_prompt.size()) == reply_prompt) == prompt);
  }
  // An OpenAI request body works too (its "messages").
  write_text(tmp.file("body.json"), fmt::format(R"({{"model": "any", "messages": {}}})", kConversation));
  CHECK(rendered_by_tool(tmp, kGemmaModel, tmp.file("body.json")) == rendered_by_jinja2(source, kGemmaModel, messages, true));
}

TEST_CASE("inspect_model chat-template reads a folder holding only tokenizer_config.json (the real Gemma 3 and Qwen 3)") {
  TempDir tmp;
  write_text(tmp.file("messages.json"), kConversation);
  const OrderedJson messages = OrderedJson::parse(kConversation);
  for (const char* name : {"gemma3", "qwen3"}) {
    CAPTURE(name);
    const std::string config = fmt::format("{}/{}/tokenizer_config.json", PROBEKIT_TOKENIZER_CACHE, name);
    REQUIRE_MESSAGE(is_regular_file(config), config, " is missing: run bash scripts/fetch_tokenizers.sh");
    const std::string dir = tmp.file(name);
    make_directories(dir);
    write_text(dir + "/tokenizer_config.json", read_text(config));
    const std::string source = Json::parse(read_text(config))["chat_template"].get<std::string>();
    std::string expected = rendered_by_jinja2(source, dir, messages, true);
    std::string got = rendered_by_tool(tmp, dir, tmp.file("messages.json"));
    CHECK_MESSAGE(got == expected, describe_text_difference(expected, got));
  }
}

TEST_CASE("a model without a chat template, and bad messages, are errors naming the file") {
  TempDir tmp;
  write_text(tmp.file("messages.json"), kConversation);
  make_directories(tmp.file("bare"));
  write_text(tmp.file("bare/tokenizer_config.json"), R"({"bos_token": "<s>"})");
  CommandResult r = run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), tmp.file("bare"),
                                            tmp.file("messages.json")));
  check_failure(r, 1, {"no chat template in", "chat_template.jinja", "'chat_template' in", "tokenizer_config.json"});
  write_text(tmp.file("bad.json"), R"([{"role": "user", "content": "a"}, {"content": "b"}])");
  r = run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), kGemmaModel, tmp.file("bad.json")));
  check_failure(r, 1, {"bad.json", "'messages[1].role' must be a role's name"});
  // The template's own refusal (roles that do not alternate) comes with its message.
  write_text(tmp.file("twice.json"), R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  r = run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), kGemmaModel, tmp.file("twice.json")));
  check_failure(r, 1, {"Conversation roles must alternate user/assistant/user/assistant/..."});
  // Not a folder: a hub name would have downloaded the whole checkpoint for its template files.
  r = run_command(fmt::format("{} chat-template --model org/model --messages {}", tool("inspect_model"), tmp.file("messages.json")));
  check_failure(r, 1, {"--model org/model: no such folder (chat-template reads a local checkpoint or tokenizer folder)"});
  // The other subcommands' outputs: --output with --text, and a missing folder found before the model loads.
  r = run_command(fmt::format("{} tokenize --tokenizer {} --text hi --output {}", tool("inspect_model"), kGemmaModel, tmp.file("ids.json")));
  check_failure(r, 2, {"tokenize --output takes --input's id lists"});
  // A subcommand's empty value is refused as a tool's is, but for tokenize's --text, whose empty text has ids.
  // Regression: a required flag's advice was to leave it out, which is refused too.
  r = run_command(fmt::format("{} info --model ''", tool("inspect_model")));
  check_failure(r, 2, {"--model is empty: give a value"});
  CHECK_MESSAGE(r.output.find("leave the flag out") == std::string::npos, r.output);
  r = run_command(fmt::format("{} tokenize --tokenizer {} --text ''", tool("inspect_model"), kGemmaModel));
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  r = run_command(fmt::format("{} hidden --model {} --text hi --output {}", tool("inspect_model"), kGemmaModel, tmp.file("nowhere/h.safetensors")));
  check_failure(r, 1, {"the folder", "nowhere does not exist"});
  r = run_command(fmt::format("{} model --output {} --tokenizer {}/tokenizer.json --head-dim 3 -q", tool("make_example"),
                              tmp.file("odd"), kGemmaModel));
  check_failure(r, 2, {"--head-dim 3 must be even"});
  // Regression: another model's tokenizer was written with Gemma's special-token ids in config.json.
  r = run_command(fmt::format("{} model --output {} --tokenizer {}/tokenizer.json -q", tool("make_example"),
                              tmp.file("qwen_tokenizer"), kShardedModel));
  check_failure(r, 1, {"tokenizer.json: the tokenizer has no <bos>, <eos>, <pad>, <unk>", "give a Gemma tokenizer.json"});
  CHECK(!path_exists(tmp.file("qwen_tokenizer")));
  // The example model chats: it carries Gemma 3's template, the one transformers' Gemma 3 checkpoints carry.
  r = run_command(fmt::format("{} model --output {} --tokenizer {}/tokenizer.json --hidden-size 32 --layers 1 -q",
                              tool("make_example"), tmp.file("example"), kGemmaModel));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(read_text(tmp.file("example/chat_template.jinja")) == read_text(kGemmaModel + "/chat_template.jinja"));
  r = run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), tmp.file("example"),
                              tmp.file("messages.json")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output == run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), kGemmaModel,
                                            tmp.file("messages.json"))).output);
}

TEST_CASE("multi_probe_inference --generate --chat and --messages: the rendered prompt, without a second BOS") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp);
  write_text(tmp.file("one.json"), R"([{"role": "user", "content": "Reframe this for me."}])");
  const std::string base = fmt::format("{} --probes-dir {} --device cpu --generate --max-new-tokens 3 --json",
                                       tool("multi_probe_inference"), probes);
  CommandResult chat = run_command(base + " --chat --text 'Reframe this for me.'");
  REQUIRE_MESSAGE(chat.exit_code == 0, chat.output);
  CommandResult messages = run_command(base + " --messages " + tmp.file("one.json"));
  REQUIRE_MESSAGE(messages.exit_code == 0, messages.output);
  auto done_line = [](const std::string& output) {
    size_t at = output.find("{\"done\":true");
    REQUIRE_MESSAGE(at != std::string::npos, output);
    return Json::parse(output.substr(at, output.find('\n', at) - at));
  };
  Json from_chat = done_line(chat.output), from_messages = done_line(messages.output);
  const std::string prompt = chat::render_conversation(kGemmaModel, chat::user_message("Reframe this for me."));
  CHECK(from_chat["prompt"] == prompt);
  std::vector<int32_t> ids = tokenizer::Tokenizer::from_file(kGemmaModel).encode(prompt, false);
  CHECK(from_chat["prompt_ids"] == Json(ids));
  CHECK(ids[0] == 2);  // <bos>, written by the template once
  CHECK(ids[1] != 2);
  CHECK(from_messages["prompt_ids"] == from_chat["prompt_ids"]);
  CHECK(from_messages["generated_ids"] == from_chat["generated_ids"]);
  // --chat without --generate, --messages beside --text: usage errors (exit 2).
  check_failure(run_command(fmt::format("{} --probes-dir {} --chat --text a", tool("multi_probe_inference"), probes)), 2,
                {"--chat goes with --generate"});
  check_failure(run_command(base + " --messages " + tmp.file("one.json") + " --text a"), 2,
                {"--messages is the whole prompt: it excludes --text and --file"});
}

TEST_CASE("inspect_model chat-template: tools reach the template; a template past its sandbox's bounds fails naming them") {
  TempDir tmp;
  const std::string qwen = fmt::format("{}/qwen3", PROBEKIT_TOKENIZER_CACHE);
  REQUIRE_MESSAGE(is_regular_file(qwen + "/tokenizer_config.json"), "run bash scripts/fetch_tokenizers.sh");
  write_text(tmp.file("body.json"), R"({"messages": [{"role": "user", "content": "Weather in Oslo?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})");
  const std::string rendered = rendered_by_tool(tmp, qwen, tmp.file("body.json"));
  CHECK_CONTAINS(rendered, "<tools>");
  CHECK_CONTAINS(rendered, "\"name\": \"get_weather\"");
  write_text(tmp.file("bad_tools.json"), R"({"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "web"}]})");
  CommandResult r = run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), qwen,
                                            tmp.file("bad_tools.json")));
  check_failure(r, 1, {"bad_tools.json", "'tools[0].type' must be \"function\""});

  // A hostile template of each kind: nesting past the parser's bound, a macro without end, work without end, text
  // without end, a namespace holding itself.
  const std::pair<std::string, const char*> hostile[] = {
      {"{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "deeper than 256 levels"},
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", "chat template line 1: the render nests"},
      {"{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", "budget of 20000000 steps"},
      {"{{ 'a' * 10 ** 12 }}", "budget of 256 MiB"},
      {"{% set ns = namespace() %}{% set ns.me = ns %}", "a namespace cannot hold a namespace"},
  };
  write_text(tmp.file("messages.json"), kConversation);
  make_directories(tmp.file("hostile"));
  for (const auto& [source, expected] : hostile) {
    const std::string message = expected;  // named, not bound: clang's C++17 captures no structured binding (CAPTURE)
    CAPTURE(message);
    write_text(tmp.file("hostile/chat_template.jinja"), source);
    r = run_command(fmt::format("{} chat-template --model {} --messages {}", tool("inspect_model"), tmp.file("hostile"),
                                tmp.file("messages.json")));
    check_failure(r, 1, {"chat template line", expected});
  }
}
