// The chat template renderer's errors (syntax errors and render errors name the template's line,
// raise_exception gives the template's message unchanged, jinja2 fails on the same templates), and finding a
// checkpoint's template and special tokens.
#include <doctest/doctest.h>

#include "chat/chat_template.h"
#include "chat/template_error.h"
#include "chat_parity.h"
#include "test_util.h"

using probekit::chat::TemplateError;
using probekit::chat::TemplateRaised;
using namespace probekit::testing;
using probekit::Json;
using probekit::dump_json;

namespace {

struct ErrorCase {
  const char* source;
  const char* expected_message;  // all of our message
  bool refused_here = false;     // jinja2 renders it; this renderer refuses the feature
};

const ErrorCase kErrorCases[] = {
    {"line 1\n{% foo %}", "chat template line 2: Encountered unknown tag 'foo'."},
    {"{% for x in y %}\n{% foo %}{% endfor %}",
     "chat template line 2: Encountered unknown tag 'foo'. Jinja was looking for the following tags: 'endfor' or 'else'. "
     "The innermost block that needs to be closed is 'for'."},
    {"a\n{% if true %}\nb\n",
     "chat template line 3: Unexpected end of template. Jinja was looking for the following tags: 'elif' or 'else' or "
     "'endif'. The innermost block that needs to be closed is 'if'."},
    {"{% if %}", "chat template line 1: Expected an expression, got 'end of statement block'"},
    {"\n\n{{ x | nope }}", "chat template line 3: No filter named 'nope'."},
    {"{{ x is nope }}", "chat template line 1: No test named 'nope'."},
    {"{{ '%s' | format('a') }}", "chat template line 1: the 'format' filter is not supported in chat templates", true},
    {"{% include 'other' %}", "chat template line 1: the 'include' tag is not supported in chat templates"},
    {"{{ 1 +\n }", "chat template line 2: unexpected '}'"},
    {"{{ x", "chat template line 1: unexpected end of template, expected 'end of print statement'."},
    {"{# never closed", "chat template line 1: missing end of comment tag"},
    {"{% break %}", "chat template line 1: 'break' outside loop"},
    {"{% for x in y recursive %}{% endfor %}", "chat template line 1: recursive loops are not supported", true},
    {"line 1\n\n{{ 1 + 'a' }}", "chat template line 3: unsupported operand type(s) for +: 'int' and 'str'"},
    {"{{ 'a' + 1 }}", "chat template line 1: can only concatenate str (not \"int\") to str"},
    {"\n{{ missing.attr }}", "chat template line 2: 'missing' is undefined"},
    {"{% set d = {} %}\n{{ d.nokey.deeper }}", "chat template line 2: 'dict object' has no attribute 'nokey'"},
    {"{% for m in [1] %}\n  {{ missing + 1 }}\n{% endfor %}", "chat template line 2: 'missing' is undefined"},
    {"{{ [1].append(2) }}", "chat template line 1: access to attribute 'append' of 'list' object is unsafe."},
    {"{{ 'x' < 1 }}", "chat template line 1: '<' not supported between instances of 'str' and 'int'"},
    {"{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", "chat template line 1: macro 'f' takes not more than 1 argument(s)"},
    {"{{ 1 // 0 }}", "chat template line 1: integer division or modulo by zero"},
    {"{% set x = 1 %}{% set x.a = 2 %}", "chat template line 1: Cannot assign attribute on non-namespace object"},
    {"{{ cycler(1) }}", "chat template line 1: 'cycler' is not supported in chat templates", true},
    {"{% for a, b in [1] %}{% endfor %}", "chat template line 1: cannot unpack non-iterable int object"},
};

}  // namespace

TEST_CASE("chat template: errors name the line, and jinja2 fails on the same templates") {
  OrderedJson cases = OrderedJson::array();
  std::vector<JinjaResult> ours;
  for (const ErrorCase& c : kErrorCases) {
    JinjaResult r;
    try {
      ChatTemplate chat_template(c.source);
      r = render_with_ours(chat_template, ChatTemplateInputs{});
    } catch (const TemplateError& e) {
      r.error = e.what();
    }
    INFO("template: ", dump_json(Json(c.source)));
    CHECK_MESSAGE(!r.rendered, "rendered ", dump_json(Json(r.output)));
    CHECK(r.error == c.expected_message);
    ours.push_back(r);
    cases.push_back({{"template", c.source}, {"variables", OrderedJson::object()}});
  }
  std::vector<JinjaResult> jinja = render_with_jinja2(cases);
  for (size_t i = 0; i < jinja.size(); i++) {
    if (kErrorCases[i].refused_here) {
      CHECK_MESSAGE(jinja[i].rendered, kErrorCases[i].source, ": jinja2 failed with ", jinja[i].error);
    } else {
      check_same_as_jinja(kErrorCases[i].source, ours[i], jinja[i]);
    }
  }
}

TEST_CASE("chat template: raise_exception throws the template's message unchanged, as jinja2's TemplateError") {
  const std::string source = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with the user, got ' ~ messages[0].role) }}{% endif %}ok";
  ChatTemplate chat_template(source);
  ChatTemplateInputs inputs;
  inputs.messages = OrderedJson::parse(R"([{"role": "assistant", "content": "hi"}])");
  CHECK_THROWS_WITH_AS(chat_template.render(inputs), "Conversation must start with the user, got assistant", TemplateRaised);
  OrderedJson cases = OrderedJson::array({{{"template", source}, {"variables", chat_template.variables(inputs)}}});
  check_same_as_jinja("raise_exception", render_with_ours(chat_template, inputs), render_with_jinja2(cases)[0]);
}

TEST_CASE("chat template: tools offered to a template that never reads them are refused, not dropped") {
  ChatTemplateInputs inputs;
  inputs.messages = OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
  inputs.tools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  // Regression: rendered as if the conversation offered none, as transformers does.
  for (const char* source : {"{% for m in messages %}{{ m.content }}{% endfor %}", "{{ my_tools }}{{ tools_list }}"}) {
    CAPTURE(source);
    CHECK_THROWS_WITH_AS(ChatTemplate(source).render(inputs),
                         doctest::Contains("this chat template never reads 'tools'"), TemplateError);
  }
  CHECK(ChatTemplate("{% if tools %}{{ tools | length }}{% endif %}").render(inputs) == "1");
  CHECK(ChatTemplate("{{ (tools|length) }}").render(inputs) == "1");
  inputs.tools = OrderedJson::array();  // none offered
  CHECK(ChatTemplate("{{ messages[0].content }}").render(inputs) == "hi");
}

TEST_CASE("chat template: strftime_now formats the local time as Python's datetime.now().strftime") {
  ChatTemplate chat_template("{{ strftime_now('%Y') }}|{{ strftime_now('%d %B') | length > 3 }}");
  OrderedJson cases = OrderedJson::array({{{"template", chat_template.source()}, {"variables", chat_template.variables({})}}});
  check_same_as_jinja("strftime_now", render_with_ours(chat_template, {}), render_with_jinja2(cases)[0]);
}

TEST_CASE("chat template: found in chat_template.jinja, then tokenizer_config.json, by name in a list") {
  TempDir dir;
  write_text(dir.file("tokenizer_config.json"), R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>", "unk_token": null, "boi_token": "<img>",
    "additional_special_tokens": ["<a>", {"content": "<b>"}],
    "extra_special_tokens": {"image_token": "<image>"},
    "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}"},
                      {"name": "tool_use", "template": "T{{ additional_special_tokens }}{{ image_token }}{{ boi_token is defined }}"}]})");
  CHECK(ChatTemplate::from_tokenizer_dir(dir.path()).render({}) == "D<s></s>False");
  CHECK(ChatTemplate::from_tokenizer_dir(dir.path(), "tool_use").render({}) == "T['<a>', '<b>']<image>False");
  CHECK_THROWS_WITH_AS(ChatTemplate::from_tokenizer_dir(dir.path(), "rag"),
                       (dir.file("tokenizer_config.json") + ": no chat template named \"rag\" (it has \"default\", \"tool_use\")").c_str(),
                       std::invalid_argument);
  write_text(dir.file("chat_template.jinja"), "J{{ eos_token }}\n");
  CHECK(ChatTemplate::from_tokenizer_dir(dir.path()).render({}) == "J</s>");
  ChatTemplateInputs inputs;
  inputs.special_tokens["eos_token"] = "<end>";
  CHECK(ChatTemplate::from_tokenizer_dir(dir.path()).render(inputs) == "J<end>");
}

TEST_CASE("chat template: a directory without one names the files looked at") {
  TempDir dir;
  write_text(dir.file("tokenizer_config.json"), R"({"eos_token": "</s>"})");
  CHECK_THROWS_WITH_AS(ChatTemplate::from_tokenizer_dir(dir.path()),
                       ("no chat template in " + dir.path() + ": looked at " + dir.file("chat_template.jinja") +
                        ", 'chat_template' in " + dir.file("tokenizer_config.json")).c_str(),
                       std::invalid_argument);
}
