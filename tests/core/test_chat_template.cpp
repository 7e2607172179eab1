// The chat template renderer (src/chat) feature by feature: each hand-written template has the text we expect,
// written out here, and jinja2 (set up as transformers sets it up) must render the same; errors name the line.
#include <doctest/doctest.h>

#include "chat/chat_template.h"
#include "chat_parity.h"

using namespace probekit::testing;

namespace {

struct FeatureCase {
  const char* name;
  const char* source;
  const char* variables;  // JSON object: the template's variables besides messages, tools, ...
  const char* expected;
};

const char* const kUsers = R"({"users": [{"name": "ann", "age": 41, "admin": true}, {"name": "bob", "age": 25},
                                         {"name": "cy", "age": 33, "admin": false}]})";

const FeatureCase kFeatureCases[] = {
    {"lstrip and trim blocks, + turns them off", "a  \n  {% if true %}  x\n  {% endif %}  \nb {%+ if true %}y{% endif +%}\nz", "{}",
     "a  \n  x\n  \nb y\nz"},
    {"- strips all whitespace on its side", "x  \n {{- 'y' -}} \n z|{% if true -%}\n\n  w  {%- endif %}|", "{}", "xyz|w|"},
    {"comments, with trim and lstrip", "a {# c #} b\n  {# line #}\nc{#- strip -#}  d", "{}", "a  b\ncd"},
    {"one trailing newline dropped, CRLF as LF", "a\r\nb\n\n", "{}", "a\nb\n"},
    {"raw", "{% raw %}{{ x }}{% if %}{% endraw %}|{%- raw -%}  y  {%- endraw -%}  |", "{}", "{{ x }}{% if %}|y|"},
    {"arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 10 / 4 }} {{ 1 + 2 * 3 }} {{ -2 ** 2 }} {{ 'ab' * 2 }} {{ 7.5 // 2 }}",
     "{}", "3 -4 -2 1024 2.5 7 4 abab 3.0"},
    {"floats print as Python's repr", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.0 }} {{ 1e-5 }} {{ 3.14159 }} {{ 1/3 }} {{ 123456789.0 * 10 }} {{ -0.0 }} {{ x }}",
     R"({"x": 2.5e-7})", "0.30000000000000004 1e+16 1.0 1e-05 3.14159 0.3333333333333333 1234567890.0 -0.0 2.5e-07"},
    {"containers print as Python's repr", R"({{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ ('a', 'b') }} {{ ["it's", 'q"', 'both\'"', 'tab\t', 'é😀'] }})",
     "{}", R"([1, 'a', None, True, 1.5] {'k': 'v', 'n': [1]} (1,) ('a', 'b') ["it's", 'q"', 'both\'"', 'tab\t', 'é😀'])"},
    {"comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'abc' }} {{ 2 not in [1, 3] }} {{ 1 == 1.0 }} {{ [1] == [1] }} {{ 'b' >= 'a' }} {{ 'k' in {'k': 1} }}",
     "{}", "True False True True True True True True"},
    {"and / or give an operand, not", "{{ '' or 'fallback' }} {{ 0 and 1 }} {{ not [] }} {{ not 'x' }} {{ none or 0 }}", "{}",
     "fallback 0 True False 0"},
    {"inline if with and without else", "{{ 'y' if x else 'n' }}|{{ 'y' if not x }}|{{ 'a' if false else 'b' if true else 'c' }}", R"({"x": 1})",
     "y||b"},
    {"~ joins text, None included, Undefined empty", "{{ 1 ~ 'a' ~ none ~ missing ~ true }}", "{}", "1aNoneTrue"},
    {"string escapes", R"({{ 'a\tb\u00e9\x41\\\'' }}{{ "q\"" }} {{ 'x' 'y' }})", "{}", "a\tbéA\\'q\" xy"},
    {"str methods", R"({{ '  hi  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'Hello'.startswith('He') }}|{{ 'x.py'.endswith(('.txt', '.py')) }}|{{ "they're bill's".title() }}|{{ 'ÉCOLE'.lower() }}|{{ 'abc'.replace('b', 'B') }}|{{ 'banana'.find('n') }}|{{ 'banana'.count('a') }}|{{ '-'.join(['a', 'b']) }}|{{ '\n\nx\n'.lstrip('\n') }}|{{ 'xxhixx'.rstrip('x') }}|{{ 'hello'.capitalize() }}|{{ 'é'.upper() }})",
     "{}", "hi|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|True|True|They'Re Bill'S|école|aBc|2|3|a-b|x\n|xxhi|Hello|É"},
    {"slicing", "{{ [1, 2, 3, 4][::-1] }} {{ 'héllo'[1:3] }} {{ [1, 2, 3, 4][-2:] }} {{ [1, 2, 3, 4, 5][::2] }} {{ 'abc'[-1] }} {{ [1, 2, 3][5:] }} {{ 'abcdef'[4:1:-1] }} {{ (1, 2, 3)[1:] }} {{ 'abc'[:-1] }}",
     "{}", "[4, 3, 2, 1] él [3, 4] [1, 3, 5] c [] edc (2, 3) ab"},
    {"dicts: keys by attribute or item, methods first", "{{ d.x }}|{{ d['items'] }}|{{ d.items()|list }}|{{ d.get('x') }}{{ d.get('nope', 'dflt') }}{{ d.get('nope') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.nope is defined }}|{{ msgs.0.content }}{{ msgs[-1]['content'] }}",
     R"({"d": {"x": 1, "items": "key"}, "msgs": [{"content": "first"}, {"content": "last"}]})",
     "1|key|[('x', 1), ('items', 'key')]|1dfltNone|['x', 'items']|[1, 'key']|False|firstlast"},
    {"loop variables",
     "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }}|{% endfor %}",
     "{}", "1032TrueFalse3bo|2121FalseFalse3ace|3210FalseTrue3bo|"},
    {"for else, loop filter", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{{ loop.last }}{% endfor %}|{% for x in [1] if false %}{% else %}none kept{% endfor %}",
     "{}", "empty|22False42True|none kept"},
    {"break and continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}|{{ range(3)|list }} {{ range(1, 10, 4)|list }} {{ range(3, 0, -1)|list }}",
     "{}", "0134|[0, 1, 2] [1, 5, 9] [3, 2, 1]"},
    {"unpacking in for and set", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'x': 1} %}{{ k }}{% endfor %}{% for (a, b) in [[1, 2]] %}{{ a + b }}{% endfor %}{% set p, q = 'pq' %}{{ q }}{{ p }}",
     "{}", "a=1;b=2;x3qp"},
    {"a loop's sets stay in its iteration", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}", "{}", "12,13,1"},
    {"namespace carries state out of loops",
     "{% set ns = namespace(total=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.found }} {{ ns }} {{ namespace({'a': 1}).a }}",
     "{}", "6 False <Namespace {'total': 6, 'found': False}> 1"},
    {"set block, with a filter", "{% set a = 1 %}{% set block %}  x {{ a }} {% endset %}[{{ block }}]{% set up | upper | replace('O', '0') %}shout{% endset %}{{ up }}", "{}",
     "[  x 1 ]SH0UT"},
    {"macros: defaults, keywords, varargs, kwargs",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}{% macro va(a, b=a * 2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %} {{ va(1) }} {{ va(1, 2, 3, k=4) }}",
     "{}", "Hi A! Hi B? Hi C. 12(){} 12(3,){'k': 4}"},
    {"call blocks and caller()",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}",
     "{}", "<b>bold</b>[1][2]"},
    {"filter and with blocks, generation", "{% filter upper %}abc{% endfilter %}|{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{{ a is defined }}|{% generation %}gen{% endgeneration %}", "{}",
     "ABC|1xFalse|gen"},
    {"text filters",
     R"({{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello WORLD'|capitalize }}|{{ 'hello world-foo(bar'|title }}|{{ 'abc'|upper }}|{{ 'ÀB'|lower }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'one two  three'|wordcount }}|{{ 42|string }}|{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}|{{ none|upper }})",
     "{}", "x|a|Hello world|Hello World-Foo(Bar|ABC|àb|bba|3|42|a\n  b\n\n  c|  a\n  b|a\n> \n> b|NONE"},
    {"sequence filters",
     "{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ [1, 2, 3]|sort(reverse=true) }}|{{ users|sort(attribute='age')|map(attribute='name')|join(',') }}|{{ [1, 2, 2, 'a', 'A']|unique|list }}|{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}|{{ []|first is defined }}|{{ [1, 2, 3]|length }}{{ 'héllo'|count }}{{ {'a': 1}|length }}|{{ [1, 2, 3]|sum }} {{ users|sum(attribute='age') }}|{{ [3, 1]|min }}{{ [3, 1]|max }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1, 'a': 2}|items|list }}|{{ 'abc'|reverse }}{{ [1, 2]|reverse|list }}|{{ 'ab'|list }}|{{ users|join(', ', attribute='name') }}",
     kUsers,
     "[1, 2, 3]|['A', 'b', 'c']|['A', 'b', 'c']|[3, 2, 1]|bob,cy,ann|[1, 2, 'a']|13|False|351|6 99|13|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|cba[2, 1]|['a', 'b']|ann, bob, cy"},
    {"select, reject, map",
     "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('even')|list }}|{{ [0, 1, '', none, 'x']|select|list }}|{{ users|selectattr('age', 'gt', 30)|map(attribute='name')|list }}|{{ users|rejectattr('admin')|map(attribute='name')|join }}|{{ [1, 2]|map('string')|join('-') }}|{{ users|map(attribute='admin', default='?')|list }}|{{ ['a', 'b']|map('upper')|list }}|{{ users|selectattr('admin', 'defined')|list|length }}",
     kUsers, "[1, 3]|[1, 3]|[1, 'x']|['ann', 'cy']|bobcy|1-2|[True, '?', False]|['A', 'B']|2"},
    {"default", "{{ missing|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ none|d('n', boolean=true) }}|{{ false|default('f') }}|{{ missing|d }}|", "{}",
     "d||d|n|False||"},
    {"numbers", "{{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ '3.5'|float }}|{{ 3|float }}|{{ -3|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(method='ceil') }}|{{ 5|round }}|{{ true|int }}|{{ ' 1_000 '|int }}|{{ -2.5|abs }}",
     "{}", "43|4|0|7|3.5|3.0|3|2.0|4.0|2.67|3.0|5|1|1000|2.5"},
    {"tojson as transformers' json.dumps",
     R"({{ data|tojson }}|{{ data|tojson(indent=2) }}|{{ 'é"<>&\n'|tojson }}|{{ [1.5, none, true, 1e20]|tojson }}|{{ data|tojson(sort_keys=true) }}|{{ data|tojson(separators=(',', ':')) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ {}|tojson }} {{ []|tojson(indent=2) }}|{{ (1, 2)|tojson }})",
     R"({"data": {"b": 1, "a": [1, {"x": "y"}], "c": "ü😀"}})",
     "{\"b\": 1, \"a\": [1, {\"x\": \"y\"}], \"c\": \"ü😀\"}|{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {\n      \"x\": \"y\"\n    }\n  ],\n  \"c\": \"ü😀\"\n}|"
     "\"é\\\"<>&\\n\"|[1.5, null, true, 1e+20]|{\"a\": [1, {\"x\": \"y\"}], \"b\": 1, \"c\": \"ü😀\"}|{\"b\":1,\"a\":[1,{\"x\":\"y\"}],\"c\":\"ü😀\"}|"
     "\"\\u00e9\\ud83d\\ude00\"|{} []|[1, 2]"},
    {"tests",
     "{{ x is defined }}{{ missing is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 1 is iterable }}|{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is in [1, 2] }}{{ 2 is eq 2 }}{{ 2 is ne 3 }}{{ 1 is lt 2 }}{{ 3 is gt 2 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ x is not none }}{{ missing is iterable }}{{ namespace() is mapping }}",
     R"({"x": 0})", "TrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueFalse|TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"Undefined prints as nothing and is false",
     "[{{ missing }}][{{ missing|length }}][{% for x in missing %}x{% endfor %}][{{ missing is defined }}][{{ d.nokey }}][{{ d.nokey is defined }}][{{ 'x' if missing else 'y' }}][{{ missing == none }}][{{ missing|string }}][{{ 'a' in missing }}][{{ [1].append }}]",
     R"({"d": {}})", "[][0][][False][][False][y][False][][False][]"},
    {"messages, tools and documents are always defined", "{{ messages|length }} {{ tools is none }} {{ documents is defined }} {{ add_generation_prompt }}", "{}", "0 True True True"},
};

ChatTemplateInputs inputs_with(const char* variables) {
  ChatTemplateInputs inputs;
  inputs.extra = OrderedJson::parse(variables);
  return inputs;
}

}  // namespace

TEST_CASE("chat template: each feature renders the text written here and jinja2's text") {
  OrderedJson cases = OrderedJson::array();
  std::vector<JinjaResult> ours;
  for (const FeatureCase& c : kFeatureCases) {
    ChatTemplate chat_template(c.source);
    ChatTemplateInputs inputs = inputs_with(c.variables);
    cases.push_back({{"template", c.source}, {"variables", chat_template.variables(inputs)}});
    ours.push_back(render_with_ours(chat_template, inputs));
    INFO(c.name);
    CHECK_MESSAGE(ours.back().rendered, ours.back().error);
    CHECK_MESSAGE(ours.back().output == c.expected, describe_text_difference(c.expected, ours.back().output));
  }
  std::vector<JinjaResult> jinja = render_with_jinja2(cases);
  size_t same = 0;
  for (size_t i = 0; i < jinja.size(); i++) same += check_same_as_jinja(kFeatureCases[i].name, ours[i], jinja[i]) ? 1 : 0;
  MESSAGE(same, "/", jinja.size(), " feature templates render as jinja2 renders them");
}
