// A checkpoint's chat template, rendered as transformers' apply_chat_template renders it: jinja2's sandbox
// with trim_blocks and lstrip_blocks, loop controls, transformers' tojson, raise_exception and strftime_now,
// and the variables messages, tools, documents, add_generation_prompt, the tokenizer's special tokens
// (bos_token, eos_token, ...) and any extra ones (enable_thinking, ...).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "chat/render_budget.h"
#include "chat/value.h"

namespace probekit::chat {

/// How ChatTemplate::check_tools' refusal starts, for callers that name the field it is about.
inline constexpr const char* kToolsNeverRead = "this chat template never reads 'tools'";

struct TemplateAst;

/// What a template is rendered with. JSON objects keep their key order (a tool schema printed by tojson
/// lists its keys as given); a probekit::Json converts into these fields.
struct ChatTemplateInputs {
  OrderedJson messages = OrderedJson::array();
  /// Unlike transformers' default (False): probekit renders prompts for the model to answer.
  bool add_generation_prompt = true;
  /// null: no tools; the template sees None, as transformers passes it.
  OrderedJson tools;
  /// null: no documents (None in the template).
  OrderedJson documents;
  /// More variables (enable_thinking, ...); they win over the special tokens, as transformers' kwargs do.
  OrderedJson extra = OrderedJson::object();
  /// Special tokens that replace the tokenizer's (or add to them).
  std::map<std::string, std::string> special_tokens;
  /// The sandbox's bounds (steps, bytes, nesting, a deadline): past one, render throws RenderBudgetExceeded.
  RenderLimits limits;
};

/// What one render used of its limits.
struct RenderUsage {
  int64_t steps = 0;
  int64_t bytes = 0;
  int deepest = 0;
};

class ChatTemplate {
 public:
  /// Parses `source`; `special_tokens` (a JSON object of strings and lists of strings) are the variables the
  /// tokenizer contributes. Text that is not UTF-8 is refused, as transformers refuses it; syntax errors and
  /// nesting deeper than kMaxTemplateNesting throw TemplateError naming the line.
  explicit ChatTemplate(const std::string& source, OrderedJson special_tokens = OrderedJson::object());

  /// The chat template of a tokenizer directory: chat_template.jinja, else tokenizer_config.json's
  /// "chat_template" (a string, or a list of {"name", "template"} where "default" is used unless `name` picks
  /// another; a named one may also be additional_chat_templates/<name>.jinja), with its special tokens.
  /// No template fails naming the files looked at.
  static ChatTemplate from_tokenizer_dir(const std::string& dir, const std::string& name = "");

  /// The template's text.
  const std::string& source() const { return source_; }
  /// The SHA-256 of the template's text, as readout recipes record which template rendered a conversation.
  std::string source_sha256() const;
  /// Whether the template's text holds `word` as a name of its own (not inside a longer name): whether it can read
  /// a variable or a role of that name.
  bool names(const std::string& word) const;
  /// The special tokens the template sees unless the inputs replace them.
  const OrderedJson& special_tokens() const { return special_tokens_; }

  /// Every variable the template is rendered with, as one JSON object: what transformers passes to jinja2.
  OrderedJson variables(const ChatTemplateInputs& inputs) const;

  /// Throws TemplateError (its message starting with kToolsNeverRead) for tools offered to a template whose text
  /// never names `tools`: transformers would drop them silently.
  void check_tools(const OrderedJson& tools) const;

  /// The rendered conversation. A template error throws TemplateError naming the line (RenderBudgetExceeded when
  /// it passed a bound of inputs.limits); the template's own raise_exception(message) throws TemplateRaised with
  /// the message unchanged. `usage`, when given, receives what the render used. Tools go through check_tools first.
  std::string render(const ChatTemplateInputs& inputs, RenderUsage* usage = nullptr) const;

 private:
  std::string source_;
  OrderedJson special_tokens_;
  std::shared_ptr<const TemplateAst> ast_;
};

/// The special tokens transformers puts into a chat template's variables from tokenizer_config.json:
/// bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token,
/// additional_special_tokens (a list) and those under extra_special_tokens, each a string or an
/// {"content": ...} object; null ones are left out. `path` is named in errors.
OrderedJson read_special_tokens(const OrderedJson& tokenizer_config, const std::string& path);

}  // namespace probekit::chat
