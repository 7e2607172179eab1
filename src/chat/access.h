// Reaching into values the way jinja2's sandbox does: `a.b` looks for a Python attribute (a method of str,
// dict or list) before an item, `a['b']` for an item before an attribute; what is missing is an Undefined
// that says what was missing. Methods that would change a list or a dict are refused, as the immutable
// sandbox refuses them.
#pragma once

#include <string>
#include <vector>

#include "chat/value.h"

namespace probekit::chat {

/// `object.name`.
Value get_attribute(const Value& object, const std::string& name);
/// `object[key]`.
Value get_item(const Value& object, const Value& key);
/// `object[start:stop:step]`; absent bounds are None or Undefined.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);
/// What a for loop over `value` visits: a list's items, a dict's keys, a string's characters; Undefined
/// visits nothing.
std::vector<Value> iterate(const Value& value);
/// len(value); Undefined has length 0.
int64_t length(const Value& value);

}  // namespace probekit::chat
