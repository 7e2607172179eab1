// One file's bytes from the hub into the cache, safely: they go to `<blob>.incomplete`, which a later attempt
// (after a network error, Ctrl-C or kill -9) continues with an HTTP Range request, and become `<blob>` only once
// their size and their hash match the etag (sha256 for LFS files, git's blob sha1 for the others). A truncated
// or corrupt download never becomes a cache entry. The caller holds the blob's lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hub/hub_errors.h"
#include "hub/http_client.h"
#include "hub/hub_settings.h"

namespace probekit::hub {

/// Where a blob's bytes are and what they must be.
struct BlobSource {
  RequestContext request;            // the file, for messages; request.url is where the bytes are fetched from
  std::vector<std::string> headers;  // request headers (the token only where the URL is the hub's own)
  std::string etag;
  int64_t size = 0;
};

/// Downloads `source` into `blob_path` (see above); throws with the model, file, URL and reason when the bytes
/// cannot be had or do not match.
void download_blob(HttpClient& http, const BlobSource& source, const std::string& blob_path, const HubSettings& settings);

}  // namespace probekit::hub
