// chat_template_bench: how long rendering real chat templates takes, over a long conversation with tools, and what
// share of the sandbox's bounds it uses (the bounds must cost nothing measurable: compare builds before and after).
//
//   chat_template_bench --template .cache/tokenizers/qwen3 --template gpt-oss.jinja --turns 200 --repeats 50
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "chat/chat_template.h"
#include "cli/cli.h"
#include "common/files.h"

using namespace probekit;
using chat::ChatTemplate;
using chat::ChatTemplateInputs;
using chat::OrderedJson;

namespace {

// `turns` user and assistant turns of about 2,000 characters, a tool call every tenth turn, and five tools.
ChatTemplateInputs conversation(int turns, bool with_tools) {
  ChatTemplateInputs inputs;
  std::string text;
  for (int i = 0; i < 40; i++) text += "Zürich weather, 日本語, emoji 🤖 and plain words. ";
  inputs.messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int turn = 0; turn < turns; turn++) {
    inputs.messages.push_back({{"role", "user"}, {"content", text}});
    if (with_tools && turn % 10 == 5) {
      OrderedJson call = {{"type", "function"}, {"function", {{"name", "tool_0"}, {"arguments", {{"city", "Paris"}}}}}};
      inputs.messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", OrderedJson::array({call})}});
      inputs.messages.push_back({{"role", "tool"}, {"content", "{\"temp\": 18}"}});
    }
    inputs.messages.push_back({{"role", "assistant"}, {"content", text}});
  }
  if (!with_tools) return inputs;
  inputs.tools = OrderedJson::array();
  for (int i = 0; i < 5; i++) {
    OrderedJson parameters = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}};
    inputs.tools.push_back({{"type", "function"},
                            {"function", {{"name", fmt::format("tool_{}", i)}, {"description", "A tool"}, {"parameters", parameters}}}});
  }
  return inputs;
}

// A tokenizer directory's template, or a .jinja file's.
ChatTemplate load(const std::string& path) {
  if (is_directory(path)) return ChatTemplate::from_tokenizer_dir(path);
  return ChatTemplate(read_file(path));
}

// The median time of `repeats` renders, in milliseconds; the template's turn-alternation rules may refuse tool
// turns, in which case the conversation goes without them.
void time_template(const std::string& path, int turns, int repeats) {
  ChatTemplate chat_template = load(path);
  ChatTemplateInputs inputs = conversation(turns, true);
  chat::RenderUsage usage;
  size_t characters = 0;
  try {
    characters = chat_template.render(inputs, &usage).size();
  } catch (const std::invalid_argument&) {
    inputs = conversation(turns, false);
    characters = chat_template.render(inputs, &usage).size();
  }
  std::vector<double> milliseconds;
  for (int i = 0; i < repeats; i++) {
    auto start = std::chrono::steady_clock::now();
    chat_template.render(inputs);
    milliseconds.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(milliseconds.begin(), milliseconds.end());
  const chat::RenderLimits limits;
  fmt::print("{}: {} characters{}, median {:.3f} ms, min {:.3f} ms over {} renders; {} steps ({:.2f}% of the bound), {} bytes "
             "({:.2f}%), nesting {} ({:.1f}%)\n",
             path, characters, inputs.tools.is_null() ? " (without tools)" : "", milliseconds[milliseconds.size() / 2],
             milliseconds.front(), repeats, usage.steps, 100.0 * usage.steps / limits.max_steps, usage.bytes,
             100.0 * usage.bytes / limits.max_bytes, usage.deepest, 100.0 * usage.deepest / limits.max_depth);
}

}  // namespace

int main(int argc, char** argv) {
  ToolCommandLine tool("Times chat template renders over a long conversation with tools");
  std::vector<std::string> templates;
  int turns = 200;
  int repeats = 50;
  tool.app.add_option("--template", templates, "A tokenizer directory or a .jinja file (repeatable)")->required();
  tool.app.add_option("--turns", turns, "User and assistant turns")->capture_default_str()->check(CLI::Range(1, 100000));
  tool.app.add_option("--repeats", repeats, "Renders timed per template")->capture_default_str()->check(CLI::Range(1, 100000));
  return tool.run(argc, argv, [&] {
    for (const std::string& path : templates) time_template(path, turns, repeats);
  });
}
