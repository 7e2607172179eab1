#include "hub/hub_responses.h"

#include <cctype>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/json.h"
#include "common/utf8_text.h"
#include "hub/hub_name.h"

namespace probekit::hub {

namespace {

constexpr size_t kMaxEtagLength = 128;

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_hex(std::string_view text) {
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A non-negative decimal that fits in int64_t, or -1.
int64_t parse_count(std::string_view text) {
  if (text.empty() || text.size() > 18) return -1;  // 18 digits always fit
  int64_t value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// The etag names a file in blobs/: it must be a plain, harmless file name.
bool is_safe_blob_name(const std::string& etag) {
  if (etag.empty() || etag.size() > kMaxEtagLength || etag.front() == '.') return false;
  for (char c : etag) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

void check_shard_name(const std::string& name, const std::string& where) {
  static const std::string kSuffix = ".safetensors";
  bool plain = !name.empty() && name.front() != '.' && name.find('/') == std::string::npos &&
               name.find('\\') == std::string::npos;
  for (char c : name) plain = plain && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  bool safetensors = name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  if (!plain || !safetensors) {
    fail("{}: the shard name {} is not a plain *.safetensors file name", where, dump_json(Json(name)));
  }
}

}  // namespace

Headers parse_header_lines(std::string_view block) {
  Headers headers;
  size_t start = 0;
  while (start < block.size()) {
    size_t end = block.find('\n', start);
    if (end == std::string_view::npos) end = block.size();
    std::string_view line = block.substr(start, end - start);
    start = end + 1;
    if (line.rfind("HTTP/", 0) == 0) {
      headers.clear();
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    headers[lower(trimmed(line.substr(0, colon)))] = std::string(trimmed(line.substr(colon + 1)));
  }
  return headers;
}

std::string header(const Headers& headers, const std::string& lower_case_name) {
  auto found = headers.find(lower_case_name);
  return found == headers.end() ? std::string() : found->second;
}

std::string normalize_etag(std::string_view raw) {
  std::string etag(trimmed(raw));
  if (etag.rfind("W/", 0) == 0) etag.erase(0, 2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

EtagKind etag_kind(const std::string& etag) {
  if (etag.size() == 64 && all_hex(etag)) return EtagKind::kSha256;
  if (etag.size() == 40 && all_hex(etag)) return EtagKind::kGitSha1;
  return EtagKind::kOther;
}

FileMetadata read_file_metadata(const Headers& headers, const std::string& where) {
  FileMetadata metadata;
  metadata.commit = header(headers, "x-repo-commit");
  if (metadata.commit.empty()) {
    fail("{}: the answer has no X-Repo-Commit header: is HF_ENDPOINT a Hugging Face hub (a proxy or firewall "
         "in between)?",
         where);
  }
  if (!is_commit_hash(metadata.commit)) fail("{}: X-Repo-Commit '{}' is not a commit hash", where, metadata.commit);
  std::string linked_etag = header(headers, "x-linked-etag");
  metadata.etag = normalize_etag(linked_etag.empty() ? header(headers, "etag") : linked_etag);
  if (metadata.etag.empty()) fail("{}: the answer has no ETag (nor X-Linked-Etag) header", where);
  if (!is_safe_blob_name(metadata.etag)) fail("{}: the etag '{}' cannot name a cache file", where, metadata.etag);
  std::string linked_size = header(headers, "x-linked-size");
  std::string size = linked_size.empty() ? header(headers, "content-length") : linked_size;
  metadata.size = parse_count(size);
  if (metadata.size < 0) {
    fail("{}: the answer gives no valid size (X-Linked-Size or Content-Length: '{}')", where, size);
  }
  metadata.location = header(headers, "location");
  return metadata;
}

HubError read_hub_error(int status, const Headers& headers) {
  return HubError{status, header(headers, "x-error-code"), header(headers, "x-error-message")};
}

int64_t content_length(const Headers& headers, const std::string& where) {
  std::string text = header(headers, "content-length");
  if (text.empty()) return -1;
  int64_t length = parse_count(text);
  if (length < 0) fail("{}: malformed Content-Length '{}'", where, text);
  return length;
}

double retry_after_seconds(const Headers& headers) {
  return static_cast<double>(parse_count(trimmed(header(headers, "retry-after"))));
}

ContentRange parse_content_range(std::string_view value, const std::string& where) {
  auto malformed = [&] { fail("{}: malformed Content-Range '{}'", where, std::string(value)); };
  const std::string text(trimmed(value));
  if (text.rfind("bytes ", 0) != 0) malformed();
  std::string_view rest = std::string_view(text).substr(6);
  size_t dash = rest.find('-'), slash = rest.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) malformed();
  ContentRange range;
  range.first = parse_count(rest.substr(0, dash));
  range.last = parse_count(rest.substr(dash + 1, slash - dash - 1));
  std::string_view total = rest.substr(slash + 1);
  range.total = total == "*" ? -1 : parse_count(total);
  if (range.first < 0 || range.last < range.first || (total != "*" && range.total <= range.last)) malformed();
  return range;
}

std::vector<std::string> shard_names(std::string_view index_json, const std::string& where) {
  Json index = parse_json(index_json, where);
  if (!index.is_object()) fail("{}: expected a JSON object", where);
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object() || weight_map->empty()) {
    fail("{}: no 'weight_map' object naming the shards", where);
  }
  std::set<std::string> names;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string()) fail("{}: weight_map['{}'] must be a file name", where, it.key());
    std::string name = it->get<std::string>();
    check_shard_name(name, where);
    names.insert(name);
  }
  return {names.begin(), names.end()};
}

}  // namespace probekit::hub
