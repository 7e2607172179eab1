#include "server/api/request_framing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "common/json.h"
#include "server/api/requests.h"

namespace probekit::server {

namespace {

// A chunk's size line: hexadecimal digits and optional extensions, which nobody needs at length.
constexpr size_t kLongestChunkLine = 1024;

std::string lowercase(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool is_token(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string body_too_large(int64_t limit) {
  return fmt::format("the request body is larger than this server's limit of {} bytes (--max-body-bytes)", limit);
}

}  // namespace

RequestFramer::State RequestFramer::refuse(int status, std::string message) {
  status_ = status;
  message_ = std::move(message);
  return state_ = State::kRefused;
}

std::string RequestFramer::header(std::string_view name) const {
  std::string wanted = lowercase(name);
  for (const auto& [key, value] : headers_) {
    if (lowercase(key) == wanted) return value;
  }
  return "";
}

bool RequestFramer::waits_for_continue() const { return expects_continue_ && state_ == State::kNeedMore; }

RequestFramer::State RequestFramer::advance(std::string_view received) {
  if (state_ != State::kNeedMore) return state_;
  if (!headers_complete()) {
    if (read_headers(received) != State::kNeedMore || !headers_complete()) return state_;
    if (choose_body_framing() != State::kNeedMore) return state_;
  }
  if (chunked_) return in_trailers_ ? read_trailers(received) : read_chunks(received);
  if (received.size() - headers_end_ < content_length_) return state_;
  body_ = std::string(received.substr(headers_end_, static_cast<size_t>(content_length_)));
  return complete(headers_end_ + static_cast<size_t>(content_length_));
}

RequestFramer::State RequestFramer::read_headers(std::string_view received) {
  size_t end = received.find("\r\n\r\n", scanned_ > 3 ? scanned_ - 3 : 0);
  scanned_ = received.size();
  const bool too_long = end == std::string_view::npos ? received.size() > limits_.max_header_bytes
                                                      : end + 4 > limits_.max_header_bytes;
  if (too_long) {
    return refuse(431, fmt::format("the request's headers are larger than this server's limit of {} bytes",
                                   limits_.max_header_bytes));
  }
  // Lines that end in a bare line feed would never make the blank line above: refused at once (regression: the request
  // waited for --client-timeout, then got a 408).
  const std::string_view head = received.substr(0, end == std::string_view::npos ? received.size() : end + 4);
  for (size_t feed = head.find('\n'); feed != std::string_view::npos; feed = head.find('\n', feed + 1)) {
    if (feed == 0 || head[feed - 1] != '\r') {
      return refuse(400, "the request's lines must end in CR LF (\\r\\n), not in a bare line feed");
    }
  }
  if (end == std::string_view::npos) return state_;
  std::string_view block = received.substr(0, end + 2);
  size_t line_end = block.find("\r\n");
  std::string_view request_line = block.substr(0, line_end);
  size_t first = request_line.find(' '), last = request_line.rfind(' ');
  const std::string_view version = first == std::string_view::npos ? "" : request_line.substr(last + 1);
  if (first == std::string_view::npos || first == last || !is_token(request_line.substr(0, first)) ||
      (version != "HTTP/1.1" && version != "HTTP/1.0")) {
    return refuse(400, "the request line is not METHOD TARGET HTTP/1.1");
  }
  method_ = request_line.substr(0, first);
  target_ = request_line.substr(first + 1, last - first - 1);
  version_ = request_line.substr(last + 1);
  for (size_t at = line_end + 2; at < block.size();) {
    size_t next = block.find("\r\n", at);
    std::string_view line = block.substr(at, next - at);
    at = next + 2;
    size_t colon = line.find(':');
    // A folded line, a stray carriage return, line feed or NUL, or a name with spaces could frame the body another way in
    // another reader of the same bytes (request smuggling): refused.
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)) ||
        line.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) {
      return refuse(400, "a request header line is not 'Name: value'");
    }
    headers_.emplace_back(line.substr(0, colon), trimmed(line.substr(colon + 1)));
  }
  headers_end_ = end + 4;
  return state_;
}

// Decides how the body is framed, refusing what the server does not read (compression, transfer codings other
// than chunked, ambiguous framing), and drops the framing headers: the plain form sets its own.
RequestFramer::State RequestFramer::choose_body_framing() {
  int lengths = 0, codings = 0;
  std::string length, coding;
  for (const auto& [key, value] : headers_) {
    std::string name = lowercase(key);
    if (name == "content-encoding" && lowercase(value) != "identity") {
      return refuse(415, fmt::format("compressed request bodies are not accepted (Content-Encoding: {}): send the JSON "
                                     "uncompressed",
                                     value.substr(0, 40)));
    }
    if (name == "content-length") ++lengths, length = value;
    if (name == "transfer-encoding") ++codings, coding = lowercase(value);
    if (name == "expect") expects_continue_ = lowercase(value) == "100-continue";
  }
  headers_.erase(std::remove_if(headers_.begin(), headers_.end(),
                                [](const auto& h) {
                                  std::string name = lowercase(h.first);
                                  return name == "content-length" || name == "transfer-encoding" || name == "expect" ||
                                         name == "content-encoding";
                                }),
                 headers_.end());
  if (lengths + codings > 1) return refuse(400, "the body's length is given more than once (Content-Length, Transfer-Encoding)");
  if (codings == 1) {
    if (coding != "chunked") {
      return refuse(501, fmt::format("Transfer-Encoding '{}' is not supported (chunked is)", coding.substr(0, 40)));
    }
    chunked_ = true;
    chunk_at_ = headers_end_;
    return state_;
  }
  if (lengths == 1) {
    if (length.empty() || length.size() > 18 || length.find_first_not_of("0123456789") != std::string::npos) {
      return refuse(400, "Content-Length is not a number of bytes");
    }
    content_length_ = std::stoull(length);
    if (content_length_ > static_cast<uint64_t>(limits_.max_body_bytes)) return refuse(413, body_too_large(limits_.max_body_bytes));
  }
  return state_;
}

// Chunk after chunk as they come: each size is checked against the bound before its data is waited for.
RequestFramer::State RequestFramer::read_chunks(std::string_view received) {
  // Chunk sizes and extensions add to what is held beside the decoded body: bounded too.
  const uint64_t raw_limit = 2 * static_cast<uint64_t>(limits_.max_body_bytes) + limits_.max_header_bytes;
  while (true) {
    if (chunk_at_ - headers_end_ > raw_limit) return refuse(413, body_too_large(limits_.max_body_bytes));
    size_t line_end = received.find("\r\n", chunk_at_);
    // Judged the same whether the line's end has arrived or not (a last '\r' may begin it).
    size_t line = line_end != std::string_view::npos ? line_end - chunk_at_
                                                     : received.size() - chunk_at_ - (received.back() == '\r' ? 1 : 0);
    if (line > kLongestChunkLine) return refuse(400, "a chunk's size line is too long");
    if (line_end == std::string_view::npos) return state_;
    std::string_view size_text = trimmed(received.substr(chunk_at_, line_end - chunk_at_));
    size_text = trimmed(size_text.substr(0, size_text.find(';')));
    if (size_text.empty() || size_text.size() > 15 || size_text.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
      return refuse(400, "a chunk's size is not a hexadecimal number");
    }
    const uint64_t size = std::stoull(std::string(size_text), nullptr, 16);
    if (size == 0) {
      in_trailers_ = true;
      scanned_ = chunk_at_ = line_end + 2;
      return read_trailers(received);
    }
    if (body_.size() + size > static_cast<uint64_t>(limits_.max_body_bytes)) return refuse(413, body_too_large(limits_.max_body_bytes));
    const size_t data = line_end + 2;
    if (received.size() < data + size + 2) return state_;
    if (received.substr(data + size, 2) != "\r\n") return refuse(400, "a chunk's data is not followed by CRLF");
    body_.append(received.substr(data, size));
    chunk_at_ = data + size + 2;
  }
}

// The trailer lines after the last chunk, up to the blank line; read past, never used.
RequestFramer::State RequestFramer::read_trailers(std::string_view received) {
  if (received.size() >= chunk_at_ + 2 && received.substr(chunk_at_, 2) == "\r\n") return complete(chunk_at_ + 2);
  size_t end = received.find("\r\n\r\n", std::max(scanned_, chunk_at_ + 3) - 3);
  scanned_ = received.size();
  const size_t length = end == std::string_view::npos ? received.size() - chunk_at_ : end + 4 - chunk_at_;
  if (length > limits_.max_header_bytes) {
    return refuse(431, fmt::format("the request's trailers are larger than this server's limit of {} bytes",
                                   limits_.max_header_bytes));
  }
  if (end == std::string_view::npos) return state_;
  return complete(end + 4);
}

RequestFramer::State RequestFramer::complete(size_t consumed) {
  consumed_ = consumed;
  request_ = plain_headers(body_.size()) + body_;
  return state_ = State::kComplete;
}

std::string RequestFramer::plain_headers(size_t content_length) const {
  std::string text = method_ + " " + target_ + " " + version_ + "\r\n";
  for (const auto& [key, value] : headers_) text += key + ": " + value + "\r\n";
  return text + fmt::format("Content-Length: {}\r\n\r\n", content_length);
}

std::string RequestFramer::headers_only() const { return plain_headers(0); }

std::string error_response(int status, const std::string& message) { return json_response(status, error_body(message, "")); }

std::string json_response(int status, const Json& json) {
  const std::string body = dump_json(json);
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                     status, reason_phrase(status), body.size(), body);
}

}  // namespace probekit::server
