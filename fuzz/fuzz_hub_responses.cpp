// What a hub (or anything answering at HF_ENDPOINT) sends and the hub client turns into cache paths and bounds:
// response headers (X-Repo-Commit, X-Linked-Etag / ETag, X-Linked-Size, Location, X-Error-Code, Content-Length,
// Retry-After), a 206's Content-Range, model.safetensors.index.json's shard names, and the hub names users type.
// The first byte picks the parser; the rest is its input. Accepted values must keep the promises the cache relies
// on: a commit is 40 hex digits, an etag and a shard name are plain file names (nothing climbs out of blobs/ or
// the snapshot), ranges are ordered, sizes and waits are not negative.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "hub/hub_name.h"
#include "hub/hub_responses.h"

using namespace probekit;

namespace {

bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

void check_headers(std::string_view text) {
  hub::Headers headers = hub::parse_header_lines(text);
  hub::read_hub_error(401, headers);
  int64_t length = -1;
  if (fuzz::completes_or_refuses_cleanly([&] { length = hub::content_length(headers, "fuzz"); }) && length < -1) {
    fuzz::finding("an accepted Content-Length is negative");
  }
  if (hub::retry_after_seconds(headers) < -1) fuzz::finding("a Retry-After wait is negative");
  hub::FileMetadata metadata;
  if (!fuzz::completes_or_refuses_cleanly([&] { metadata = hub::read_file_metadata(headers, "fuzz"); })) return;
  if (!hub::is_commit_hash(metadata.commit)) fuzz::finding("an accepted commit is not 40 hex digits");
  if (!is_plain_file_name(metadata.etag) || metadata.etag.size() > 128) fuzz::finding("an accepted etag is no plain file name");
  if (metadata.size < 0) fuzz::finding("an accepted size is negative");
}

void check_index(std::string_view text) {
  std::vector<std::string> shards;
  if (!fuzz::completes_or_refuses_cleanly([&] { shards = hub::shard_names(text, "model.safetensors.index.json"); })) return;
  if (shards.empty()) fuzz::finding("an accepted index names no shard");
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string& name = shards[i];
    if (!is_plain_file_name(name)) fuzz::finding("an accepted shard name is no plain file name");
    if (name.size() <= 12 || name.compare(name.size() - 12, 12, ".safetensors") != 0) fuzz::finding("a shard is no .safetensors");
    if (i > 0 && !(shards[i - 1] < name)) fuzz::finding("shard names are not sorted and distinct");
  }
}

void check_content_range(std::string_view text) {
  hub::ContentRange range;
  if (!fuzz::completes_or_refuses_cleanly([&] { range = hub::parse_content_range(text, "fuzz"); })) return;
  if (range.first < 0 || range.last < range.first || (range.total != -1 && range.total <= range.last)) {
    fuzz::finding("an accepted Content-Range is out of order");
  }
}

void check_hub_name(std::string_view text) {
  std::optional<hub::HubName> name;
  if (!fuzz::completes_or_refuses_cleanly([&] { name = hub::parse_hub_name(std::string(text)); }) || !name) return;
  std::string folder = hub::repo_folder_name(name->repo);
  if (!is_plain_file_name(folder)) fuzz::finding("a repository's cache folder is no plain file name");
  if (name->revision.empty() || name->revision.front() == '/' || name->revision.find("..") != std::string::npos) {
    fuzz::finding("an accepted revision could name a path outside refs/");
  }
  for (char c : hub::url_quote(name->revision, "")) {
    if (c == '/' || c == '?' || c == '#' || c == ' ') fuzz::finding("a quoted revision keeps a URL delimiter");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: check_headers(text); break;
    case 1: check_index(text); break;
    case 2: check_content_range(text); break;
    default: check_hub_name(text); break;
  }
  return 0;
}
