#include "hub/hub_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/files.h"
#include "hub/hub_name.h"

namespace probekit::hub {

namespace {

// The path from a snapshot file to its blob: one "../" per folder between the repository folder and the file
// (huggingface_hub's os.path.relpath), so the cache stays valid when moved.
std::string relative_blob_target(const std::string& file, const std::string& etag) {
  std::string up = "../../";
  for (char c : file) {
    if (c == '/') up += "../";
  }
  return up + "blobs/" + etag;
}

// A ref holds one commit hash; anything much longer is not one, and is not read whole.
constexpr uint64_t kMaxRefBytes = 4096;

std::string read_trimmed(const std::string& path) {
  std::string text = read_file(path, kMaxRefBytes);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

RepoCache::RepoCache(std::string cache_dir, std::string repo)
    : cache_dir_(std::move(cache_dir)), repo_(std::move(repo)), folder_(cache_dir_ + "/" + repo_folder_name(repo_)) {}

std::optional<std::string> RepoCache::commit_of(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  std::string ref = folder_ + "/refs/" + revision;
  if (!is_regular_file(ref)) return std::nullopt;
  std::string commit = read_trimmed(ref);
  if (!is_commit_hash(commit)) {
    // A damaged ref is as good as none: a download writes it again.
    spdlog::warn("{}: expected a commit hash, found '{}'; ignoring it", ref, commit);
    return std::nullopt;
  }
  return commit;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  std::string ref = folder_ + "/refs/" + revision;
  if (is_regular_file(ref) && read_trimmed(ref) == commit) return;
  make_directories(parent_directory(ref));
  write_file_replacing(ref, commit);  // no newline: huggingface_hub reads the file as it is
}

std::string RepoCache::snapshot_dir(const std::string& commit) const { return folder_ + "/snapshots/" + commit; }

std::string RepoCache::blob_path(const std::string& etag) const { return folder_ + "/blobs/" + etag; }

std::string RepoCache::lock_path(const std::string& etag) const {
  return cache_dir_ + "/.locks/" + repo_folder_name(repo_) + "/" + etag + ".lock";
}

bool RepoCache::has_file(const std::string& commit, const std::string& file) const {
  return is_regular_file(snapshot_dir(commit) + "/" + file);
}

bool RepoCache::known_missing(const std::string& commit, const std::string& file) const {
  return path_exists(folder_ + "/.no_exist/" + commit + "/" + file);
}

void RepoCache::mark_missing(const std::string& commit, const std::string& file) const {
  std::string marker = folder_ + "/.no_exist/" + commit + "/" + file;
  make_directories(parent_directory(marker));
  int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0) ::close(fd);  // only a hint for later runs: failing to write it changes nothing now
}

void RepoCache::link(const std::string& commit, const std::string& file, const std::string& etag) const {
  std::string pointer = snapshot_dir(commit) + "/" + file;
  std::string target = relative_blob_target(file, etag);
  make_directories(parent_directory(pointer));
  if (::symlink(target.c_str(), pointer.c_str()) == 0) return;
  if (errno != EEXIST) fail("cannot create the symlink {} -> {}: {}", pointer, target, std::strerror(errno));
  // Another process may have linked it already; anything else there (a stale link, a copy) is replaced at once.
  char existing[4096];
  ssize_t length = ::readlink(pointer.c_str(), existing, sizeof(existing));
  if (length >= 0 && std::string(existing, static_cast<size_t>(length)) == target) return;
  std::string temporary = pointer + ".link-" + std::to_string(::getpid());
  std::remove(temporary.c_str());
  if (::symlink(target.c_str(), temporary.c_str()) != 0) {
    fail("cannot create the symlink {} -> {}: {}", temporary, target, std::strerror(errno));
  }
  rename_path(temporary, pointer);
}

void write_file_replacing(const std::string& path, const std::string& contents) {
  std::string pattern = path + ".tmp-XXXXXX";
  int fd = ::mkstemp(pattern.data());
  if (fd < 0) fail("cannot write {}: {}", path, std::strerror(errno));
  ::fchmod(fd, 0644);
  bool written = ::write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  int err = errno;
  if (::close(fd) != 0 || !written) {
    std::remove(pattern.c_str());
    fail("cannot write {}: {}", pattern, std::strerror(written ? errno : err));
  }
  if (std::rename(pattern.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(pattern.c_str());
    fail("cannot rename {} to {}: {}", pattern, path, std::strerror(err));
  }
}

}  // namespace probekit::hub
