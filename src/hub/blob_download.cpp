#include "hub/blob_download.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/files.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "hub/git_sha1.h"
#include "hub/retry.h"

namespace probekit::hub {

namespace {

constexpr size_t kReadChunk = 1 << 20;

// The bytes received so far in <blob>.incomplete and their running hash, kept across attempts so that a resumed
// download is hashed without reading the file again.
class PartialBlob {
 public:
  PartialBlob(std::string path, const BlobSource& source)
      : path_(std::move(path)), kind_(etag_kind(source.etag)), expected_size_(source.size) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd_ < 0) fail("cannot open {}: {}", path_, std::strerror(errno));
    restart_hash();
    std::string chunk(kReadChunk, '\0');
    for (ssize_t n; (n = ::read(fd_, chunk.data(), chunk.size())) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
      hash(std::string_view(chunk.data(), static_cast<size_t>(n)));
      size_ += n;
    }
  }
  ~PartialBlob() {
    if (fd_ >= 0) ::close(fd_);
  }
  PartialBlob(const PartialBlob&) = delete;
  PartialBlob& operator=(const PartialBlob&) = delete;

  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  /// Drops what was received: the next bytes start the file.
  void restart() {
    if (::ftruncate(fd_, 0) != 0) fail("cannot truncate {}: {}", path_, std::strerror(errno));
    size_ = 0;
    restart_hash();
  }

  void append(std::string_view bytes) {
    for (size_t written = 0; written < bytes.size();) {
      ssize_t n = ::write(fd_, bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write {}: {}", path_, std::strerror(n < 0 ? errno : ENOSPC));
      written += static_cast<size_t>(n);
    }
    hash(bytes);
    size_ += static_cast<int64_t>(bytes.size());
  }

  /// The hash the etag is compared with, named ("sha256", "git blob sha1"); empty when the etag is no hash.
  std::pair<std::string, std::string> digest() {
    if (kind_ == EtagKind::kSha256) return {"sha256", sha256_.hex_digest()};
    if (kind_ == EtagKind::kGitSha1) return {"git blob sha1", sha1_.hex_digest()};
    return {"", ""};
  }

  /// Makes the checked bytes the blob: flushed to disk, then renamed into place in one step. The hash covers the
  /// bytes this process wrote; a file longer than them holds another writer's too (on a file system where the
  /// download's flock does not hold, as NFS mounted nolock): it is dropped, never published.
  void publish(const std::string& blob_path) {
    struct stat status {};
    if (::fstat(fd_, &status) != 0) fail("cannot read the size of {}: {}", path_, std::strerror(errno));
    if (status.st_size != size_) {
      const auto found = static_cast<int64_t>(status.st_size);
      discard();
      fail("{} holds {} bytes, of which this download wrote or read {}: another process wrote into it at the same time, though "
           "the download held its lock (does this file system honour flock?); it was deleted and nothing was stored",
           path_, found, size_);
    }
    if (::fsync(fd_) != 0) fail("cannot flush {}: {}", path_, std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    rename_path(path_, blob_path);
  }

  void discard() {
    ::close(fd_);
    fd_ = -1;
    std::remove(path_.c_str());
  }

 private:
  void restart_hash() {
    sha256_ = Sha256();
    sha1_ = Sha1();
    if (kind_ == EtagKind::kGitSha1) sha1_.update(git_blob_header(static_cast<uint64_t>(expected_size_)));
  }
  void hash(std::string_view bytes) {
    if (kind_ == EtagKind::kSha256) sha256_.update(bytes);
    if (kind_ == EtagKind::kGitSha1) sha1_.update(bytes);
  }

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  EtagKind kind_;
  int64_t expected_size_;
  Sha256 sha256_;
  Sha1 sha1_;
};

std::string where(const BlobSource& source) {
  return fmt::format("{}: {}: {}", source.request.model, source.request.file, url_shown(source.request.url));
}

// Checks how a 2xx answer continues the partial file: a 206 must start at its end; a 200 (the server ignored the
// Range) starts the file again. Either must announce the size the hub's metadata gave, or nothing is read.
void continue_from(const HttpResponse& response, PartialBlob& partial, const BlobSource& source) {
  if (response.status == 206) {
    ContentRange range = parse_content_range(header(response.headers, "content-range"), where(source));
    if (range.first != partial.size()) {
      fail("{}: asked for the bytes from {} on, the server sent them from {}", where(source), partial.size(), range.first);
    }
    if (range.total >= 0 && range.total != source.size) {
      fail("{}: the download's Content-Range gives the file {} bytes, the hub's metadata {}; nothing was read",
           where(source), range.total, source.size);
    }
  } else if (partial.size() > 0) {
    spdlog::debug("{}: the server ignored the Range request; downloading from the start", where(source));
    partial.restart();
  }
  int64_t announced = content_length(response.headers, where(source));
  if (announced >= 0 && announced != source.size - partial.size()) {
    fail("{}: the download announces {} bytes (Content-Length) from byte {} on, the hub's metadata {} bytes in all; "
         "nothing was read",
         where(source), announced, partial.size(), source.size);
  }
}

// One GET of the bytes after the partial file's end. Throws NetworkError when another try may succeed.
void fetch_rest(HttpClient& http, const BlobSource& source, PartialBlob& partial, ProgressBar& bar,
                const HubSettings& settings) {
  if (partial.size() > source.size) partial.restart();
  if (partial.size() == source.size) return;
  std::vector<std::string> headers = source.headers;
  if (partial.size() > 0) headers.push_back(fmt::format("Range: bytes={}-", partial.size()));
  auto start = [&](const HttpResponse& response) {
    continue_from(response, partial, source);
    return true;
  };
  auto sink = [&](std::string_view bytes) {
    if (partial.size() + static_cast<int64_t>(bytes.size()) > source.size) {
      fail("{}: the server sent more than the {} bytes the hub's metadata announced ({} bytes so far); stopped there",
           where(source), source.size, partial.size() + static_cast<int64_t>(bytes.size()));
    }
    partial.append(bytes);
    bar.update(partial.size());
    return true;
  };
  HttpResponse response = http.get(source.request.url, headers, start, sink);
  if (response.status == 416) {
    int64_t offset = partial.size();
    partial.restart();
    throw NetworkError(fmt::format("{}: the server cannot continue from byte {}; starting again",
                                   url_shown(source.request.url), offset));
  }
  if (is_transient_status(response.status)) throw transient_failure(source.request, response, settings);
  if (response.status < 200 || response.status >= 300) fail("{}", explain_http_failure(source.request, response, settings));
  if (partial.size() < source.size) {
    throw NetworkError(fmt::format("{}: the answer ended after {} of {} bytes", url_shown(source.request.url),
                                   partial.size(), source.size));
  }
}

// Fetches until the partial file holds `source.size` bytes, trying again after network errors (retry.h) with
// Range requests.
void receive_all(HttpClient& http, const BlobSource& source, PartialBlob& partial, const HubSettings& settings) {
  ProgressBar bar(source.request.file, source.size, "bytes");
  bar.update(partial.size());
  try {
    retry_network_errors(
        settings, fmt::format("{}: {}", source.request.model, source.request.file),
        [&] { fetch_rest(http, source, partial, bar, settings); },
        [&] { return fmt::format("continuing from byte {}", partial.size()); });
  } catch (const NetworkError& e) {
    fail("{}: {}: {} (gave up after {} attempts; the {} bytes received are kept in {}, and the next run continues "
         "from there)",
         source.request.model, source.request.file, e.what(), settings.max_attempts, partial.size(), partial.path());
  }
  bar.finish();
}

}  // namespace

void download_blob(HttpClient& http, const BlobSource& source, const std::string& blob_path, const HubSettings& settings) {
  make_directories(parent_directory(blob_path));
  PartialBlob partial(blob_path + ".incomplete", source);
  bool resumed = partial.size() > 0;
  if (resumed) spdlog::info("{}: continuing an interrupted download from byte {}", source.request.file, partial.size());
  for (;;) {
    receive_all(http, source, partial, settings);
    auto [hash_name, digest] = partial.digest();
    if (digest == source.etag || hash_name.empty()) break;
    if (resumed) {
      // The bytes kept from an earlier run may be what is wrong: one fresh download settles it.
      spdlog::warn("{}: the resumed download does not match its etag; downloading it again from the start", where(source));
      partial.restart();
      resumed = false;
      continue;
    }
    partial.discard();
    fail("{}: the {} bytes received do not match the etag: their {} is {}, the hub announced {}; nothing was stored",
         where(source), source.size, hash_name, digest, source.etag);
  }
  partial.publish(blob_path);
}

}  // namespace probekit::hub
