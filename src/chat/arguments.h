// Binding a call's positional and keyword arguments to named parameters, as Python binds them, for the
// filters, methods and globals written in C++.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "chat/value.h"

namespace probekit::chat {

/// A parameter and the value it takes when the call does not pass it.
struct Parameter {
  const char* name;
  Value fallback;
};

/// The value of each parameter, in order: passed by position, by keyword, or its fallback. The first
/// `required` parameters must be passed; too many arguments or an unknown keyword fail naming `function`.
std::vector<Value> bind_arguments(const std::string& function, const CallArgs& args,
                                  std::initializer_list<Parameter> parameters, size_t required = 0);

/// An int argument (a bool counts, as in Python); anything else fails naming the function and the parameter.
int64_t int_argument(const Value& value, const std::string& function, const char* parameter);
/// A str argument; anything else fails naming the function and the parameter.
const std::string& string_argument(const Value& value, const std::string& function, const char* parameter);

}  // namespace probekit::chat
