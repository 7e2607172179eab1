#!/usr/bin/env python3
"""Renders chat templates with jinja2 set up the way transformers' apply_chat_template sets it up, for the parity
tests of src/chat (tests/core/test_chat_template*.cpp).

Usage: render_chat_template.py CASES_JSON

CASES_JSON holds a list of {"template": str, "variables": {...}}. Prints a JSON list with, for each case,
{"output": rendered text} or {"error": "ExceptionType: message"}.

The environment is written from transformers' chat_template_utils.py (_compile_jinja_template): an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension and a
{% generation %} tag, a tojson filter that calls json.dumps (ensure_ascii=False by default, no HTML escaping),
and the globals raise_exception and strftime_now.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body (it also tracks where the
    assistant's tokens are, which rendering alone does not need)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case):
    try:
        return {"output": env.from_string(case["template"]).render(**case["variables"])}
    except Exception as e:  # every failure is a result the C++ side compares
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    json.dump([render(env, case) for case in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
