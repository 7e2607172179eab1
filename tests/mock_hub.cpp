#include "mock_hub.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>

#include "common/files.h"
#include "common/sha256.h"
#include "hub/git_sha1.h"

namespace probekit::testing {

namespace {

constexpr size_t kPiece = 16 * 1024;

bool is_lfs_file(const std::string& name) {
  return name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

void refuse(httplib::Response& response, int status, const std::string& code, const std::string& message) {
  response.status = status;
  response.set_header("X-Error-Code", code);
  response.set_header("X-Error-Message", message);
  response.set_content(message, "text/plain");
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes);
  return hash.hex_digest();
}

std::string git_blob_sha1(const std::string& bytes) {
  hub::Sha1 hash;
  hash.update(hub::git_blob_header(bytes.size()));
  hash.update(bytes);
  return hash.hex_digest();
}

MockHub::MockHub() {
  server_.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))",
              [this](const httplib::Request& request, httplib::Response& response) { serve_resolve(request, response); });
  server_.Get(R"(/lfs/([0-9a-f]{64}))",
              [this](const httplib::Request& request, httplib::Response& response) { serve_lfs(request, response); });
  port_ = server_.bind_to_any_port("127.0.0.1");
  REQUIRE(port_ > 0);
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

MockHub::~MockHub() {
  stopping_ = true;
  server_.stop();
  thread_.join();
}

std::string MockHub::endpoint() const { return fmt::format("http://127.0.0.1:{}", port_); }

std::string MockHub::add_repo(const std::string& id, MockRepo repo) {
  if (repo.commit.empty()) repo.commit = git_blob_sha1("commit of " + id);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, bytes] : repo.files) {
    if (is_lfs_file(name)) lfs_[sha256_hex(bytes)] = Blob{name, bytes};
  }
  std::string commit = repo.commit;
  repos_[id] = std::move(repo);
  return commit;
}

std::string MockHub::add_folder(const std::string& id, const std::string& dir, const std::vector<std::string>& files,
                                const std::string& required_token) {
  MockRepo repo;
  for (const std::string& file : files) repo.files[file] = read_file(dir + "/" + file);
  repo.required_token = required_token;
  return add_repo(id, std::move(repo));
}

void MockHub::drop_halfway(const std::string& file, int times) {
  std::lock_guard<std::mutex> lock(mutex_);
  drops_[file] = times;
}

void MockHub::stall_halfway(const std::string& file, int times) {
  std::lock_guard<std::mutex> lock(mutex_);
  stalls_[file] = times;
}

void MockHub::oversize(const std::string& file, Oversize how) {
  std::lock_guard<std::mutex> lock(mutex_);
  oversize_[file] = how;
}

void MockHub::misreport_commit(const std::string& file, const std::string& commit) {
  std::lock_guard<std::mutex> lock(mutex_);
  misreported_commits_[file] = commit;
}

void MockHub::corrupt(const std::string& file) {
  std::lock_guard<std::mutex> lock(mutex_);
  corrupt_[file] = true;
}

void MockHub::set_pause_per_piece_ms(int milliseconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  pause_ms_ = milliseconds;
}

void MockHub::fail_next(const std::string& method, const std::string& file, int status, int times,
                        const std::string& retry_after) {
  std::lock_guard<std::mutex> lock(mutex_);
  failures_[{method, file}] = Failure{status, times, retry_after};
}

bool MockHub::answer_failure(const httplib::Request& request, const std::string& file, httplib::Response& response) {
  auto failure = failures_.find({request.method, file});
  if (failure == failures_.end() || failure->second.times == 0) return false;
  --failure->second.times;
  if (!failure->second.retry_after.empty()) response.set_header("Retry-After", failure->second.retry_after);
  refuse(response, failure->second.status, "", "the hub is in trouble");
  return true;
}

std::vector<MockHub::Request> MockHub::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

int MockHub::count(const std::string& method, const std::string& path_end) const {
  int n = 0;
  for (const Request& r : requests()) {
    bool ends = r.path.size() >= path_end.size() && r.path.compare(r.path.size() - path_end.size(), path_end.size(), path_end) == 0;
    n += r.method == method && ends ? 1 : 0;
  }
  return n;
}

void MockHub::log(const httplib::Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_.push_back(Request{request.method, request.path, request.get_header_value("Range"),
                              request.get_header_value("Authorization")});
}

void MockHub::serve_resolve(const httplib::Request& request, httplib::Response& response) {
  log(request);
  std::string id = request.matches[1].str() + "/" + request.matches[2].str();
  std::string revision = request.matches[3].str(), file = request.matches[4].str();
  std::lock_guard<std::mutex> lock(mutex_);
  if (answer_failure(request, file, response)) return;
  auto repo = repos_.find(id);
  std::string authorization = request.get_header_value("Authorization");
  // As the hub: without a token a missing repository looks like a private one (401), with a token it is a 404.
  if (repo == repos_.end()) return refuse(response, authorization.empty() ? 401 : 404, "RepoNotFound", "Repository not found");
  if (!repo->second.required_token.empty() && authorization != "Bearer " + repo->second.required_token) {
    return refuse(response, authorization.empty() ? 401 : 403, "GatedRepo",
                  "Access to model " + id + " is restricted. You must have access to it and be authenticated to access it.");
  }
  const MockRepo& r = repo->second;
  bool known_revision = revision == "main" || revision == r.commit;
  for (const std::string& tag : r.tags) known_revision = known_revision || tag == revision;
  if (!known_revision) return refuse(response, 404, "RevisionNotFound", "Invalid rev id: " + revision);
  auto misreported = misreported_commits_.find(file);
  response.set_header("X-Repo-Commit", misreported == misreported_commits_.end() ? r.commit : misreported->second);
  auto found = r.files.find(file);
  if (found == r.files.end()) return refuse(response, 404, "EntryNotFound", "Entry not found");
  if (is_lfs_file(file)) {
    std::string sha = sha256_hex(found->second);
    response.set_header("X-Linked-Etag", "\"" + sha + "\"");
    response.set_header("X-Linked-Size", std::to_string(found->second.size()));
    response.set_header("ETag", "\"" + git_blob_sha1("version https://git-lfs.github.com/spec/v1\noid sha256:" + sha) + "\"");
    // As the hub redirects LFS files to a CDN on another host: "localhost" is another name for this server, so
    // huggingface_hub reads the file's metadata from this answer instead of following it.
    response.set_redirect(fmt::format("http://localhost:{}/lfs/{}", port_, sha), 302);
    return;
  }
  response.set_header("ETag", "\"" + git_blob_sha1(found->second) + "\"");
  auto lie = oversize_.find(file);
  if (lie != oversize_.end()) return serve_endless(request, response, found->second, lie->second);
  response.set_content(found->second, "application/octet-stream");
}

void MockHub::serve_endless(const httplib::Request& request, httplib::Response& response, const std::string& bytes,
                            Oversize how) {
  const bool lying_head = how == Oversize::kInMetadata || how == Oversize::kMetadataOnly;
  if (request.method == "HEAD" && !lying_head) return response.set_content(bytes, "application/octet-stream");
  if (request.method != "HEAD" && how == Oversize::kMetadataOnly) return response.set_content(bytes, "application/octet-stream");
  auto write_piece = [bytes, this](size_t offset, httplib::DataSink& sink) {
    std::string piece = offset < bytes.size() ? bytes.substr(offset, kPiece) : std::string(kPiece, ' ');
    return !stopping_ && sink.write(piece.data(), piece.size());
  };
  if (how == Oversize::kUnannounced) {
    response.set_chunked_content_provider("application/octet-stream", [write_piece](size_t offset, httplib::DataSink& sink) {
      return write_piece(offset, sink);
    });
    return;
  }
  response.set_content_provider(static_cast<size_t>(kOversize), "application/octet-stream",
                                [write_piece](size_t offset, size_t, httplib::DataSink& sink) { return write_piece(offset, sink); });
}

void MockHub::wait_while_connected(httplib::DataSink& sink) const {
  auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!stopping_ && sink.is_writable() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void MockHub::serve_lfs(const httplib::Request& request, httplib::Response& response) {
  log(request);
  std::lock_guard<std::mutex> lock(mutex_);
  auto blob = lfs_.find(request.matches[1].str());
  if (blob == lfs_.end()) return refuse(response, 404, "", "no such blob");
  if (answer_failure(request, blob->second.file, response)) return;
  std::string bytes = blob->second.bytes;
  if (corrupt_[blob->second.file]) bytes[bytes.size() / 2] ^= 0x5a;
  bool drop = drops_[blob->second.file] > 0, stall = !drop && stalls_[blob->second.file] > 0;
  if (drop) --drops_[blob->second.file];
  if (stall) --stalls_[blob->second.file];
  int pause_ms = pause_ms_;
  // httplib cuts the Range out of what the provider serves (and answers 206); a provider returning false
  // drops the connection.
  response.set_content_provider(bytes.size(), "application/octet-stream",
                                [this, bytes, drop, stall, pause_ms](size_t offset, size_t length, httplib::DataSink& sink) {
                                  size_t end = drop || stall ? offset + length / 2 : offset + length;
                                  for (size_t at = offset; at < end; at += kPiece) {
                                    if (!sink.write(bytes.data() + at, std::min(kPiece, end - at))) return false;
                                    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
                                  }
                                  if (stall) wait_while_connected(sink);
                                  return !drop && !stall;
                                });
}

}  // namespace probekit::testing
