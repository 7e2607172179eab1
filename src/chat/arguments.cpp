#include "chat/arguments.h"

#include "chat/template_error.h"
#include "chat/value_text.h"

namespace probekit::chat {

std::vector<Value> bind_arguments(const std::string& function, const CallArgs& args,
                                  std::initializer_list<Parameter> parameters, size_t required) {
  if (args.positional.size() > parameters.size()) {
    fail_render("{}() takes at most {} argument(s) ({} given)", function, parameters.size(), args.positional.size());
  }
  std::vector<Value> values;
  std::vector<bool> given;
  for (const Parameter& parameter : parameters) {
    bool by_position = values.size() < args.positional.size();
    values.push_back(by_position ? args.positional[values.size()] : parameter.fallback);
    given.push_back(by_position);
  }
  for (const auto& [name, value] : args.keywords) {
    size_t index = 0;
    for (const Parameter& parameter : parameters) {
      if (name == parameter.name) break;
      index++;
    }
    if (index == parameters.size()) fail_render("{}() got an unexpected keyword argument '{}'", function, name);
    if (given[index]) fail_render("{}() got multiple values for argument '{}'", function, name);
    values[index] = value;
    given[index] = true;
  }
  for (size_t i = 0; i < required; i++) {
    if (!given[i]) fail_render("{}() missing required argument '{}'", function, parameters.begin()[i].name);
  }
  return values;
}

int64_t int_argument(const Value& value, const std::string& function, const char* parameter) {
  if (value.is_bool()) return value.as_bool() ? 1 : 0;
  if (!value.is_int()) fail_render("{}(): '{}' must be an integer, got {}", function, parameter, type_name(value));
  return value.as_int();
}

const std::string& string_argument(const Value& value, const std::string& function, const char* parameter) {
  if (!value.is_string()) fail_render("{}(): '{}' must be a string, got {}", function, parameter, type_name(value));
  return value.as_string();
}

}  // namespace probekit::chat
