// One HTTP/1.1 request read off a connection whole, before any worker thread sees it: the headers, then the body
// as Content-Length or chunked transfer coding frames it, every byte counted as it arrives. A request past a bound
// is refused as soon as the bound is known to be passed (a Content-Length or a chunk size past --max-body-bytes, a
// header block past its limit), and compressed bodies are refused outright, so that nothing inflates. A complete
// request is handed on rewritten to one plain form (its decoded body under a Content-Length, no Transfer-Encoding
// and no Expect), which is all the HTTP library then reads. Torch-free, so that it is fuzzed on its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"

namespace probekit::server {

struct FramingLimits {
  int64_t max_body_bytes = 1 << 20;  // --max-body-bytes: the decoded body
  size_t max_header_bytes = 64 * 1024;  // the request line, the headers and a chunked body's trailers
};

class RequestFramer {
 public:
  enum class State { kNeedMore, kComplete, kRefused };

  explicit RequestFramer(const FramingLimits& limits) : limits_(limits) {}

  /// Reads on: `received` is every byte of the connection not yet consumed (what the last call saw, and more).
  State advance(std::string_view received);
  State state() const { return state_; }

  /// Once the header block is in: the request target, a header's value ("" when absent; names in any case), and
  /// whether the client waits for "100 Continue" before it sends a body the server has yet to read.
  bool headers_complete() const { return headers_end_ > 0; }
  const std::string& method() const { return method_; }
  const std::string& target() const { return target_; }
  std::string header(std::string_view name) const;
  bool waits_for_continue() const;

  /// kComplete: the request in its plain form, and how many bytes of the connection it took.
  const std::string& request() const { return request_; }
  size_t consumed() const { return consumed_; }
  /// Once the headers are in: the request in plain form without its body (for one refused on its headers alone:
  /// the body is never read, so the connection cannot serve another request).
  std::string headers_only() const;

  /// kRefused: the HTTP status (4xx, or 501 for an unknown transfer coding) and why.
  int status() const { return status_; }
  const std::string& message() const { return message_; }

 private:
  State refuse(int status, std::string message);
  State read_headers(std::string_view received);
  State choose_body_framing();
  State read_chunks(std::string_view received);
  State read_trailers(std::string_view received);
  State complete(size_t consumed);
  std::string plain_headers(size_t content_length) const;

  FramingLimits limits_;
  State state_ = State::kNeedMore;
  size_t scanned_ = 0;      // bytes searched for the end of the header block (or of the trailers) so far
  size_t headers_end_ = 0;  // just past the blank line ending the headers; 0 while they are incomplete
  std::string method_, target_, version_;
  std::vector<std::pair<std::string, std::string>> headers_;  // as sent, but the framing ones
  bool chunked_ = false;
  bool expects_continue_ = false;
  uint64_t content_length_ = 0;
  size_t chunk_at_ = 0;  // chunked: where the next chunk's size line starts
  bool in_trailers_ = false;
  std::string body_;
  std::string request_;
  size_t consumed_ = 0;
  int status_ = 0;
  std::string message_;
};

/// A whole HTTP/1.1 response carrying `body` (JSON) with `status`, closing the connection: what the server sends for a
/// request refused before it reached a handler.
std::string json_response(int status, const Json& body);
/// json_response of {"error": message}.
std::string error_response(int status, const std::string& message);

}  // namespace probekit::server
