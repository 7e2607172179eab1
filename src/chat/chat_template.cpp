#include "chat/chat_template.h"

#include <cctype>

#include "chat/globals.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/utf8_text.h"

namespace probekit::chat {

std::string ChatTemplate::source_sha256() const {
  Sha256 hash;
  hash.update(source_);
  return hash.hex_digest();
}

namespace {

// The text of a special token: a string, or an AddedToken object's "content".
std::string token_text(const OrderedJson& token, const std::string& key, const std::string& path) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token.at("content").is_string()) {
    return token.at("content").get<std::string>();
  }
  fail_input("{}: special token '{}' must be a string or an object with a string \"content\", got {}", path, key, token.dump());
}

// The template named `name` ("" for "default") in tokenizer_config.json's "chat_template", or "" if none.
std::string template_in_config(const OrderedJson& config, const std::string& name, const std::string& path) {
  if (!config.contains("chat_template") || config.at("chat_template").is_null()) return "";
  const OrderedJson& chat_template = config.at("chat_template");
  std::string wanted = name.empty() ? "default" : name;
  if (chat_template.is_string()) return wanted == "default" ? chat_template.get<std::string>() : "";
  if (!chat_template.is_array()) fail_input("{}: \"chat_template\" must be a string or a list of named templates", path);
  std::string names;
  for (const OrderedJson& entry : chat_template) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry.at("template").is_string()) {
      fail_input("{}: each \"chat_template\" entry must be {{\"name\": ..., \"template\": ...}}", path);
    }
    if (entry.at("name") == wanted) return entry.at("template").get<std::string>();
    names += (names.empty() ? "" : ", ") + entry.at("name").dump();
  }
  fail_input("{}: no chat template named \"{}\" (it has {})", path, wanted, names);
}

}  // namespace

OrderedJson read_special_tokens(const OrderedJson& tokenizer_config, const std::string& path) {
  OrderedJson tokens = OrderedJson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (tokenizer_config.contains(key) && !tokenizer_config.at(key).is_null()) {
      tokens[key] = token_text(tokenizer_config.at(key), key, path);
    }
  }
  if (tokenizer_config.contains("additional_special_tokens") && tokenizer_config.at("additional_special_tokens").is_array()) {
    OrderedJson list = OrderedJson::array();
    for (const OrderedJson& token : tokenizer_config.at("additional_special_tokens")) {
      list.push_back(token_text(token, "additional_special_tokens", path));
    }
    if (!list.empty()) tokens["additional_special_tokens"] = list;
  }
  if (tokenizer_config.contains("extra_special_tokens") && tokenizer_config.at("extra_special_tokens").is_object()) {
    for (const auto& [key, token] : tokenizer_config.at("extra_special_tokens").items()) {
      if (!token.is_null()) tokens[key] = token_text(token, key, path);
    }
  }
  return tokens;
}

namespace {

// transformers reads a template file as UTF-8 and fails on anything else; jinja2 works on Python's str.
const std::string& checked_utf8(const std::string& source) {
  if (!is_valid_utf8(source)) {
    fail_input("the chat template is not UTF-8 text (transformers refuses it too): re-save the template as UTF-8");
  }
  return source;
}

std::string read_template_file(const std::string& path) {
  std::string source = read_file(path);
  if (!is_valid_utf8(source)) fail_input("{}: not UTF-8 text (transformers refuses such a template too)", path);
  return source;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, OrderedJson special_tokens)
    : source_(checked_utf8(source)),
      special_tokens_(std::move(special_tokens)),
      ast_(std::make_shared<const TemplateAst>(parse_template(source))) {}

bool ChatTemplate::names(const std::string& word) const {
  auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  for (size_t at = source_.find(word); at != std::string::npos; at = source_.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !is_name_char(source_[at - 1])) && (end == source_.size() || !is_name_char(source_[end]))) return true;
  }
  return false;
}

ChatTemplate ChatTemplate::from_tokenizer_dir(const std::string& dir, const std::string& name) {
  std::string config_path = dir + "/tokenizer_config.json";
  std::string jinja_path = dir + "/chat_template.jinja";
  std::string named_path = dir + "/additional_chat_templates/" + name + ".jinja";
  OrderedJson config = is_regular_file(config_path) ? OrderedJson(read_json_file(config_path)) : OrderedJson::object();
  OrderedJson tokens = read_special_tokens(config, config_path);
  // A template that does not parse is named by its file, whose lines the message counts.
  auto parsed = [&tokens](const std::string& source, const std::string& where) {
    try {
      return ChatTemplate(source, tokens);
    } catch (const std::exception&) {
      rethrow_with_context(where);
    }
  };
  if ((name.empty() || name == "default") && is_regular_file(jinja_path)) return parsed(read_template_file(jinja_path), jinja_path);
  if (!name.empty() && is_regular_file(named_path)) return parsed(read_template_file(named_path), named_path);
  std::string source = template_in_config(config, name, config_path);
  if (source.empty()) {
    fail_input("no chat template{} in {}: looked at {}, {}'chat_template' in {}", name.empty() ? "" : " named '" + name + "'",
               dir, jinja_path, name.empty() ? "" : named_path + ", ", config_path);
  }
  return parsed(source, config_path + " 'chat_template'");
}

OrderedJson ChatTemplate::variables(const ChatTemplateInputs& inputs) const {
  if (!inputs.extra.is_object()) fail_input("chat template inputs: 'extra' must be a JSON object of variables, got {}", inputs.extra.dump());
  OrderedJson variables = special_tokens_;
  for (const auto& [key, token] : inputs.special_tokens) variables[key] = token;
  for (const auto& [key, value] : inputs.extra.items()) variables[key] = value;
  variables["messages"] = inputs.messages;
  variables["tools"] = inputs.tools;
  variables["documents"] = inputs.documents;
  variables["add_generation_prompt"] = inputs.add_generation_prompt;
  return variables;
}

void ChatTemplate::check_tools(const OrderedJson& tools) const {
  // transformers renders such tools away without a word; a conversation captured or served that way would not be the
  // one its data says (regression: the tools were dropped silently).
  if (tools.is_array() && !tools.empty() && !names("tools")) {
    fail_template(0, "{}, so the model would not see the tools offered; leave 'tools' out, or use a template that "
                     "takes them", kToolsNeverRead);
  }
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs, RenderUsage* usage) const {
  check_tools(inputs.tools);
  auto root = std::make_shared<Scope>();
  add_globals(*root);
  OrderedJson all = variables(inputs);
  for (const auto& [key, value] : all.items()) root->set(key, Value::from_json(value));
  RenderBudget budget(inputs.limits);
  std::string text = render_template(*ast_, root);
  if (usage != nullptr) *usage = {budget.steps(), budget.bytes(), budget.deepest()};
  return text;
}

}  // namespace probekit::chat
