// A chat template from anywhere (bytes after the first), parsed and rendered over a short conversation with tools
// (the first byte: the default bounds or tight ones, tools or none): it renders within the sandbox's bounds or
// is refused with a TemplateError naming the line (TemplateRaised for the template's own raise_exception). A
// crash, a stack overflow on deep nesting, an input past 10 s or 2 GB is a finding.
#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "fuzz_util.h"
#include "render_bounds.h"

using namespace probekit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t choice = data[0];
  const std::string source(reinterpret_cast<const char*>(data + 1), size - 1);
  chat::ChatTemplateInputs inputs;
  inputs.messages = chat::OrderedJson::parse(R"([{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Café 日本語 🤖"}, {"role": "assistant", "content": "Hi", "tool_calls":
    [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "content": "1"},
    {"role": "user", "content": [{"type": "text", "text": "again"}]}])");
  if ((choice & 1) != 0) {
    inputs.limits.max_steps = 100000;
    inputs.limits.max_bytes = 1 << 20;
    inputs.limits.max_depth = 100;
  }
  if ((choice & 2) != 0) {
    inputs.tools = chat::OrderedJson::parse(R"([{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}])");
  }
  inputs.add_generation_prompt = (choice & 4) != 0;
  chat::RenderUsage usage;
  std::string rendered;
  if (!fuzz::completes_or_refuses_cleanly([&] { rendered = chat::ChatTemplate(source).render(inputs, &usage); })) return 0;
  fuzz::check_render_within_bounds(rendered, usage, inputs.limits);
  return 0;
}
