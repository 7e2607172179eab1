// Text placed in HTML pages (reports, the server's page): one escaping for element text and attribute values.
#pragma once

#include <string>

namespace probekit {

/// `text` with & < > " and ' replaced by their entities, safe inside elements and quoted attributes.
std::string html_escape(const std::string& text);

}  // namespace probekit
