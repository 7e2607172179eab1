// The chat template sandbox: a template of each hostile kind (nesting past the parser's or the renderer's bound,
// work without end, text or lists that grow without end, values that nest or form cycles) ends with an error
// naming the bound and the template's line, never a crash or a hang; real templates use a small part of it.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "chat/chat_template.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit::chat;
using namespace probekit::testing;

namespace {

std::string repeated(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; i++) out += text;
  return out;
}

// The error a template's parse and render end with ("" when it renders).
std::string failure_of(const std::string& source, const ChatTemplateInputs& inputs = {}) {
  try {
    ChatTemplate(source).render(inputs);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "";
}

struct HostileCase {
  const char* name;
  std::string source;
  const char* expected;  // in the error
};

const std::string kSteps = "the render passed its budget of 20000000 steps";
const std::string kBytes = "the render passed its budget of 256 MiB of text and lists";
const std::string kParse = "nests expressions and blocks deeper than 256 levels";

}  // namespace

TEST_CASE("chat template sandbox: each hostile kind ends with an error naming the bound and the line") {
  const HostileCase cases[] = {
      {"parentheses", "{{ " + repeated("(", 5000) + "1" + repeated(")", 5000) + " }}", kParse.c_str()},
      {"not", "{{ " + repeated("not ", 5000) + "1 }}", kParse.c_str()},
      {"signs", "{{ " + repeated("-", 5000) + "1 }}", kParse.c_str()},
      {"conditional chain", "{{ " + repeated("1 if x else ", 3000) + "2 }}", kParse.c_str()},
      {"list literals", "{{ " + repeated("[", 5000) + repeated("]", 5000) + " }}", kParse.c_str()},
      {"blocks", repeated("{% if true %}", 5000) + "x" + repeated("{% endif %}", 5000), kParse.c_str()},
      {"a chain of operators", "{{ 1" + repeated(" + 1", 5000) + " }}", kParse.c_str()},
      {"a chain of filters", "{{ 'a'" + repeated(" | trim", 5000) + " }}", kParse.c_str()},
      {"a chain of attributes", "{{ x" + repeated(".a", 5000) + " }}", kParse.c_str()},
      {"a filter block's chain", "{% filter upper" + repeated(" | lower", 5000) + " %}x{% endfilter %}", kParse.c_str()},
      {"macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", "deeper than 500 levels"},
      {"call block recursion",
       "{% macro f() %}{% if caller is defined %}{% endif %}{% call f() %}{% endcall %}{% endmacro %}{{ f() }}",
       "deeper than 500 levels"},
      {"nested loops", "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", kSteps.c_str()},
      {"string repetition", "{{ 'a' * 1000000000000 }}", kBytes.c_str()},
      {"list repetition", "{{ [1, 2] * 10 ** 15 }}", kBytes.c_str()},
      {"repeating a list of a long text", "{% set s = 'x' * 1000000 %}{{ ([s] * 100000) | length }}", kBytes.c_str()},
      {"tojson of a shared dict's long key", "{% set d = {'k' * 1000000: 1} %}{{ ([d] * 1000) | tojson | length }}",
       kBytes.c_str()},
      {"splitting a long text", "{{ ('a ' * 100000000).split() | length }}", kBytes.c_str()},
      {"indexing a long text in a loop", "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}",
       kBytes.c_str()},
      {"unique over a long list", "{{ range(100000) | list | unique | length }}", kSteps.c_str()},
      {"doubling in a namespace",
       "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", kBytes.c_str()},
      {"doubling a list", "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
       kBytes.c_str()},
      {"tojson indent", "{{ [[1, 2], [3]] | tojson(indent=10 ** 12) }}", kBytes.c_str()},
      {"indent width", "{{ 'a\nb' | indent(10 ** 12) }}", kBytes.c_str()},
      {"replace", "{{ ('a' * 100000) | replace('', 'x' * 100000) }}", kBytes.c_str()},
      {"join separator", "{{ ([1] * 100000) | join('x' * 100000) }}", kBytes.c_str()},
      {"str.join", "{{ ('x' * 100000).join(['a'] * 100000) }}", kBytes.c_str()},
      {"str.center width", "{{ 'a'.center(10 ** 12, 'é') }}", kBytes.c_str()},
      {"str.center width whose bytes overflow 64 bits", "{{ 'a'.center(9223372036854775807, 'é') }}", kBytes.c_str()},
      {"str.zfill width", "{{ '1'.zfill(10 ** 12) }}", kBytes.c_str()},
      {"str.expandtabs tab size", "{{ ('\t' * 1000).expandtabs(10 ** 9) }}", kBytes.c_str()},
      {"rsplitting a long text", "{{ ('a ' * 100000000).rsplit() | length }}", kBytes.c_str()},
      {"splitlines of a long text", "{{ ('a\n' * 100000000).splitlines() | length }}", kBytes.c_str()},
      {"iterating a long string", "{% for c in 'a' * 100000000 %}{% endfor %}", kBytes.c_str()},
      {"printing a shared list", "{% set a = ['x' * 1000] * 1000 %}{% set b = [a] * 1000 %}{{ [b] * 1000 }}", kBytes.c_str()},
      {"comparing shared lists",
       "{% set a = [1] * 1000 %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}{% set d = [[[1] * 1000] * 1000] * 1000 %}"
       "{{ c == d }}",
       kSteps.c_str()},
      {"output in a loop", "{% for i in range(100000) %}{% for j in range(100) %}" + repeated("x", 1000) + "{% endfor %}{% endfor %}",
       kBytes.c_str()},
      {"a namespace in itself", "{% set ns = namespace() %}\n{% set ns.me = ns %}{{ ns }}",
       "a namespace cannot hold a namespace"},
      {"a namespace in a list in a namespace", "{% set ns = namespace() %}{% set ns.l = [1, [ns]] %}",
       "a namespace cannot hold a namespace"},
      {"nesting a list in a loop", "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}",
       "a value nests lists and dicts deeper than 256 levels"},
  };
  for (const HostileCase& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const std::string error = failure_of(c.source);
    CHECK(error.find(c.expected) != std::string::npos);
    CHECK(error.rfind("chat template line ", 0) == 0);
  }
  CHECK(failure_of("{% set ns = namespace() %}\n\n{% set ns.me = ns %}") ==
        "chat template line 3: a namespace cannot hold a namespace, or a list or dict holding one");
}

TEST_CASE("chat template sandbox: what stays within the bounds renders as jinja2 renders it") {
  // Powers by squaring: 1 ** 10 ** 18 is 1 at once (it was 10 ** 18 multiplications).
  CHECK(ChatTemplate("{{ 1 ** 10 ** 18 }} {{ (-1) ** (10 ** 18 + 1) }} {{ 2 ** 62 }} {{ 3 ** 39 }}").render({}) ==
        "1 -1 4611686018427387904 4052555153018976267");
  CHECK(failure_of("{{ 3 ** 40 }}") == "chat template line 1: integer overflow (the template's numbers are 64-bit here)");
  // int() of a float past 64 bits fails the same way (regression: it gave 0, the default, without a word); just
  // under the bound it is exact.
  CHECK(failure_of("{{ 9.3e18|int }}").rfind("chat template line 1: integer overflow (the template's numbers are 64-bit here)", 0) == 0);
  CHECK(ChatTemplate("{{ 9.21e18|int }} {{ -9.2e18|int }}").render({}) == "9210000000000000000 -9200000000000000000");
  CHECK(ChatTemplate("{{ 'ab' * -1 }}|{{ [1] * 0 }}|{{ 'ab' * 2 }}").render({}) == "|[]|abab");
  // Nesting just under the bounds parses and renders.
  CHECK(ChatTemplate("{{ " + repeated("(", 60) + "1" + repeated(")", 60) + " }}").render({}) == "1");
  CHECK(ChatTemplate(repeated("{% if true %}", 200) + "x" + repeated("{% endif %}", 200)).render({}) == "x");
  CHECK(ChatTemplate("{% macro f(n) %}{{ n if n == 0 else f(n - 1) }}{% endmacro %}{{ f(100) }}").render({}) == "0");
  // A namespace may hold lists and dicts; lists and dicts may hold namespaces.
  CHECK(ChatTemplate("{% set ns = namespace(l=[]) %}{% set ns.l = ns.l + [{'a': 1}] %}{{ ns.l }}{{ [namespace(x=1)] | length }}")
            .render({}) == "[{'a': 1}]1");
}

TEST_CASE("chat template sandbox: inputs nested past the bound are refused before the template sees them") {
  ChatTemplateInputs inputs;
  OrderedJson deep = "x";
  for (int i = 0; i < 300; i++) deep = OrderedJson::array({deep});
  inputs.messages = OrderedJson::array({{{"role", "user"}, {"content", "hi"}, {"extra", deep}}});
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ messages[0].content }}").render(inputs),
                       "chat template input nests lists and objects deeper than 256 levels", std::invalid_argument);
}

TEST_CASE("chat template sandbox: a render past its deadline stops, saying it ran out of time") {
  ChatTemplateInputs inputs;
  inputs.limits.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  try {
    ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").render(inputs);
    FAIL("the render did not stop");
  } catch (const RenderBudgetExceeded& e) {
    CHECK(e.timed_out());
    CHECK(std::string(e.what()).find("the render ran out of time after") != std::string::npos);
  }
  inputs.limits = {};
  inputs.limits.max_steps = 1000;
  try {
    ChatTemplate("{% for i in range(100000) %}{% endfor %}").render(inputs);
    FAIL("the render did not stop");
  } catch (const RenderBudgetExceeded& e) {
    CHECK_FALSE(e.timed_out());
    CHECK(std::string(e.what()) == "chat template line 1: the render passed its budget of 1000 steps (a loop or a recursion "
                                   "without end?)");
  }
}

TEST_CASE("chat template sandbox: a template that is not UTF-8 is refused, as transformers refuses it") {
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ 'caf\xe9' }}"),
                       "the chat template is not UTF-8 text (transformers refuses it too): re-save the template as UTF-8",
                       std::invalid_argument);
  TempDir dir;
  write_text(dir.file("chat_template.jinja"), "{{ messages }}\xc3(");
  CHECK_THROWS_WITH_AS(ChatTemplate::from_tokenizer_dir(dir.path()),
                       (dir.file("chat_template.jinja") + ": not UTF-8 text (transformers refuses such a template too)").c_str(),
                       std::invalid_argument);
}

namespace {

// A long conversation with tools: 200 turns of 2,000 characters, tool calls and their results, 5 tools.
ChatTemplateInputs long_conversation() {
  ChatTemplateInputs inputs;
  const std::string text = repeated("Zürich weather, 日本語, emoji 🤖 and plain words. ", 40);
  inputs.messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant. " + text}});
  for (int turn = 0; turn < 100; turn++) {
    inputs.messages.push_back({{"role", "user"}, {"content", text}});
    if (turn % 10 == 5) {
      OrderedJson call = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}};
      inputs.messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", OrderedJson::array({call})}});
      inputs.messages.push_back({{"role", "tool"}, {"content", "{\"temp\": 18}"}});
    }
    inputs.messages.push_back({{"role", "assistant"}, {"content", text}});
  }
  inputs.messages.push_back({{"role", "user"}, {"content", text}});
  inputs.tools = OrderedJson::array();
  for (int i = 0; i < 5; i++) {
    OrderedJson parameters = {{"type", "object"},
                              {"properties", {{"city", {{"type", "string"}, {"description", "City name"}}},
                                              {"unit", {{"type", "string"}, {"enum", {"C", "F"}}}}}},
                              {"required", {"city"}}};
    inputs.tools.push_back({{"type", "function"},
                            {"function", {{"name", "tool_" + std::to_string(i)}, {"description", "A tool"}, {"parameters", parameters}}}});
  }
  return inputs;
}

}  // namespace

TEST_CASE("chat template sandbox: the real templates use a small part of the budget") {
  const RenderLimits limits;
  for (const std::string model : {"gemma3", "qwen3", "llama3", "deepseek_v3"}) {
    CAPTURE(model);
    const std::string dir = std::string(PROBEKIT_TOKENIZER_CACHE) + "/" + model;
    REQUIRE_MESSAGE(probekit::is_regular_file(dir + "/tokenizer_config.json"), "run scripts/fetch_tokenizers.sh");
    ChatTemplateInputs inputs = long_conversation();
    const ChatTemplate chat_template = ChatTemplate::from_tokenizer_dir(dir);
    if (!chat_template.names("tools")) inputs.tools = nullptr;  // Gemma 3's and Llama 3's would refuse them
    if (model == "gemma3") {  // Gemma's template wants user and assistant turns to alternate
      OrderedJson alternating = OrderedJson::array();
      for (const OrderedJson& m : inputs.messages) {
        if ((m["role"] == "user" || m["role"] == "assistant") && !m.contains("tool_calls")) alternating.push_back(m);
      }
      inputs.messages = alternating;
    }
    RenderUsage usage;
    const std::string text = chat_template.render(inputs, &usage);
    MESSAGE(model, ": ", text.size(), " characters rendered in ", usage.steps, " steps, ", usage.bytes, " bytes, nesting ",
            usage.deepest);
    CHECK(usage.steps * 100 < limits.max_steps);
    CHECK(usage.bytes * 50 < limits.max_bytes);
    CHECK(usage.deepest * 10 < limits.max_depth);
  }
}
