// What the hub's answers mean, as pure functions over their text so they can be tested and fuzzed without a
// network: response headers (X-Repo-Commit, X-Linked-Etag / ETag, X-Linked-Size / Content-Length, Location,
// X-Error-Code), a 206 answer's Content-Range, and the shard names of model.safetensors.index.json. Anything
// that becomes a file name in the cache (an etag, a commit, a shard name) is checked here, so a hostile server
// cannot write outside the cache.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace probekit::hub {

/// Response headers by lower-cased name (header names are case-insensitive); a repeated header keeps its last value.
using Headers = std::map<std::string, std::string>;

/// Parses header lines ("Name: value", CRLF or LF). A status line ("HTTP/1.1 200 OK") starts a new response, so
/// after redirects only the last response's headers remain.
Headers parse_header_lines(std::string_view block);

/// The value of a header, or "" when absent.
std::string header(const Headers& headers, const std::string& lower_case_name);

/// What a resolve request tells about one file.
struct FileMetadata {
  std::string commit;    // X-Repo-Commit: the commit the revision points to
  std::string etag;      // X-Linked-Etag, else ETag, without W/ and quotes: sha256 for LFS files, git's sha1 otherwise
  int64_t size = 0;      // X-Linked-Size, else Content-Length
  std::string location;  // where the bytes are (a redirect's Location, LFS files); empty: the resolve URL itself
};

/// Reads a successful answer's headers; throws std::runtime_error naming `where` when the commit, the etag or the
/// size is missing or malformed (such an answer did not come from a hub).
FileMetadata read_file_metadata(const Headers& headers, const std::string& where);

/// An etag as the cache names blobs: a weak prefix (W/) and quotes removed.
std::string normalize_etag(std::string_view raw);

/// How a blob's bytes are checked against its etag.
enum class EtagKind { kSha256, kGitSha1, kOther };
EtagKind etag_kind(const std::string& etag);

/// Why the hub refused a request, from its X-Error-Code (GatedRepo, RepoNotFound, RevisionNotFound,
/// EntryNotFound) and X-Error-Message headers.
struct HubError {
  int status = 0;
  std::string code;
  std::string message;
};
HubError read_hub_error(int status, const Headers& headers);

/// An answer's Content-Length; -1 when it has none (a chunked answer). Throws naming `where` when it is malformed.
int64_t content_length(const Headers& headers, const std::string& where);

/// The seconds an answer's Retry-After asks to wait ("120"); -1 when it is absent or an HTTP date, which the
/// hub does not send and which is left to the backoff.
double retry_after_seconds(const Headers& headers);

/// A 206 answer's Content-Range ("bytes 100-199/200"; the total may be "*").
struct ContentRange {
  int64_t first = 0, last = 0;
  int64_t total = -1;  // -1: not given
};
ContentRange parse_content_range(std::string_view value, const std::string& where);

/// The distinct shard files a model.safetensors.index.json lists in its weight_map, sorted. Throws naming `where`
/// unless each is a plain `*.safetensors` file name (no folder, no "..", no control characters).
std::vector<std::string> shard_names(std::string_view index_json, const std::string& where);

}  // namespace probekit::hub
