// probe_server's request framing: any bytes as what a client sends on one connection, read by RequestFramer as the
// server's intake reads them (the first byte picks tight or default bounds, the second how many bytes arrive at a
// time). Whatever the bytes, the framer refuses them with a 4xx (or 501) and a short message, or completes one
// request, and then: it took no more bytes than arrived; its plain form reads again as itself, with neither
// Transfer-Encoding nor Content-Encoding and a body no longer than --max-body-bytes; and the result is the same
// whether the bytes arrived at once or in pieces (chunked bodies, trailers and size lines split anywhere).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "server/api/request_framing.h"

using namespace probekit;
using server::RequestFramer;

namespace {

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return text;
}

void check_complete(const RequestFramer& framer, std::string_view stream, const server::FramingLimits& limits) {
  const std::string& request = framer.request();
  if (framer.consumed() == 0 || framer.consumed() > stream.size()) fuzz::finding("a request took bytes that never came");
  size_t headers_end = request.find("\r\n\r\n");
  if (headers_end == std::string::npos) fuzz::finding("a plain form without a header block");
  std::string headers = lowercase(request.substr(0, headers_end));
  if (headers.find("\r\ntransfer-encoding:") != std::string::npos || headers.find("\r\ncontent-encoding:") != std::string::npos) {
    fuzz::finding("a plain form that still names a transfer or content coding");
  }
  if (request.size() - headers_end - 4 > static_cast<size_t>(limits.max_body_bytes)) fuzz::finding("a body past the bound completed");
  // The plain form's header block may be a Content-Length line longer than the one it was read from.
  server::FramingLimits roomier = limits;
  roomier.max_header_bytes += 64;
  RequestFramer again(roomier);
  if (again.advance(request) != RequestFramer::State::kComplete || again.request() != request ||
      again.consumed() != request.size()) {
    fuzz::finding("a plain form that does not read as itself");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  server::FramingLimits limits;
  if ((data[0] & 1) != 0) limits.max_body_bytes = 64;
  if ((data[0] & 2) != 0) limits.max_header_bytes = 256;
  const size_t step = 1 + data[1] % 64;
  std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);

  RequestFramer whole(limits);
  RequestFramer::State at_once = whole.advance(stream);
  RequestFramer pieces(limits);
  RequestFramer::State piecewise = RequestFramer::State::kNeedMore;
  for (size_t end = std::min(step, stream.size());; end = std::min(end + step, stream.size())) {
    piecewise = pieces.advance(stream.substr(0, end));
    if (piecewise != RequestFramer::State::kNeedMore || end == stream.size()) break;
  }
  if (at_once != piecewise) fuzz::finding("the result depends on how the bytes arrived");
  if (at_once == RequestFramer::State::kComplete) {
    if (whole.request() != pieces.request() || whole.consumed() != pieces.consumed()) {
      fuzz::finding("a request read in pieces differs from the one read at once");
    }
    check_complete(whole, stream, limits);
  } else if (at_once == RequestFramer::State::kRefused) {
    if (whole.status() != pieces.status()) fuzz::finding("a refusal's status depends on how the bytes arrived");
    if (whole.status() < 400 || whole.status() > 501 || whole.message().empty() || whole.message().size() > 300) {
      fuzz::finding("a refusal without a 4xx status and a short message");
    }
  }
  return 0;
}
