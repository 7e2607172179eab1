// The parity check of src/chat against Python's jinja2: cases rendered in one run of
// tests/python/render_chat_template.py (jinja2 set up as transformers sets it up), compared character by
// character with our render.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/template_error.h"
#include "common/json.h"
#include "test_util.h"

namespace probekit::testing {

// The chat types every parity test renders with.
using chat::ChatTemplate;
using chat::ChatTemplateInputs;
using chat::OrderedJson;

/// What jinja2 made of a case: the text, or the error as "ExceptionType: message".
struct JinjaResult {
  bool rendered = false;
  std::string output;
  std::string error;
};

/// A Python with jinja2: python3 from PATH, else Debian's own (a pyenv or venv on PATH may lack it).
inline std::string jinja_python() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (run_command(std::string(python) + " -c 'import jinja2'").exit_code == 0) return python;
  }
  FAIL("no python3 with jinja2: apt-get install python3-jinja2 (scripts/setup.sh installs it)");
  return "";
}

/// Renders each {"template", "variables"} case with jinja2, all in one Python run.
inline std::vector<JinjaResult> render_with_jinja2(const OrderedJson& cases) {
  TempDir dir;
  write_text(dir.file("cases.json"), cases.dump());
  std::string script = std::string(PROBEKIT_FIXTURES) + "/../python/render_chat_template.py";
  CommandResult run = run_command(fmt::format("{} {} {} > {}", jinja_python(), script, dir.file("cases.json"), dir.file("out.json")));
  REQUIRE_MESSAGE(run.exit_code == 0, run.output);
  OrderedJson results = OrderedJson::parse(read_text(dir.file("out.json")));
  REQUIRE(results.size() == cases.size());
  std::vector<JinjaResult> out;
  for (const OrderedJson& result : results) {
    JinjaResult r;
    r.rendered = result.contains("output");
    (r.rendered ? r.output : r.error) = result.at(r.rendered ? "output" : "error").get<std::string>();
    out.push_back(std::move(r));
  }
  return out;
}

/// "first difference at character 12 (line 2): expected "a", got "b"", with both texts as JSON strings.
inline std::string describe_text_difference(const std::string& expected, const std::string& actual) {
  size_t byte = 0;
  while (byte < expected.size() && byte < actual.size() && expected[byte] == actual[byte]) byte++;
  while (byte > 0 && (static_cast<unsigned char>(expected[byte < expected.size() ? byte : byte - 1]) & 0xC0) == 0x80) byte--;
  size_t character = 0, line = 1;
  for (size_t i = 0; i < byte; i++) {
    character += (static_cast<unsigned char>(expected[i]) & 0xC0) != 0x80 ? 1 : 0;
    line += expected[i] == '\n' ? 1 : 0;
  }
  auto at = [&](const std::string& text) { return byte < text.size() ? dump_json(Json(text.substr(byte, 12))) : std::string("the end"); };
  return fmt::format("first difference at character {} (line {}): expected {}, got {}\n  expected {}\n  actual   {}", character,
                     line, at(expected), at(actual), dump_json(Json(expected)), dump_json(Json(actual)));
}

/// Our render of `source` with `variables`, or the error as jinja2's script reports it.
inline JinjaResult render_with_ours(const chat::ChatTemplate& chat_template, const chat::ChatTemplateInputs& inputs) {
  JinjaResult r;
  try {
    r.output = chat_template.render(inputs);
    r.rendered = true;
  } catch (const chat::TemplateRaised& e) {
    r.error = std::string("TemplateError: ") + e.what();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

/// Checks our result against jinja2's: the same text, or both failing; raise_exception's message must match.
inline bool check_same_as_jinja(const std::string& name, const JinjaResult& ours, const JinjaResult& jinja) {
  INFO(name);
  if (jinja.rendered) {
    CHECK_MESSAGE(ours.rendered, "jinja2 rendered ", dump_json(Json(jinja.output)), ", we failed: ", ours.error);
    if (!ours.rendered) return false;
    CHECK_MESSAGE(ours.output == jinja.output, describe_text_difference(jinja.output, ours.output));
    return ours.output == jinja.output;
  }
  CHECK_MESSAGE(!ours.rendered, "jinja2 failed with ", jinja.error, ", we rendered ", dump_json(Json(ours.output)));
  if (jinja.error.rfind("TemplateError: ", 0) == 0) CHECK(ours.error == jinja.error);
  return !ours.rendered;
}

}  // namespace probekit::testing
