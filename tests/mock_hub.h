// A stand-in for the Hugging Face hub, started by a test on 127.0.0.1 (a free port) and stopped with it. It
// answers the hub's URL scheme with the hub's headers: GET/HEAD /{org}/{name}/resolve/{revision}/{file} give
// small files directly (ETag: git's blob sha1) and *.safetensors files as LFS files do, a 302 to /lfs/{sha256}
// carrying X-Linked-Etag and X-Linked-Size; every answer carries X-Repo-Commit; refusals carry X-Error-Code
// (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound) as the hub's do. /lfs/ honours Range requests.
// Faults on demand: a connection dropped or stalled halfway through a file, bytes that do not match their etag, a
// slow link, failures that pass (5xx, 429 with Retry-After), small files whose answers lie about their size and
// stream without end.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace probekit::testing {

struct MockRepo {
  std::string commit;                          // 40 hex digits; made from the repository's name when empty
  std::map<std::string, std::string> files;    // name -> bytes
  std::vector<std::string> tags;               // more names of the commit besides "main"
  std::string required_token;                  // non-empty: a gated repository, readable with this token only
};

class MockHub {
 public:
  MockHub();
  ~MockHub();
  MockHub(const MockHub&) = delete;
  MockHub& operator=(const MockHub&) = delete;

  /// http://127.0.0.1:<port>
  std::string endpoint() const;

  /// Serves `repo` as `id` ("org/name"); returns its commit.
  std::string add_repo(const std::string& id, MockRepo repo);
  /// Serves the named files of a fixture folder as `id`; returns its commit.
  std::string add_folder(const std::string& id, const std::string& dir, const std::vector<std::string>& files,
                         const std::string& required_token = "");

  /// The next `times` downloads of `file`'s bytes (an LFS file) stop halfway through, the connection dropped.
  void drop_halfway(const std::string& file, int times);
  /// The next `times` downloads of `file`'s bytes (an LFS file) stall halfway through: no byte more, the
  /// connection kept open until the client leaves.
  void stall_halfway(const std::string& file, int times);
  /// The answers for `file` name `commit` in X-Repo-Commit, whatever commit was asked for.
  void misreport_commit(const std::string& file, const std::string& commit);
  /// `file`'s bytes (an LFS file) are served with one byte changed, so they no longer match the etag.
  void corrupt(const std::string& file);
  /// LFS bytes are sent in 16 kB pieces with this pause after each (0: at full speed).
  void set_pause_per_piece_ms(int milliseconds);
  /// The next `times` requests of `method` ("HEAD", "GET") for `file`, at its resolve URL or at the LFS URL that
  /// redirects to, answer `status` (a hub in trouble), with `Retry-After: <retry_after>` when that is not empty.
  void fail_next(const std::string& method, const std::string& file, int status, int times,
                 const std::string& retry_after = "");

  /// How the answers for a small file lie about its size; each download streams its bytes, then filler without end.
  enum class Oversize {
    kInMetadata,   // the metadata (HEAD) and the download announce kOversize bytes (Content-Length)
    kInDownload,   // the metadata tells the truth, the download announces kOversize bytes
    kUnannounced,  // the metadata tells the truth, the download is chunked (no Content-Length)
    kMetadataOnly,  // the metadata announces kOversize bytes, the download sends the file as it is
  };
  static constexpr int64_t kOversize = 1000000000000;
  void oversize(const std::string& file, Oversize how);

  struct Request {
    std::string method, path, range, authorization;
  };
  std::vector<Request> requests() const;
  /// How many requests of `method` had a path ending with `path_end`.
  int count(const std::string& method, const std::string& path_end) const;

 private:
  struct Blob {
    std::string file, bytes;
  };
  struct Failure {
    int status = 0, times = 0;
    std::string retry_after;
  };
  void log(const httplib::Request& request);
  // Answers the request with a failure set by fail_next, if one is due; the mutex is held.
  bool answer_failure(const httplib::Request& request, const std::string& file, httplib::Response& response);
  void serve_resolve(const httplib::Request& request, httplib::Response& response);
  void serve_lfs(const httplib::Request& request, httplib::Response& response);
  void serve_endless(const httplib::Request& request, httplib::Response& response, const std::string& bytes, Oversize how);
  // Holds a stalled answer open while the client stays and the mock runs (at most a minute).
  void wait_while_connected(httplib::DataSink& sink) const;

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::map<std::string, MockRepo> repos_;
  std::map<std::string, Blob> lfs_;  // sha256 -> the file's name and bytes
  std::map<std::string, int> drops_, stalls_;
  std::map<std::string, Oversize> oversize_;
  std::map<std::string, std::string> misreported_commits_;  // file -> the commit its answers name
  std::map<std::string, bool> corrupt_;
  std::map<std::pair<std::string, std::string>, Failure> failures_;  // (method, file) -> what it answers
  int pause_ms_ = 0;
  std::vector<Request> requests_;
  std::atomic<bool> stopping_{false};  // ends the answers that stream without end or stall
};

/// sha256 of bytes, hex.
std::string sha256_hex(const std::string& bytes);
/// git's blob hash of bytes (what `git hash-object` prints).
std::string git_blob_sha1(const std::string& bytes);

}  // namespace probekit::testing
