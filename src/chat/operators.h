// Python's operators on template values, as jinja2 applies them: truthiness, ==, ordering, arithmetic (int
// division to float, floor division and modulo rounding down), `in`, and the ~ concatenation. An Undefined
// operand fails where jinja2's Undefined raises.
#pragma once

#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// bool(value): empty strings, lists and dicts, 0, None and Undefined are false.
bool truthy(const Value& value);
/// Python's ==: numbers by value across int, float and bool; lists and tuples never equal each other.
bool python_equal(const Value& a, const Value& b);
/// Python's <; values that Python cannot order fail with its TypeError message.
bool python_less(const Value& a, const Value& b);
/// A comparison operator ("==", "!=", "<", "<=", ">", ">=").
bool compare(const std::string& op, const Value& a, const Value& b);
/// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
/// An arithmetic operator ("+", "-", "*", "/", "//", "%", "**").
Value arithmetic(const std::string& op, const Value& a, const Value& b);
/// Unary minus or plus ("-", "+").
Value negate_or_keep(const std::string& op, const Value& operand);
/// a ~ b: both as strings, Undefined as nothing.
Value concatenate(const Value& a, const Value& b);
/// Fails with what an Undefined says about itself ("'x' is undefined").
[[noreturn]] void fail_undefined(const Value& undefined);

}  // namespace probekit::chat
