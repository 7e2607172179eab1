// The hub client against a mock hub on 127.0.0.1 (tests/mock_hub.h): downloads into an empty cache in exactly
// huggingface_hub's layout, offline use of the cache, resuming after a dropped connection (in the same run and in
// the next one), corrupt bytes that never become a cache entry, gated, missing and private repositories told
// apart, two downloads of one model at once, and a hostile or troubled hub: failures that pass (tried again with
// backoff and Retry-After), stalls, and sizes past the metadata's or a JSON file's bound (test_hub_answers.cpp: what
// else a hub or a mirror may answer).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/files.h"
#include "common/sha256.h"
#include "hub/resolve.h"
#include "hub_case.h"
#include "mock_hub.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

std::string link_target(const std::string& path) {
  char target[4096];
  ssize_t length = ::readlink(path.c_str(), target, sizeof(target));
  return length < 0 ? std::string("(not a symlink)") : std::string(target, static_cast<size_t>(length));
}

// The etag the hub names a file's blob by, computed by other programs: sha256sum for LFS files, git otherwise.
std::string expected_etag(const std::string& path) {
  bool lfs = path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  testing::CommandResult r = testing::run_command((lfs ? "sha256sum " : "git hash-object ") + path);
  REQUIRE(r.exit_code == 0);
  return r.output.substr(0, lfs ? 64 : 40);
}

// Checks the cache holds `files` of `dir` exactly as huggingface_hub lays them out.
void check_cache_layout(const std::string& cache, const std::string& repo_folder, const std::string& commit,
                        const std::string& dir, const std::vector<std::string>& files) {
  std::string folder = cache + "/" + repo_folder;
  CHECK(read_file(folder + "/refs/main") == commit);  // no newline: Python reads the file as it is
  for (const std::string& file : files) {
    std::string etag = expected_etag(dir + "/" + file);
    std::string pointer = folder + "/snapshots/" + commit + "/" + file;
    CHECK_MESSAGE(link_target(pointer) == "../../blobs/" + etag, file);
    CHECK_MESSAGE(read_file(folder + "/blobs/" + etag) == read_file(dir + "/" + file), file);
    CHECK_MESSAGE(is_regular_file(cache + "/.locks/" + repo_folder + "/" + etag + ".lock"), file);
  }
  for (const std::string& blob : list_directory(folder + "/blobs")) {
    CHECK_MESSAGE(blob.find(".incomplete") == std::string::npos, blob);
  }
}

}  // namespace

TEST_CASE_FIXTURE(HubCase, "hub download into an empty cache: huggingface_hub's layout, then the cache alone, offline too") {
  std::string commit = mock.add_repo("probekit-test/qwen3-sharded", fixture_repo(kShardedModel, kShardedFiles));
  const mode_t umask_before = ::umask(022);  // the usual umask, in a cache shared by a group
  hub::ResolvedModel model = hub::resolve_model("probekit-test/qwen3-sharded", settings);
  ::umask(umask_before);
  std::string folder = settings.cache_dir + "/models--probekit-test--qwen3-sharded";
  CHECK(model.dir == folder + "/snapshots/" + commit);
  CHECK(model.name == "probekit-test/qwen3-sharded");
  CHECK(model.revision == commit);
  check_cache_layout(settings.cache_dir, "models--probekit-test--qwen3-sharded", commit, kShardedModel, kShardedFiles);
  // Each user of a cache shared by a group can take its locks: made 0664 whatever the umask, as huggingface_hub's
  // filelock makes them (regression: 0644 under umask 022 locked the group out).
  const std::string locks = settings.cache_dir + "/.locks/models--probekit-test--qwen3-sharded";
  for (const std::string& lock : list_directory(locks)) {
    struct stat status {};
    REQUIRE(::stat((locks + "/" + lock).c_str(), &status) == 0);
    CHECK_MESSAGE((status.st_mode & 0777) == 0664, lock);
  }
  // Optional files the hub lacks are remembered as huggingface_hub does; the single-file weights too.
  for (const char* absent : {"generation_config.json", "special_tokens_map.json", "chat_template.jinja", "model.safetensors"}) {
    CHECK_MESSAGE(is_regular_file(folder + "/.no_exist/" + commit + "/" + absent), absent);
  }
  // Only what a run reads: never a pickle, code or the README.
  for (const char* never : {"pytorch_model.bin", "modeling_custom.py", "README.md"}) {
    CHECK_MESSAGE(mock.count("HEAD", never) + mock.count("GET", never) == 0, never);
  }
  // Every file's bytes come from the commit the first answer named, config.json's too (regression: from the branch,
  // which may have moved between its HEAD and its GET).
  for (const auto& r : mock.requests()) {
    if (r.method == "GET" && r.path.find("/resolve/") != std::string::npos) CHECK_CONTAINS(r.path, "/resolve/" + commit + "/");
  }
  CHECK(tokenizer::Tokenizer::from_file(model.dir).encode("hello", false).size() > 0);

  // A second run, online or offline, uses the cache without a request.
  size_t requests = mock.requests().size();
  CHECK(hub::resolve_model("probekit-test/qwen3-sharded", settings).dir == model.dir);
  settings.offline = true;
  settings.endpoint = "http://127.0.0.1:1";  // nothing listens there
  CHECK(hub::resolve_model("probekit-test/qwen3-sharded", settings).dir == model.dir);
  CHECK(hub::resolve_model("probekit-test/qwen3-sharded@" + commit, settings).dir == model.dir);
  CHECK(mock.requests().size() == requests);
}

TEST_CASE_FIXTURE(HubCase, "hub download by tag and by commit; a snapshot missing a file is completed from blobs already there") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  hub::ResolvedModel tagged = hub::resolve_model("probekit-test/gemma@v1.0", settings);
  CHECK(tagged.name == "probekit-test/gemma@v1.0");
  CHECK(tagged.revision == commit);
  std::string folder = settings.cache_dir + "/models--probekit-test--gemma";
  CHECK(read_file(folder + "/refs/v1.0") == commit);
  CHECK_FALSE(path_exists(folder + "/refs/main"));
  CHECK(mock.count("HEAD", "model.safetensors.index.json") == 0);  // a single file needs no index
  // The chat template, which recent transformers save in a file of its own, comes with the model.
  CHECK(read_file(tagged.dir + "/chat_template.jinja") == read_file(kGemmaModel + "/chat_template.jinja"));

  hub::ResolvedModel pinned = hub::resolve_model("probekit-test/gemma@" + commit, settings);
  CHECK(pinned.dir == tagged.dir);

  // Lose a snapshot link: the next run links the blob again without downloading it.
  std::remove((tagged.dir + "/tokenizer.json").c_str());
  hub::HubSettings offline = settings;
  offline.offline = true;
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma@v1.0", offline),
                    contains("is incomplete in the cache: " + tagged.dir + " lacks tokenizer.json"));
  int tokenizer_gets = mock.count("GET", "tokenizer.json");
  CHECK(hub::resolve_model("probekit-test/gemma@v1.0", settings).dir == tagged.dir);
  CHECK(mock.count("GET", "tokenizer.json") == tokenizer_gets);
  CHECK(is_regular_file(tagged.dir + "/tokenizer.json"));
}

TEST_CASE_FIXTURE(HubCase, "hub offline mode and an unreachable hub: clear errors, no request") {
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  settings.offline = true;
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                    contains("probekit-test/gemma is not in the cache (" + settings.cache_dir +
                                      "/models--probekit-test--gemma has no refs/main), and offline mode is on "
                                      "(HF_HUB_OFFLINE=1 or --offline)"));
  CHECK(mock.requests().empty());

  settings.offline = false;
  settings.endpoint = "http://127.0.0.1:1";
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                    contains("probekit-test/gemma: config.json: cannot reach the hub: "
                                      "http://127.0.0.1:1/probekit-test/gemma/resolve/main/config.json"));
}

TEST_CASE_FIXTURE(HubCase, "hub download resumes after a dropped connection with a Range request and gives the same bytes") {
  std::string commit = mock.add_repo("probekit-test/qwen3-sharded", fixture_repo(kShardedModel, kShardedFiles));
  std::string shard = read_file(kShardedModel + "/" + kShard2);
  std::string lfs_path = "/lfs/" + testing::sha256_hex(shard);

  SUBCASE("within one run") {
    mock.drop_halfway(kShard2, 1);
    hub::ResolvedModel model = hub::resolve_model("probekit-test/qwen3-sharded", settings);
    CHECK(read_file(model.dir + "/" + kShard2) == shard);
    std::vector<std::string> ranges;
    for (const auto& r : mock.requests()) {
      if (r.path == lfs_path) ranges.push_back(r.range);
    }
    REQUIRE(ranges.size() == 2);
    CHECK(ranges[0].empty());
    CHECK(ranges[1] == fmt::format("bytes={}-", shard.size() / 2));
  }
  SUBCASE("in the next run, from the .incomplete file the first one left") {
    mock.drop_halfway(kShard2, 1);
    settings.max_attempts = 1;
    std::string partial = settings.cache_dir + "/models--probekit-test--qwen3-sharded/blobs/" +
                          testing::sha256_hex(shard) + ".incomplete";
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/qwen3-sharded", settings),
                      contains("the next run continues from there"));
    REQUIRE(is_regular_file(partial));
    CHECK(file_size(partial) == shard.size() / 2);
    CHECK_FALSE(path_exists(settings.cache_dir + "/models--probekit-test--qwen3-sharded/snapshots/" + commit + "/" + kShard2));
    hub::ResolvedModel model = hub::resolve_model("probekit-test/qwen3-sharded", settings);
    CHECK(read_file(model.dir + "/" + kShard2) == shard);
    std::string last_range;
    for (const auto& r : mock.requests()) {
      if (r.path == lfs_path) last_range = r.range;
    }
    CHECK(last_range == fmt::format("bytes={}-", shard.size() / 2));
    CHECK_FALSE(path_exists(partial));
    check_cache_layout(settings.cache_dir, "models--probekit-test--qwen3-sharded", commit, kShardedModel, kShardedFiles);
  }
}

TEST_CASE_FIXTURE(HubCase, "hub download: bytes that do not match the etag never become a cache entry") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  mock.corrupt("model.safetensors");
  std::string sha = testing::sha256_hex(read_file(kGemmaModel + "/model.safetensors"));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                    contains("do not match the etag: their sha256 is "));
  std::string folder = settings.cache_dir + "/models--probekit-test--gemma";
  CHECK_FALSE(path_exists(folder + "/blobs/" + sha));
  CHECK_FALSE(path_exists(folder + "/blobs/" + sha + ".incomplete"));
  CHECK_FALSE(path_exists(folder + "/snapshots/" + commit + "/model.safetensors"));
  settings.offline = true;
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings), contains("lacks model.safetensors"));
}

TEST_CASE_FIXTURE(HubCase, "hub errors: a gated model needs a token; a missing or private one is never called gated") {
  MockRepo gated = fixture_repo(kGemmaModel, kGemmaFiles);
  gated.required_token = "hf_granted";
  mock.add_repo("probekit-test/gated", gated);
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  std::string url = mock.endpoint() + "/probekit-test/gated/resolve/main/config.json";

  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gated", settings),
                    contains("probekit-test/gated: config.json: HTTP 401 from " + url +
                                      ": probekit-test/gated is a gated model: ask for access on " + mock.endpoint() +
                                      "/probekit-test/gated"));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gated", settings), contains("set HF_TOKEN=hf_..."));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gated", settings), contains("no token was sent"));
  settings.token = "hf_other";
  settings.token_source = "HF_TOKEN";
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gated", settings),
                    contains("HTTP 403 from " + url + ": probekit-test/gated is a gated model"));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gated", settings), contains("the token from HF_TOKEN was sent"));
  settings.token = "hf_granted";
  size_t before = mock.requests().size();
  CHECK(is_regular_file(hub::resolve_model("probekit-test/gated", settings).dir + "/model.safetensors"));
  // The token goes with every request to the hub, and never to the host LFS files are redirected to (as
  // huggingface_hub: a CDN's URL is signed), here the same server called "localhost".
  std::vector<MockHub::Request> requests = mock.requests();
  int to_hub = 0, to_cdn = 0;
  for (size_t i = before; i < requests.size(); ++i) {
    bool cdn = requests[i].path.rfind("/lfs/", 0) == 0;
    CHECK_MESSAGE(requests[i].authorization == (cdn ? "" : "Bearer hf_granted"), requests[i].method, " ", requests[i].path);
    (cdn ? to_cdn : to_hub) += 1;
  }
  CHECK(to_hub > 0);
  CHECK(to_cdn == 1);

  // 401 is also what a missing repository answers without a token.
  settings.token.clear();
  std::string missing = hub::resolve_model("probekit-test/gemma", settings).dir;  // warms nothing: a separate repo
  CHECK(is_directory(missing));
  try {
    hub::resolve_model("probekit-test/missing", settings);
    FAIL("a missing repository resolved");
  } catch (const std::exception& e) {
    std::string message = e.what();
    CHECK_CONTAINS(message, "probekit-test/missing: config.json: HTTP 401 from " + mock.endpoint() +
                                "/probekit-test/missing/resolve/main/config.json: probekit-test/missing does not "
                                "exist, or it is private and no token was sent");
    CHECK(message.find("gated") == std::string::npos);
  }
  settings.token = "hf_granted";
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/missing", settings),
                    contains("HTTP 404 from " + mock.endpoint() + "/probekit-test/missing/resolve/main/"
                                      "config.json: probekit-test/missing does not exist, or the token from"));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma@nope", settings),
                    contains("probekit-test/gemma: config.json: HTTP 404 from " + mock.endpoint() +
                                      "/probekit-test/gemma/resolve/nope/config.json: probekit-test/gemma has no "
                                      "branch, tag or commit 'nope'"));
  MockRepo no_tokenizer = fixture_repo(kGemmaModel, {"config.json", "model.safetensors"});
  std::string commit = mock.add_repo("probekit-test/no-tokenizer", no_tokenizer);
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/no-tokenizer", settings),
                    contains("probekit-test/no-tokenizer: tokenizer.json: HTTP 404 from " + mock.endpoint() +
                                      "/probekit-test/no-tokenizer/resolve/" + commit +
                                      "/tokenizer.json: probekit-test/no-tokenizer has no file tokenizer.json at "
                                      "revision " + commit));
  // The host LFS files are served from refuses: not the repository's or the token's fault (it is not sent there).
  mock.add_repo("probekit-test/cdn", fixture_repo(kGemmaModel, kGemmaFiles));
  mock.fail_next("GET", "model.safetensors", 403, 2);
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/cdn", settings),
                    contains("HTTP 403 from http://localhost:" + mock.endpoint().substr(mock.endpoint().rfind(':') + 1) + "/lfs/"));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/cdn", settings),
                    contains(": the file's host refused the download, after the hub had described the file"));
}

TEST_CASE_FIXTURE(HubCase, "hub names and local folders: a folder is used without reading the hub's settings; a missing one is said to be looked for both ways") {
  ScopedEnvironment env;
  env.set("HF_ENDPOINT", "hf-mirror.com");  // refused when read: a local folder never reads it
  CHECK(hub::resolve_model(kGemmaModel).dir.size() > 0);
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  CHECK_THROWS_WITH(hub::resolve_model("runs/mymodel", settings),
                    contains("no folder runs/mymodel here, so it was read as a hub name: runs/mymodel: config.json: "
                             "HTTP 401 from "));
}

TEST_CASE_FIXTURE(HubCase, "hub download: bytes another process appended to the same .incomplete (a lock that did not hold) are never published") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  mock.set_pause_per_piece_ms(5);
  const std::string sha = testing::sha256_hex(read_file(kGemmaModel + "/model.safetensors"));
  const std::string blob = settings.cache_dir + "/models--probekit-test--gemma/blobs/" + sha;
  std::string error;
  std::thread download([&] {
    try { hub::resolve_model("probekit-test/gemma", settings); } catch (const std::exception& e) { error = e.what(); }
  });
  // Another writer, as a process on a file system where flock is a no-op would be (waited for 10 s at most).
  for (int ms = 0; ms < 10000 && (!is_regular_file(blob + ".incomplete") || file_size(blob + ".incomplete") == 0); ++ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (FILE* other = std::fopen((blob + ".incomplete").c_str(), "ab"); other != nullptr) {
    std::fputs("bytes of another download", other);
    std::fclose(other);
  }
  download.join();
  CHECK_CONTAINS(error, "another process wrote into it at the same time, though the download held its lock");
  CHECK_FALSE(path_exists(blob));
  CHECK_FALSE(path_exists(blob + ".incomplete"));
  CHECK_FALSE(path_exists(settings.cache_dir + "/models--probekit-test--gemma/snapshots/" + commit + "/model.safetensors"));
}

TEST_CASE_FIXTURE(HubCase, "hub download: two downloads of one model at once share the cache, each blob fetched once") {
  std::string commit = mock.add_repo("probekit-test/qwen3-sharded", fixture_repo(kShardedModel, kShardedFiles));
  mock.set_pause_per_piece_ms(5);  // slow enough that the two overlap
  // Each thread opens the lock file itself, so flock excludes them as it excludes two processes.
  std::string dirs[2], errors[2];
  auto download = [&](int i) {
    try {
      dirs[i] = hub::resolve_model("probekit-test/qwen3-sharded", settings).dir;
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  };
  std::thread first(download, 0), second(download, 1);
  first.join();
  second.join();
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK(dirs[0] == dirs[1]);
  check_cache_layout(settings.cache_dir, "models--probekit-test--qwen3-sharded", commit, kShardedModel, kShardedFiles);
  for (const std::string& shard : {"model-00001-of-00003.safetensors", kShard2.c_str(), "model-00003-of-00003.safetensors"}) {
    CHECK_MESSAGE(mock.count("GET", testing::sha256_hex(read_file(kShardedModel + "/" + shard))) == 1, shard);
  }
}

TEST_CASE_FIXTURE(HubCase, "hub download waits while Python's filelock, as huggingface_hub takes it, holds the blob's lock") {
  if (testing::run_command("/usr/bin/python3 -c 'import filelock'").exit_code != 0) {
    MESSAGE("skipped: /usr/bin/python3 has no filelock module (Debian: python3-filelock, see scripts/setup.sh)");
    return;
  }
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  std::string etag = testing::git_blob_sha1(read_file(kGemmaModel + "/config.json"));
  std::string lock = settings.cache_dir + "/.locks/models--probekit-test--gemma/" + etag + ".lock";
  make_directories(parent_directory(lock));
  testing::write_text(tmp.file("hold.py"), fmt::format("import time\nfrom filelock import FileLock\nwith FileLock('{}'):\n"
                                                       "    open('{}', 'w').close()\n    time.sleep(1.5)\n",
                                                       lock, tmp.file("held")));
  std::thread python([&] { std::system(("/usr/bin/python3 " + tmp.file("hold.py")).c_str()); });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!is_regular_file(tmp.file("held")) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto start = std::chrono::steady_clock::now();
  testing::LoggedLines log;
  hub::ResolvedModel model = hub::resolve_model("probekit-test/gemma", settings);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  python.join();
  CHECK_MESSAGE(waited >= 1.0, "the download went on while Python held the lock: ", waited, " s");
  // Said as a warning, which --quiet keeps (regression: at info, so a quiet wait looked like a hang).
  CHECK_CONTAINS(log.text(), "[warning]");
  CHECK_CONTAINS(log.text(), "still waiting: " + lock);
  CHECK(model.revision == commit);
  check_cache_layout(settings.cache_dir, "models--probekit-test--gemma", commit, kGemmaModel, kGemmaFiles);
}

TEST_CASE_FIXTURE(HubCase, "hub retries: a metadata request (HEAD) and a download (GET) that fail with 5xx or 429 are tried again") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  // Each fails twice, the third try of three succeeds: the metadata of a small and of an LFS file, the bytes of both.
  mock.fail_next("HEAD", "config.json", 503, 2);
  mock.fail_next("HEAD", "model.safetensors", 500, 2);
  mock.fail_next("HEAD", "tokenizer.json", 429, 2);
  mock.fail_next("GET", "tokenizer.json", 502, 2);
  mock.fail_next("GET", "model.safetensors", 504, 2);
  hub::ResolvedModel model = hub::resolve_model("probekit-test/gemma", settings);
  CHECK(model.revision == commit);
  check_cache_layout(settings.cache_dir, "models--probekit-test--gemma", commit, kGemmaModel, kGemmaFiles);
  CHECK(mock.count("HEAD", "/config.json") == 3);
  CHECK(mock.count("HEAD", "/model.safetensors") == 3);
  CHECK(mock.count("HEAD", "/tokenizer.json") == 3);
  CHECK(mock.count("GET", "/tokenizer.json") == 3);
  // The bytes of an LFS file come from where the metadata's redirect points.
  CHECK(mock.count("GET", "/lfs/" + testing::sha256_hex(read_file(kGemmaModel + "/model.safetensors"))) == 3);
}

TEST_CASE_FIXTURE(HubCase, "hub retries: a failure that does not pass gives up after the attempts, naming the status, the URL and the attempts") {
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  std::string url = mock.endpoint() + "/probekit-test/gemma/resolve/main/config.json";
  SUBCASE("the metadata") {
    mock.fail_next("HEAD", "config.json", 503, 1000);
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                      contains("probekit-test/gemma: config.json: HTTP 503 from " + url +
                               ": the hub failed to answer; try again later (the hub says: the hub is in trouble) "
                               "(gave up after 3 attempts)"));
    CHECK(mock.count("HEAD", "/config.json") == 3);
  }
  SUBCASE("the download of a small file") {
    mock.fail_next("GET", "tokenizer.json", 502, 1000);
    std::string commit = testing::git_blob_sha1("commit of probekit-test/gemma");
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                      contains("probekit-test/gemma: tokenizer.json: HTTP 502 from " + mock.endpoint() +
                               "/probekit-test/gemma/resolve/" + commit + "/tokenizer.json: the hub failed to answer"));
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings), contains("(gave up after 3 attempts; the 0 bytes"));
    CHECK(mock.count("GET", "/tokenizer.json") == 6);
  }
  SUBCASE("a rate limit") {
    mock.fail_next("HEAD", "config.json", 429, 1000);
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                      contains("HTTP 429 from " + url + ": too many requests: wait a minute and run the command again"));
  }
  SUBCASE("an unreachable hub") {
    settings.endpoint = "http://127.0.0.1:1";
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                      contains("probekit-test/gemma: config.json: cannot reach the hub: http://127.0.0.1:1/"));
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings), contains("(gave up after 3 attempts)"));
  }
  // Refusals that another try would not change are not tried again.
  SUBCASE("a missing file") {
    mock.add_repo("probekit-test/no-tokenizer", fixture_repo(kGemmaModel, {"config.json", "model.safetensors"}));
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/no-tokenizer", settings), contains("has no file tokenizer.json"));
    CHECK(mock.count("HEAD", "no-tokenizer/resolve/" + testing::git_blob_sha1("commit of probekit-test/no-tokenizer") +
                                 "/tokenizer.json") == 1);
  }
}

TEST_CASE_FIXTURE(HubCase, "hub retries: Retry-After is waited for, within a bound; the backoff doubles up to its cap") {
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  auto seconds_to_resolve = [&] {
    auto start = std::chrono::steady_clock::now();
    hub::resolve_model("probekit-test/gemma", settings);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  SUBCASE("a Retry-After in seconds is honoured over the (short) backoff") {
    mock.fail_next("HEAD", "config.json", 429, 1, "1");
    CHECK(seconds_to_resolve() >= 1.0);
  }
  SUBCASE("a Retry-After past the bound waits only the bound") {
    settings.max_retry_after_seconds = 0.2;
    mock.fail_next("GET", "model.safetensors", 503, 2, "86400");
    double seconds = seconds_to_resolve();
    CHECK(seconds >= 0.4);
    CHECK(seconds < 30);
  }
  SUBCASE("a Retry-After as an HTTP date is left to the backoff") {
    mock.fail_next("HEAD", "config.json", 503, 2, "Wed, 21 Oct 2015 07:28:00 GMT");
    CHECK(seconds_to_resolve() < 30);
    CHECK(mock.count("HEAD", "/config.json") == 3);
  }
}

TEST_CASE_FIXTURE(HubCase, "hub stalls: a download with no bytes for the stall time is abandoned, saying so, and continued") {
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  std::string weights = read_file(kGemmaModel + "/model.safetensors");
  std::string lfs_path = "/lfs/" + testing::sha256_hex(weights);
  std::string port = mock.endpoint().substr(mock.endpoint().rfind(':') + 1);
  settings.stall_seconds = 0.5;  // HF_HUB_DOWNLOAD_TIMEOUT=0.5
  auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  SUBCASE("once: the next try continues from the byte where it stalled") {
    mock.stall_halfway("model.safetensors", 1);
    hub::ResolvedModel model = hub::resolve_model("probekit-test/gemma", settings);
    CHECK(read_file(model.dir + "/model.safetensors") == weights);
    std::vector<std::string> ranges;
    for (const auto& r : mock.requests()) {
      if (r.path == lfs_path) ranges.push_back(r.range);
    }
    CHECK(ranges == std::vector<std::string>{"", fmt::format("bytes={}-", weights.size() / 2)});
  }
  SUBCASE("every time: the error says it stalled, for how long, at which URL, after how many tries") {
    mock.stall_halfway("model.safetensors", 1000);
    settings.max_attempts = 2;
    size_t half = weights.size() / 2, kept = half + (weights.size() - half) / 2;  // the second try stalls halfway too
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                      contains(fmt::format("probekit-test/gemma: model.safetensors: http://localhost:{}{}: the transfer "
                                           "stalled: no bytes for 0.5 s (HF_HUB_DOWNLOAD_TIMEOUT) (gave up after 2 "
                                           "attempts; the {} bytes received are kept in",
                                           port, lfs_path, kept)));
  }
  // Each stall is noticed within about a second of the stall time (libcurl's idle progress calls), not after 60 s.
  CHECK(seconds() < 10);
}

TEST_CASE_FIXTURE(HubCase, "hub sizes: a small file announced as 10^12 bytes is refused before a byte is downloaded") {
  std::string commit = mock.add_repo("probekit-test/qwen3-sharded", fixture_repo(kShardedModel, kShardedFiles));
  std::string blobs = settings.cache_dir + "/models--probekit-test--qwen3-sharded/blobs";
  auto check_refused = [&](const std::string& file, const std::string& revision) {
    mock.oversize(file, MockHub::Oversize::kInMetadata);
    std::string url = mock.endpoint() + "/probekit-test/qwen3-sharded/resolve/" + revision + "/" + file;
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/qwen3-sharded", settings),
                      contains("probekit-test/qwen3-sharded: " + file + ": " + url +
                               ": the hub announces 1000000000000 bytes, more than the 268435456 bytes a JSON file may "
                               "have; nothing was downloaded"));
    CHECK(mock.count("GET", "/" + file) == 0);
    if (is_directory(blobs)) {
      for (const std::string& blob : list_directory(blobs)) CHECK_MESSAGE(blob.find(".incomplete") == std::string::npos, blob);
    }
  };
  SUBCASE("config.json") { check_refused("config.json", "main"); }
  SUBCASE("tokenizer.json") { check_refused("tokenizer.json", commit); }
  SUBCASE("the weights' index") { check_refused("model.safetensors.index.json", commit); }
  SUBCASE("a file that is not read whole is not held to that bound") {
    // Gemma Scope's params.npz is 300 MB and more: the download is asked for, and held to the metadata's size.
    MockRepo repo = fixture_repo(kShardedModel, kShardedFiles);
    const std::string npz = "layer_3/width_16k/average_l0_71/params.npz";
    repo.files[npz] = "npz bytes";
    mock.add_repo("probekit-test/scope", repo);
    mock.oversize(npz, MockHub::Oversize::kMetadataOnly);
    CHECK_THROWS_WITH(hub::resolve_folder("probekit-test/scope/layer_3/width_16k/average_l0_71", {{"params.npz"}}, settings),
                      contains("the download announces 9 bytes (Content-Length) from byte 0 on, the hub's metadata "
                               "1000000000000 bytes in all"));
    CHECK(mock.count("GET", "/params.npz") == 1);
  }
}

TEST_CASE_FIXTURE(HubCase, "hub sizes: a download that exceeds the metadata's size stops at once, naming the file, the URL and both sizes") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  std::string blobs = settings.cache_dir + "/models--probekit-test--gemma/blobs/";
  // Serves `file` as `how` says: one GET fails with `reason`, and no more than the metadata's bytes are kept.
  auto check_stopped = [&](const std::string& file, MockHub::Oversize how, const std::string& revision,
                           const std::string& reason) {
    std::string bytes = read_file(kGemmaModel + "/" + file);
    mock.oversize(file, how);
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                      contains(fmt::format("probekit-test/gemma: {}: {}/probekit-test/gemma/resolve/{}/{}: {}", file,
                                           mock.endpoint(), revision, file, reason)));
    CHECK(mock.count("GET", "/" + file) == 1);  // a lying server is not asked again
    std::string blob = blobs + testing::git_blob_sha1(bytes);
    CHECK(file_size(blob + ".incomplete") <= bytes.size());
    CHECK_FALSE(path_exists(blob));
    return file_size(blob + ".incomplete");
  };
  SUBCASE("its Content-Length says so: refused before the body") {
    std::string size = std::to_string(file_size(kGemmaModel + "/tokenizer.json"));
    CHECK(check_stopped("tokenizer.json", MockHub::Oversize::kInDownload, commit,
                        "the download announces 1000000000000 bytes (Content-Length) from byte 0 on, the hub's metadata " +
                            size + " bytes in all; nothing was read") == 0);
  }
  SUBCASE("a chunked answer without a length: stopped at the metadata's size") {
    std::string size = std::to_string(file_size(kGemmaModel + "/config.json"));
    check_stopped("config.json", MockHub::Oversize::kUnannounced, commit,
                  "the server sent more than the " + size + " bytes the hub's metadata announced (");
  }
}
