#include "chat/is_tests.h"

#include "chat/arguments.h"
#include "chat/filters.h"
#include "chat/operators.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

using Test = bool (*)(const Value& value, const CallArgs& args);

struct TestRow {
  const char* name;
  Test test;
};

Value only_argument(const char* test, const CallArgs& args) { return bind_arguments(test, args, {{"other", Value()}}, 1)[0]; }

template <const char* op>
bool comparison_test(const Value& value, const CallArgs& args) { return compare(op, value, only_argument(op, args)); }

constexpr char kEq[] = "==", kNe[] = "!=", kLt[] = "<", kLe[] = "<=", kGt[] = ">", kGe[] = ">=";

bool odd_or_even(const Value& value, bool odd) { return truthy(arithmetic("%", value, Value(2))) == odd; }

const TestRow kTests[] = {
    {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
    {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
    {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
    {"boolean", [](const Value& v, const CallArgs&) { return v.is_bool(); }},
    {"true", [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }},
    {"false", [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }},
    {"integer", [](const Value& v, const CallArgs&) { return v.is_int(); }},
    {"float", [](const Value& v, const CallArgs&) { return v.is_float(); }},
    {"number", [](const Value& v, const CallArgs&) { return v.is_number(); }},
    {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
    {"mapping", [](const Value& v, const CallArgs&) { return v.is_mapping(); }},
    // Undefined defines __iter__, __len__ and __getitem__, so jinja2 finds it iterable and a sequence; a dict's
    // view has no __getitem__, so it is iterable and no sequence.
    {"iterable", [](const Value& v, const CallArgs&) { return v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined(); }},
    {"sequence", [](const Value& v, const CallArgs&) {
       return v.is_string() || v.is_list_or_tuple() || v.is_mapping() || v.is_undefined();
     }},
    {"callable", [](const Value& v, const CallArgs&) { return v.is_callable() || v.is_undefined(); }},
    // Python's `is`: the same list, dict or function; None, booleans and (as CPython caches and interns
    // them) equal ints and strings are the same object.
    {"sameas", [](const Value& v, const CallArgs& a) {
       Value other = only_argument("sameas", a);
       bool simple = v.kind() == other.kind() && (v.is_none() || v.is_bool() || v.is_int() || v.is_string());
       return v.same_object(other) || (simple && python_equal(v, other));
     }},
    {"escaped", [](const Value&, const CallArgs&) { return false; }},
    {"in", [](const Value& v, const CallArgs& a) { return contains(only_argument("in", a), v); }},
    {"eq", comparison_test<kEq>}, {"equalto", comparison_test<kEq>}, {"==", comparison_test<kEq>},
    {"ne", comparison_test<kNe>}, {"!=", comparison_test<kNe>},
    {"lt", comparison_test<kLt>}, {"lessthan", comparison_test<kLt>}, {"<", comparison_test<kLt>},
    {"le", comparison_test<kLe>}, {"<=", comparison_test<kLe>},
    {"gt", comparison_test<kGt>}, {"greaterthan", comparison_test<kGt>}, {">", comparison_test<kGt>},
    {"ge", comparison_test<kGe>}, {">=", comparison_test<kGe>},
    {"odd", [](const Value& v, const CallArgs&) { return odd_or_even(v, true); }},
    {"even", [](const Value& v, const CallArgs&) { return odd_or_even(v, false); }},
    {"divisibleby", [](const Value& v, const CallArgs& a) {
       return python_equal(arithmetic("%", v, only_argument("divisibleby", a)), Value(0));
     }},
    {"lower", [](const Value& v, const CallArgs&) { return python_is_lower(python_str(v)); }},
    {"upper", [](const Value& v, const CallArgs&) { return python_is_upper(python_str(v)); }},
    {"filter", [](const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.as_string()); }},
    {"test", [](const Value& v, const CallArgs&) { return v.is_string() && has_test(v.as_string()); }},
};

const TestRow* find_test(const std::string& name) {
  for (const TestRow& row : kTests) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

}  // namespace

bool has_test(const std::string& name) { return find_test(name) != nullptr; }

std::string missing_test_message(const std::string& name) { return "No test named '" + name + "'."; }

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  const TestRow* row = find_test(name);
  if (row == nullptr) fail_render("{}", missing_test_message(name));
  return row->test(value, args);
}

}  // namespace probekit::chat
