// A small HTTP client over libcurl for the hub's two kinds of request: HEAD for a file's metadata (redirects not
// followed, so the hub's own headers are read), and GET streaming a file's bytes to a callback (redirects
// followed, an optional Range). A failure to reach the server or a dropped connection throws NetworkError; an
// HTTP error status is returned for the caller to explain (or to turn into a NetworkError when it may pass).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hub/hub_responses.h"

namespace probekit::hub {

/// The server could not be reached, the transfer broke off, or the server answered with a failure that may pass
/// (5xx, 429): worth another try.
class NetworkError : public std::runtime_error {
 public:
  explicit NetworkError(const std::string& message, int status = 0, double retry_after_seconds = -1)
      : std::runtime_error(message), status_(status), retry_after_seconds_(retry_after_seconds) {}
  /// The HTTP status of the failing answer; 0 when no answer came.
  int status() const { return status_; }
  /// How long the answer's Retry-After asks to wait; -1 when it names no number of seconds.
  double retry_after_seconds() const { return retry_after_seconds_; }

 private:
  int status_;
  double retry_after_seconds_;
};

struct HttpResponse {
  int status = 0;
  Headers headers;
  std::string url;   // the URL that answered (after redirects)
  std::string body;  // an error answer's body (the start of it); empty for streamed answers
};

/// Request settings shared by all requests of a client.
struct HttpOptions {
  double connect_timeout_seconds = 10;
  double stall_seconds = 10;  // no byte for this long: the request is abandoned with a NetworkError that says so
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// HEAD `url` with extra header lines ("Name: value"); redirects are returned, not followed.
  HttpResponse head(const std::string& url, const std::vector<std::string>& headers);

  /// Receives a successful answer's bytes; returning false aborts the transfer.
  using BodySink = std::function<bool(std::string_view bytes)>;
  /// Called once the final answer's status and headers are known, before any byte reaches the sink; returning
  /// false aborts the transfer (the answer is then returned as it is).
  using StartCheck = std::function<bool(const HttpResponse& response)>;

  /// GET `url`, following redirects. A 2xx answer's body streams to `sink` after `start` accepted it; any other
  /// answer's body is kept (its first kilobytes) in the returned response.
  HttpResponse get(const std::string& url, const std::vector<std::string>& headers, const StartCheck& start,
                   const BodySink& sink);

 private:
  struct Transfer;
  HttpResponse perform(const std::string& url, const std::vector<std::string>& headers, Transfer& transfer);
  void* curl_ = nullptr;
  HttpOptions options_;
};

/// "scheme://host[:port]" of a URL: requests to another origin never carry the token.
std::string url_origin(const std::string& url);

/// A URL as messages and logs show it: without a user name and password before the host, nor a query or fragment
/// (a signed link's signature would let whoever reads the log download a gated file until it expires).
std::string url_shown(const std::string& url);

}  // namespace probekit::hub
