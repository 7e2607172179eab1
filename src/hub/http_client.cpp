#include "hub/http_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <exception>
#include <mutex>

#include "common/error.h"

namespace probekit::hub {

namespace {

constexpr size_t kErrorBodyLimit = 4096;
constexpr long kHeadTimeoutSeconds = 60;
constexpr long kMaxRedirects = 10;

void initialize_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("cannot initialize libcurl");
  });
}

bool is_success(int status) { return status >= 200 && status < 300; }

using Clock = std::chrono::steady_clock;

}  // namespace

// What one request gathers while libcurl runs it.
struct HttpClient::Transfer {
  std::string header_block;  // the header lines of the latest response (redirects start a new block)
  HttpResponse response;
  const StartCheck* start = nullptr;
  const BodySink* sink = nullptr;
  bool started = false, accepted = false, stopped_by_caller = false, stalled = false;
  std::exception_ptr failure;  // thrown by a callback: it must not unwind through libcurl's C frames
  CURL* curl = nullptr;
  double stall_seconds = 0;
  Clock::time_point last_byte = Clock::now();  // of a header or of the body

  // The final answer's status and headers, read once its first body byte (or its end) arrives.
  void begin() {
    started = true;
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    response.status = static_cast<int>(status);
    response.headers = parse_header_lines(header_block);
    char* url = nullptr;
    if (curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url != nullptr) response.url = url;
    accepted = is_success(response.status) && (start == nullptr || (*start)(response));
    stopped_by_caller = is_success(response.status) && !accepted;
  }

  static size_t on_header(char* data, size_t size, size_t count, void* self) {
    auto* transfer = static_cast<Transfer*>(self);
    transfer->last_byte = Clock::now();
    std::string_view line(data, size * count);
    if (line.rfind("HTTP/", 0) == 0) transfer->header_block.clear();
    transfer->header_block.append(line);
    return size * count;
  }

  size_t receive(std::string_view bytes) {
    if (!started) begin();
    if (stopped_by_caller) return 0;
    if (!accepted) {
      size_t room = kErrorBodyLimit - std::min(kErrorBodyLimit, response.body.size());
      response.body.append(bytes.substr(0, room));
      return bytes.size();
    }
    if (sink != nullptr && !(*sink)(bytes)) {
      stopped_by_caller = true;
      return 0;
    }
    return bytes.size();
  }

  static size_t on_body(char* data, size_t size, size_t count, void* self) {
    auto* transfer = static_cast<Transfer*>(self);
    transfer->last_byte = Clock::now();
    try {
      return transfer->receive(std::string_view(data, size * count));
    } catch (...) {
      transfer->failure = std::current_exception();
      transfer->stopped_by_caller = true;
      return 0;
    }
  }

  // libcurl calls this at least once a second while it waits; a non-zero return aborts the transfer. curl's own
  // low-speed limit counts whole seconds and reports "too slow", where a stall should say that nothing came.
  static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* transfer = static_cast<Transfer*>(self);
    transfer->stalled = std::chrono::duration<double>(Clock::now() - transfer->last_byte).count() > transfer->stall_seconds;
    return transfer->stalled ? 1 : 0;
  }
};

HttpClient::HttpClient(HttpOptions options) : options_(options) {
  initialize_curl_once();
  curl_ = curl_easy_init();
  if (curl_ == nullptr) fail("cannot create a libcurl handle");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpClient::perform(const std::string& url, const std::vector<std::string>& headers, Transfer& transfer) {
  CURL* curl = static_cast<CURL*>(curl_);
  transfer.curl = curl;
  curl_slist* header_list = nullptr;
  for (const std::string& line : headers) header_list = curl_slist_append(header_list, line.c_str());
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, header_list);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "probekit/" PROBEKIT_VERSION);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: tools run threads
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_seconds * 1000));
  transfer.stall_seconds = options_.stall_seconds;
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &Transfer::on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, kMaxRedirects);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(header_list);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  if (transfer.failure) std::rethrow_exception(transfer.failure);
  if (transfer.stalled) {
    throw NetworkError(fmt::format("{}: the transfer stalled: no bytes for {:g} s (HF_HUB_DOWNLOAD_TIMEOUT)", url_shown(url),
                                   options_.stall_seconds));
  }
  if (code == CURLE_TOO_MANY_REDIRECTS) {  // not the network's failure: trying again would loop again
    throw std::runtime_error(fmt::format("{}: redirected more than {} times (a redirect loop)", url_shown(url), kMaxRedirects));
  }
  if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && transfer.stopped_by_caller)) {
    std::string reason = error[0] != '\0' ? std::string(error) : std::string(curl_easy_strerror(code));
    throw NetworkError(fmt::format("{}: {}", url_shown(url), reason));
  }
  if (!transfer.started) transfer.begin();  // an empty body never reached on_body
  return transfer.response;
}

HttpResponse HttpClient::head(const std::string& url, const std::vector<std::string>& headers) {
  curl_easy_reset(static_cast<CURL*>(curl_));  // keeps the open connections for the next request
  curl_easy_setopt(static_cast<CURL*>(curl_), CURLOPT_NOBODY, 1L);
  curl_easy_setopt(static_cast<CURL*>(curl_), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(static_cast<CURL*>(curl_), CURLOPT_TIMEOUT, kHeadTimeoutSeconds);
  Transfer transfer;
  return perform(url, headers, transfer);
}

HttpResponse HttpClient::get(const std::string& url, const std::vector<std::string>& headers, const StartCheck& start,
                             const BodySink& sink) {
  curl_easy_reset(static_cast<CURL*>(curl_));
  curl_easy_setopt(static_cast<CURL*>(curl_), CURLOPT_FOLLOWLOCATION, 1L);
  Transfer transfer;
  transfer.start = start ? &start : nullptr;
  transfer.sink = sink ? &sink : nullptr;
  return perform(url, headers, transfer);
}

std::string url_origin(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  size_t host_end = url.find_first_of("/?#", scheme_end + 3);
  std::string origin = url.substr(0, host_end);
  for (char& c : origin) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return origin;
}

std::string url_shown(const std::string& url) {
  std::string shown = url.substr(0, url.find_first_of("?#"));
  const size_t scheme_end = shown.find("://");
  const size_t host = scheme_end == std::string::npos ? 0 : scheme_end + 3;  // an HF_ENDPOINT without its scheme
  const size_t host_end = std::min(shown.find('/', host), shown.size());
  const size_t at = host_end == 0 ? std::string::npos : shown.rfind('@', host_end - 1);
  if (at != std::string::npos && at >= host) shown.erase(host, at + 1 - host);
  return shown;
}

}  // namespace probekit::hub
