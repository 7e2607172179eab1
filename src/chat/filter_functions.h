// The filters' implementations, for filters.cpp's table: text_filters.cpp holds the ones on text and
// numbers, sequence_filters.cpp the ones on lists and dicts. Each takes the operand and the call's arguments
// and binds them with jinja2's signature for that filter.
#pragma once

#include "chat/value.h"

namespace probekit::chat::filters {

// text_filters.cpp
Value trim(const Value& operand, const CallArgs& args);
Value upper(const Value& operand, const CallArgs& args);
Value lower(const Value& operand, const CallArgs& args);
Value capitalize(const Value& operand, const CallArgs& args);
Value title(const Value& operand, const CallArgs& args);
Value replace(const Value& operand, const CallArgs& args);
Value indent(const Value& operand, const CallArgs& args);
Value wordcount(const Value& operand, const CallArgs& args);
Value string(const Value& operand, const CallArgs& args);
Value safe(const Value& operand, const CallArgs& args);
Value tojson(const Value& operand, const CallArgs& args);
Value default_value(const Value& operand, const CallArgs& args);
Value attr(const Value& operand, const CallArgs& args);
Value to_int(const Value& operand, const CallArgs& args);
Value to_float(const Value& operand, const CallArgs& args);
Value abs(const Value& operand, const CallArgs& args);
Value round(const Value& operand, const CallArgs& args);

// sequence_filters.cpp
Value length(const Value& operand, const CallArgs& args);
Value first(const Value& operand, const CallArgs& args);
Value last(const Value& operand, const CallArgs& args);
Value join(const Value& operand, const CallArgs& args);
Value list(const Value& operand, const CallArgs& args);
Value items(const Value& operand, const CallArgs& args);
Value reverse(const Value& operand, const CallArgs& args);
Value sort(const Value& operand, const CallArgs& args);
Value dictsort(const Value& operand, const CallArgs& args);
Value unique(const Value& operand, const CallArgs& args);
Value min(const Value& operand, const CallArgs& args);
Value max(const Value& operand, const CallArgs& args);
Value sum(const Value& operand, const CallArgs& args);
Value map(const Value& operand, const CallArgs& args);
Value select(const Value& operand, const CallArgs& args);
Value reject(const Value& operand, const CallArgs& args);
Value selectattr(const Value& operand, const CallArgs& args);
Value rejectattr(const Value& operand, const CallArgs& args);

}  // namespace probekit::chat::filters
