// probe_server's request framing on its own: Content-Length and chunked bodies read into one plain form, bytes
// counted as they arrive (a bound passed is refused as soon as it is known), compressed bodies and ambiguous framing
// refused, and the same result however the bytes are split (tests/torch/test_server_clients.cpp checks the same
// through a real server).
#include <doctest/doctest.h>

#include <string>

#include "server/api/request_framing.h"
#include "test_util.h"

using namespace probekit;
using server::RequestFramer;
using State = RequestFramer::State;

namespace {

server::FramingLimits limits_of(int64_t body, size_t headers = 64 * 1024) {
  server::FramingLimits limits;
  limits.max_body_bytes = body;
  limits.max_header_bytes = headers;
  return limits;
}

// Feeds `stream` a byte at a time; the state once it stops needing more (or at the end).
State byte_by_byte(RequestFramer& framer, const std::string& stream) {
  State state = State::kNeedMore;
  for (size_t end = 1; end <= stream.size() && state == State::kNeedMore; ++end) state = framer.advance(stream.substr(0, end));
  return state;
}

const std::string kHead = "POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";

}  // namespace

TEST_CASE("request framing: Content-Length and chunked bodies read into one plain form, pipelined requests left") {
  const std::string plain = kHead + "Content-Length: 5\r\n\r\nhello";
  for (const std::string& stream : {plain, kHead + "Transfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3;ext=1\r\nllo\r\n0\r\n\r\n",
                                    kHead + "transfer-encoding: Chunked\r\nExpect: 100-continue\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"}) {
    CAPTURE(stream);
    for (bool split : {false, true}) {
      RequestFramer framer(limits_of(1000));
      State state = split ? byte_by_byte(framer, stream + "GET /healthz HTTP/1.1\r\n\r\n") : framer.advance(stream + "GET /");
      REQUIRE(state == State::kComplete);
      CHECK(framer.request() == plain);
      CHECK(framer.consumed() == stream.size());
      CHECK(framer.method() == "POST");
      CHECK(framer.target() == "/v1/rank");
    }
  }
  // No body framing: no body.
  RequestFramer get(limits_of(10));
  REQUIRE(get.advance("GET /healthz HTTP/1.1\r\nAuthorization: Bearer k\r\n\r\nxyz") == State::kComplete);
  CHECK(get.request() == "GET /healthz HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: 0\r\n\r\n");
  CHECK(get.header("authorization") == "Bearer k");
  CHECK(get.headers_only() == get.request());
  // The headers known before the body: what the intake checks the key on, and whether to send 100 Continue.
  RequestFramer waiting(limits_of(1000));
  CHECK(waiting.advance(kHead + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhe") == State::kNeedMore);
  CHECK(waiting.headers_complete());
  CHECK(waiting.waits_for_continue());
  CHECK(waiting.headers_only() == kHead + "Content-Length: 0\r\n\r\n");
}

TEST_CASE("request framing: past a bound is refused as soon as the bound is known to be passed") {
  auto refused = [](const std::string& stream, int64_t body, int status, const std::string& part, size_t headers = 64 * 1024) {
    CAPTURE(stream.substr(0, 200));
    for (bool split : {false, true}) {
      RequestFramer framer(limits_of(body, headers));
      CHECK((split ? byte_by_byte(framer, stream) : framer.advance(stream)) == State::kRefused);
      CHECK(framer.status() == status);
      CHECK_CONTAINS(framer.message(), part);
    }
  };
  // The bound on decoded bytes, whatever the framing: a Content-Length, a chunk's size, chunks that add up.
  refused(kHead + "Content-Length: 11\r\n\r\n", 10, 413, "limit of 10 bytes (--max-body-bytes)");
  refused(kHead + "Transfer-Encoding: chunked\r\n\r\nb\r\n", 10, 413, "(--max-body-bytes)");
  refused(kHead + "Transfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n", 10, 413, "(--max-body-bytes)");
  refused(kHead + "Transfer-Encoding: chunked\r\n\r\n" + std::string(20000, '0') + "1\r\n", 10, 400, "size line is too long");
  // Compressed bodies are refused, small or not: nothing inflates.
  refused(kHead + "Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\n", 1000, 415, "(Content-Encoding: gzip)");
  refused(kHead + "Content-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n", 1000, 415, "send the JSON uncompressed");
  // Framing that another reader could take another way.
  refused(kHead + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 1000, 400, "given more than once");
  refused(kHead + "Content-Length: 3\r\nContent-Length: 3\r\n\r\n", 1000, 400, "given more than once");
  refused(kHead + "Content-Length: -3\r\n\r\n", 1000, 400, "not a number of bytes");
  refused(kHead + "Content-Length: 99999999999999999999\r\n\r\n", 1000, 400, "not a number of bytes");
  refused(kHead + "Transfer-Encoding: gzip, chunked\r\n\r\n", 1000, 501, "not supported");
  refused(kHead + "Transfer-Encoding: chunked\r\n\r\n-1\r\n", 1000, 400, "not a hexadecimal number");
  refused(kHead + "Transfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 1000, 400, "not followed by CRLF");
  refused(kHead + " folded: line\r\n\r\n", 1000, 400, "not 'Name: value'");
  refused(kHead + "Bad\rName: x\r\n\r\n", 1000, 400, "not 'Name: value'");
  refused("POST\r\n\r\n", 1000, 400, "the request line");
  // Regression: lines ending in a bare line feed waited for --client-timeout, then got a 408.
  refused("GET /healthz HTTP/1.1\nHost: x\n\n", 1000, 400, "must end in CR LF");
  refused("GET /healthz HTTP/1.1\r\nHost: x\n\n", 1000, 400, "must end in CR LF");
  // Fuzz regression (fuzz_request_framing): a request line without an HTTP version was framed and handed on.
  refused("POST /v1/rank 11\r\nContent-Length: 0\r\n\r\n", 1000, 400, "the request line");
  refused("GET / HTTP/2.0\r\n\r\n", 1000, 400, "the request line");
  // Headers and trailers past their bound.
  refused("GET / HTTP/1.1\r\nX: " + std::string(300, 'x'), 1000, 431, "headers are larger than", 256);
  refused(kHead + "Transfer-Encoding: chunked\r\n\r\n0\r\nX: " + std::string(300, 'x'), 1000, 431, "trailers", 256);
}
