#include "chat/filters.h"

#include "chat/filter_functions.h"
#include "chat/template_error.h"

namespace probekit::chat {

namespace {

using Filter = Value (*)(const Value& operand, const CallArgs& args);

struct FilterRow {
  const char* name;
  Filter apply;  // null: a jinja2 filter this renderer refuses
};

const FilterRow kFilters[] = {
    {"abs", filters::abs},
    {"attr", filters::attr},
    {"capitalize", filters::capitalize},
    {"count", filters::length},
    {"d", filters::default_value},
    {"default", filters::default_value},
    {"dictsort", filters::dictsort},
    {"first", filters::first},
    {"float", filters::to_float},
    {"indent", filters::indent},
    {"int", filters::to_int},
    {"items", filters::items},
    {"join", filters::join},
    {"last", filters::last},
    {"length", filters::length},
    {"list", filters::list},
    {"lower", filters::lower},
    {"map", filters::map},
    {"max", filters::max},
    {"min", filters::min},
    {"reject", filters::reject},
    {"rejectattr", filters::rejectattr},
    {"replace", filters::replace},
    {"reverse", filters::reverse},
    {"round", filters::round},
    {"safe", filters::safe},
    {"select", filters::select},
    {"selectattr", filters::selectattr},
    {"sort", filters::sort},
    {"string", filters::string},
    {"sum", filters::sum},
    {"title", filters::title},
    {"tojson", filters::tojson},
    {"trim", filters::trim},
    {"unique", filters::unique},
    {"upper", filters::upper},
    {"wordcount", filters::wordcount},
    // jinja2's other filters: HTML escaping (autoescape is off in transformers), printf formatting, grouping.
    {"batch", nullptr},
    {"center", nullptr},
    {"e", nullptr},
    {"escape", nullptr},
    {"filesizeformat", nullptr},
    {"forceescape", nullptr},
    {"format", nullptr},
    {"groupby", nullptr},
    {"pprint", nullptr},
    {"random", nullptr},
    {"slice", nullptr},
    {"striptags", nullptr},
    {"truncate", nullptr},
    {"urlencode", nullptr},
    {"urlize", nullptr},
    {"wordwrap", nullptr},
    {"xmlattr", nullptr},
};

const FilterRow* find_filter(const std::string& name) {
  for (const FilterRow& row : kFilters) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

}  // namespace

bool has_filter(const std::string& name) {
  const FilterRow* row = find_filter(name);
  return row != nullptr && row->apply != nullptr;
}

std::string missing_filter_message(const std::string& name) {
  if (find_filter(name) != nullptr) return "the '" + name + "' filter is not supported in chat templates";
  return "No filter named '" + name + "'.";
}

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args) {
  if (!has_filter(name)) fail_render("{}", missing_filter_message(name));
  return find_filter(name)->apply(operand, args);
}

}  // namespace probekit::chat
