// One repository's folder in the Hugging Face cache, in the layout huggingface_hub writes and reads:
//
//   <cache>/models--org--name/refs/<branch or tag>          the commit it points to (no newline)
//   <cache>/models--org--name/snapshots/<commit>/<file>     a relative symlink to ../../blobs/<etag>
//   <cache>/models--org--name/blobs/<etag>                  the bytes; <etag>.incomplete while downloading
//   <cache>/models--org--name/.no_exist/<commit>/<file>     an empty file: the hub said <file> does not exist
//   <cache>/.locks/models--org--name/<etag>.lock            flock'ed while the blob is downloaded
//
// Anything Python wrote here we read, and the other way round.
#pragma once

#include <optional>
#include <string>

namespace probekit::hub {

class RepoCache {
 public:
  RepoCache(std::string cache_dir, std::string repo);

  const std::string& repo() const { return repo_; }
  /// <cache>/models--org--name
  const std::string& folder() const { return folder_; }

  /// The commit a revision stands for: the revision itself when it is a commit hash, else what refs/ records.
  std::optional<std::string> commit_of(const std::string& revision) const;
  /// Records that `revision` points to `commit` (nothing to record when the revision is that commit).
  void write_ref(const std::string& revision, const std::string& commit) const;

  std::string snapshot_dir(const std::string& commit) const;
  std::string blob_path(const std::string& etag) const;
  std::string lock_path(const std::string& etag) const;

  /// True when the snapshot holds `file` (a symlink to a blob that exists, or a plain file).
  bool has_file(const std::string& commit, const std::string& file) const;
  /// True when the hub said earlier that `file` does not exist at `commit`.
  bool known_missing(const std::string& commit, const std::string& file) const;
  /// Remembers that `file` does not exist at `commit`.
  void mark_missing(const std::string& commit, const std::string& file) const;
  /// Points snapshots/<commit>/<file> at blobs/<etag> with a relative symlink, replacing what was there.
  void link(const std::string& commit, const std::string& file, const std::string& etag) const;

 private:
  std::string cache_dir_, repo_, folder_;
};

/// Writes `contents` to `path` through a uniquely named temporary file and a rename, so that processes writing
/// the same file at once never see or leave a partial one.
void write_file_replacing(const std::string& path, const std::string& contents);

}  // namespace probekit::hub
