// Reading a request body's fields: each field read once, typed and range-checked, a RequestError naming the field
// for anything else; what no reader took is an unknown field. Shared by every endpoint's parser (requests.cpp,
// chat_request.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/json.h"
#include "server/api/requests.h"

namespace probekit::server {

constexpr int kBadRequest = 400;
constexpr int kTooLarge = 413;
constexpr size_t kShownChars = 60;  // of a value quoted in a message

/// A JSON value shown in a message, cut short.
std::string shown(const Json& value);

/// Throws the 400 of a field whose value is not what it must be.
[[noreturn]] void wrong_type(const std::string& field, const char* expected, const Json& value);

class BodyFields {
 public:
  /// A request body: refused when it nests too deep, is not JSON or not an object.
  explicit BodyFields(std::string_view body);
  /// An object inside a body (`field` names it in the error when it is not an object).
  BodyFields(const Json& object, const std::string& field);

  /// The field's value, or nullptr when it is absent or null.
  const Json* take(const std::string& key);
  /// take()'s value with its objects' keys in the order the body wrote them, for what a chat template prints (its
  /// tojson keeps that order); null when absent. Only a whole body's fields.
  OrderedJson take_ordered(const std::string& key);
  const Json& required(const std::string& key);
  int64_t integer(const std::string& key, int64_t fallback, int64_t low, int64_t high);
  double number(const std::string& key, double fallback, double low, double high);
  bool boolean(const std::string& key, bool fallback);
  std::string choice(const std::string& key, const std::string& fallback, const std::set<std::string>& allowed);
  /// Throws naming the first field no reader took.
  void reject_unknown() const;

 private:
  Json object_;
  std::set<std::string> taken_;
  std::string body_;                    // a whole body's text, which take_ordered reads again; empty inside a body
  std::optional<OrderedJson> ordered_;  // the body read by take_ordered
};

/// A conversation's messages, checked as a chat template needs them (a 400 naming the message's field).
OrderedJson checked_messages(const OrderedJson& messages);

/// "tools": the functions a conversation offers its chat template (apply_chat_template(tools=...)), their keys in the
/// order sent, checked (a 400 naming the tool's field); null when absent.
OrderedJson tools_field(BodyFields& fields);

/// A text to score: a string that is not blank.
std::string text_value(const Json& value, const std::string& field);

/// The view fields (top_k, threshold, calibrated, layers; with_modes: mode and aggregate too).
ViewQuery view_fields(BodyFields& fields, bool with_modes);

/// "steer" and "ablate".
SteeringQuery steering_fields(BodyFields& fields);

/// "monitors" as given: a list (its policies are read against the probes by monitor::parse_policies); null when
/// absent.
Json monitor_field(BodyFields& fields);

/// One item of "steer" ({"label" | "vector", "layer", "coefficient"}) or, without the coefficient, of "ablate".
SteerItem steer_item(const Json& item, const std::string& field, bool with_coefficient);

}  // namespace probekit::server
