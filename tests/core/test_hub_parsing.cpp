// The hub client's pure parts: hub names, the hub's response headers, Content-Range, the index's shard names,
// the hashes etags are checked with (against git and sha256sum), the environment variables huggingface_hub
// reads, and how a local folder is recorded.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/sha256.h"
#include "hub/git_sha1.h"
#include "hub/hub_cache.h"
#include "hub/http_client.h"
#include "hub/hub_name.h"
#include "hub/hub_responses.h"
#include "hub/hub_settings.h"
#include "hub/resolve.h"
#include "hub/retry.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

std::string trimmed_output(const std::string& command) {
  testing::CommandResult result = testing::run_command(command);
  REQUIRE_MESSAGE(result.exit_code == 0, command, ": ", result.output);
  std::string out = result.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

// Regression: messages and retry warnings printed a signed link whole, and HF_ENDPOINT's password.
TEST_CASE("hub URLs in messages: no password before the host, no query (a signed link's signature), no fragment") {
  CHECK(hub::url_shown("https://cdn.example/lfs/abc?X-Amz-Signature=SECRET&Expires=1") == "https://cdn.example/lfs/abc");
  CHECK(hub::url_shown("http://user:pw@127.0.0.1:18080/org/x/resolve/main/config.json#frag") ==
        "http://127.0.0.1:18080/org/x/resolve/main/config.json");
  CHECK(hub::url_shown("https://user:pw@hub.example") == "https://hub.example");
  CHECK(hub::url_shown("https://hub.example/a@b/config.json") == "https://hub.example/a@b/config.json");
  CHECK(hub::url_shown("https://huggingface.co/org/x") == "https://huggingface.co/org/x");
  CHECK(hub::url_shown("user:pw@hub.example/mirror") == "hub.example/mirror");  // HF_ENDPOINT without a scheme
  CHECK(hub::url_shown("hub.example/a@b") == "hub.example/a@b");
  CHECK(hub::url_shown("@") == "");
}

TEST_CASE("hub names: org/name[@revision], the cache's folder name and URL quoting") {
  auto name = hub::parse_hub_name("google/gemma-3-4b-it");
  REQUIRE(name);
  CHECK(name->repo == "google/gemma-3-4b-it");
  CHECK(name->revision == "main");
  CHECK_FALSE(name->revision_given);
  CHECK(name->text() == "google/gemma-3-4b-it");
  name = hub::parse_hub_name("Qwen/Qwen3-0.6B@v1.0");
  REQUIRE(name);
  CHECK(name->repo == "Qwen/Qwen3-0.6B");
  CHECK(name->revision == "v1.0");
  CHECK(name->text() == "Qwen/Qwen3-0.6B@v1.0");
  CHECK(hub::parse_hub_name("org/name@refs/pr/1")->revision == "refs/pr/1");

  // Paths and names the hub refuses are not hub names: the caller reports a missing folder.
  for (const char* not_a_name : {"model", "./model", "/models/gemma", "a/b/c", "org/", "/name", "-org/name", "org/name.",
                                 "org--x/name", "org/na..me", "org/name with space"}) {
    CHECK_MESSAGE(!hub::parse_hub_name(not_a_name), not_a_name);
  }
  // As huggingface_hub's REPO_ID_REGEX, 96 characters bound the name, not "org/name" together.
  CHECK(hub::parse_hub_name("mlx-community/" + std::string(90, 'a')));
  CHECK_FALSE(hub::parse_hub_name("org/" + std::string(97, 'a')));
  // A hub name with a revision no branch can have is the user's mistake.
  for (const char* bad : {"org/name@", "org/name@../../etc", "org/name@a b", "org/name@x//y", "org/name@~1"}) {
    CHECK_THROWS_AS_MESSAGE(hub::parse_hub_name(bad), UsageError, bad);
  }
  CHECK(hub::repo_folder_name("google/gemma-3-4b-it") == "models--google--gemma-3-4b-it");
  CHECK(hub::url_quote("refs/pr/1", "") == "refs%2Fpr%2F1");
  CHECK(hub::url_quote("sub dir/model.safetensors") == "sub%20dir/model.safetensors");
  CHECK(hub::is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  CHECK_FALSE(hub::is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  CHECK_FALSE(hub::is_commit_hash("main"));
}

TEST_CASE("hub folders: org/name/sub/folder[@revision], as --sae names an SAE of a release") {
  auto folder = hub::parse_hub_folder("google/gemma-scope-2-4b-it/resid_post/layer_17_width_16k_l0_small");
  REQUIRE(folder);
  CHECK(folder->name.repo == "google/gemma-scope-2-4b-it");
  CHECK(folder->name.revision == "main");
  CHECK(folder->folder == "resid_post/layer_17_width_16k_l0_small");
  CHECK(folder->text() == "google/gemma-scope-2-4b-it/resid_post/layer_17_width_16k_l0_small");
  folder = hub::parse_hub_folder("EleutherAI/sae-llama-3-8b-32x/layers.23@v2");
  REQUIRE(folder);
  CHECK(folder->name.revision == "v2");
  CHECK(folder->folder == "layers.23");
  CHECK(folder->text() == "EleutherAI/sae-llama-3-8b-32x/layers.23@v2");
  for (const char* not_a_folder : {"org/name", "org/name@main", "./a/b/c", "/a/b/c", "a/b/", "a/b//c", "a/b/./c",
                                   "a/b/../c", "-a/b/c", "a b/c/d"}) {
    CHECK_MESSAGE(!hub::parse_hub_folder(not_a_folder), not_a_folder);
  }
  CHECK_THROWS_AS(hub::parse_hub_folder("org/name/sub@../x"), UsageError);
}

TEST_CASE("fuzz regression (fuzz_hub_responses): a revision with '..' inside a component is refused, as git does") {
  // Harmless as a path (no component is ".."), but no branch or tag can be named so, and keeping ".." out of
  // every accepted revision keeps the rule about refs/ simple.
  CHECK_THROWS_AS(hub::parse_hub_name("org/name@refsl.layers.2.self_at,tn..safetensors"), UsageError);
  CHECK_THROWS_AS(hub::parse_hub_name("org/name@v1/.hidden"), UsageError);
  CHECK(hub::parse_hub_name("org/name@v1.0.2")->revision == "v1.0.2");
}

TEST_CASE("hub responses: the headers of a redirect for an LFS file, of a small file, and of refusals") {
  // What the hub answers to HEAD .../resolve/main/model.safetensors (curl's header lines, an earlier 100 first).
  std::string lfs = "HTTP/1.1 100 Continue\r\n\r\nHTTP/2 302\r\ncontent-length: 1342\r\n"
                    "x-repo-commit: 2b6a1d4e0e1c04b5e9fd5cd3e1a5b71a1f0b7c3d\r\n"
                    "X-Linked-Etag: \"b3a0c5e5cf0f6c8a3c0a1d06a6bcae8b0b0a4c8d6c2fd8a0a0c6c4e2f7f0a1b2\"\r\n"
                    "x-linked-size: 8030000000\r\netag: \"4a1f0c8b2d0e6a9f3c7b5e1d2a4c6e8f0b1d3a5c\"\r\n"
                    "location: https://cdn.example/repos/ab/cd?X-Amz-Signature=x\r\n\r\n";
  hub::FileMetadata m = hub::read_file_metadata(hub::parse_header_lines(lfs), "lfs");
  CHECK(m.commit == "2b6a1d4e0e1c04b5e9fd5cd3e1a5b71a1f0b7c3d");
  CHECK(m.etag == "b3a0c5e5cf0f6c8a3c0a1d06a6bcae8b0b0a4c8d6c2fd8a0a0c6c4e2f7f0a1b2");
  CHECK(m.size == 8030000000);
  CHECK(m.location == "https://cdn.example/repos/ab/cd?X-Amz-Signature=x");
  CHECK(hub::etag_kind(m.etag) == hub::EtagKind::kSha256);

  std::string small = "HTTP/1.1 200 OK\nContent-Length: 663\nETag: W/\"8c3f0e4b2a1d6c5e7f9a0b1c2d3e4f5a6b7c8d9e\"\n"
                      "X-Repo-Commit: 2b6a1d4e0e1c04b5e9fd5cd3e1a5b71a1f0b7c3d\n";
  m = hub::read_file_metadata(hub::parse_header_lines(small), "small");
  CHECK(m.etag == "8c3f0e4b2a1d6c5e7f9a0b1c2d3e4f5a6b7c8d9e");
  CHECK(hub::etag_kind(m.etag) == hub::EtagKind::kGitSha1);
  CHECK(m.size == 663);
  CHECK(m.location.empty());

  // An answer that did not come from a hub, or whose etag could name a path outside blobs/, is refused.
  CHECK_THROWS_WITH_AS(hub::read_file_metadata(hub::parse_header_lines("HTTP/1.1 200 OK\nETag: \"abc\"\nContent-Length: 3\n"), "proxy"),
                       doctest::Contains("proxy: the answer has no X-Repo-Commit header"), std::runtime_error);
  std::string commit = "X-Repo-Commit: 2b6a1d4e0e1c04b5e9fd5cd3e1a5b71a1f0b7c3d\n";
  CHECK_THROWS_WITH(hub::read_file_metadata(hub::parse_header_lines(commit + "ETag: \"../../x\"\nContent-Length: 3\n"), "f"),
                    doctest::Contains("cannot name a cache file"));
  CHECK_THROWS_WITH(hub::read_file_metadata(hub::parse_header_lines(commit + "ETag: \"abc\"\nContent-Length: -3\n"), "f"),
                    doctest::Contains("no valid size"));
  CHECK_THROWS_WITH(hub::read_file_metadata(hub::parse_header_lines("X-Repo-Commit: main\nETag: a\n"), "f"),
                    doctest::Contains("is not a commit hash"));

  hub::HubError error = hub::read_hub_error(401, hub::parse_header_lines("X-Error-Code: GatedRepo\nX-Error-Message: Access restricted\n"));
  CHECK(error.code == "GatedRepo");
  CHECK(error.message == "Access restricted");
}

TEST_CASE("hub responses: Content-Range and the shard names of model.safetensors.index.json") {
  hub::ContentRange range = hub::parse_content_range("bytes 100-199/200", "r");
  CHECK(range.first == 100);
  CHECK(range.last == 199);
  CHECK(range.total == 200);
  CHECK(hub::parse_content_range("bytes 0-9/*", "r").total == -1);
  for (const char* bad : {"bytes 10-5/20", "bytes 0-19/19", "items 0-1/2", "bytes -1/2", "bytes 0-1", "bytes 99999999999999999999-1/2"}) {
    CHECK_THROWS_WITH_MESSAGE(hub::parse_content_range(bad, "r"), doctest::Contains("malformed Content-Range"), bad);
  }

  std::vector<std::string> shards = hub::shard_names(read_file(kShardedModel + "/model.safetensors.index.json"), "index");
  CHECK(shards == std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                           "model-00003-of-00003.safetensors"});
  // A shard name is a file name in the snapshot: nothing that climbs out of it, and never a pickle.
  for (const char* bad : {R"({"weight_map": {"a": "../escape.safetensors"}})", R"({"weight_map": {"a": "sub/x.safetensors"}})",
                          R"({"weight_map": {"a": "pytorch_model.bin"}})", R"({"weight_map": {"a": ".safetensors"}})",
                          R"({"weight_map": {"a": "x\n.safetensors"}})"}) {
    CHECK_THROWS_WITH_MESSAGE(hub::shard_names(bad, "index"), doctest::Contains("is not a plain *.safetensors file name"), bad);
  }
  CHECK_THROWS_WITH(hub::shard_names(R"({"weight_map": {}})", "index"), doctest::Contains("no 'weight_map' object"));
  CHECK_THROWS_WITH(hub::shard_names(R"({"weight_map": {"a": 3}})", "index"), doctest::Contains("must be a file name"));
  CHECK_THROWS_WITH(hub::shard_names("[1]", "index"), doctest::Contains("expected a JSON object"));
}

TEST_CASE("hub responses: Content-Length, Retry-After in seconds, and the wait before each try") {
  CHECK(hub::content_length(hub::parse_header_lines("Content-Length: 1000000000000\r\n"), "x") == 1000000000000);
  CHECK(hub::content_length(hub::parse_header_lines("Transfer-Encoding: chunked\r\n"), "x") == -1);
  for (const char* bad : {"Content-Length: -1", "Content-Length: 12abc", "Content-Length: 99999999999999999999"}) {
    CHECK_THROWS_WITH_AS(hub::content_length(hub::parse_header_lines(bad), "model: file: url"),
                         doctest::Contains("model: file: url: malformed Content-Length"), std::runtime_error);
  }
  CHECK(hub::retry_after_seconds(hub::parse_header_lines("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\n")) == 120);
  CHECK(hub::retry_after_seconds(hub::parse_header_lines("Retry-After:  7 \r\n")) == 7);
  for (const char* other : {"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT", "Retry-After: -3", "Retry-After: 1.5",
                            "Retry-After: 99999999999999999999", "Retry-After:", "X-Other: 3"}) {
    CHECK_MESSAGE(hub::retry_after_seconds(hub::parse_header_lines(other)) == -1, other);
  }
  hub::HubSettings settings;  // huggingface_hub's http_backoff: 1 s, doubling, at most 8 s
  std::vector<double> waits;
  for (int failed = 1; failed <= 6; ++failed) waits.push_back(hub::retry_wait_seconds(settings, failed, -1));
  CHECK(waits == std::vector<double>{1, 2, 4, 8, 8, 8});
  CHECK(hub::retry_wait_seconds(settings, 1, 30) == 30);    // the server's word, over the backoff
  CHECK(hub::retry_wait_seconds(settings, 4, 0) == 0);
  CHECK(hub::retry_wait_seconds(settings, 1, 86400) == 60);  // but never past the bound
}

TEST_CASE("hub etags: git's blob sha1 and sha256 equal what git hash-object and sha256sum print") {
  // FIPS 180 test vectors first, then the fixture files as the hub would name them.
  hub::Sha1 abc;
  abc.update("abc");
  CHECK(abc.hex_digest() == "a9993e364706816aba3e25717850c26c9cd0d89d");
  hub::Sha1 long_input;
  long_input.update("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq");
  CHECK(long_input.hex_digest() == "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  for (const char* file : {"config.json", "tokenizer.json", "model.safetensors.index.json"}) {
    std::string path = kShardedModel + "/" + file;
    std::string bytes = read_file(path);
    hub::Sha1 git;
    git.update(hub::git_blob_header(bytes.size()));
    git.update(bytes);
    CHECK_MESSAGE(git.hex_digest() == trimmed_output("git hash-object " + path), file);
  }
  std::string shard = kShardedModel + "/model-00001-of-00003.safetensors";
  CHECK(sha256_file(shard) == trimmed_output("sha256sum " + shard).substr(0, 64));
}

TEST_CASE("sha1 and sha256 share one block frame: empty input, the padding's edges, and input fed in odd pieces") {
  // Digests from Python's hashlib. 55 bytes leave room for the 0x80 byte and the length in their block; 56 and 64
  // do not, so their padding takes a second block.
  struct Case {
    std::string input, sha1, sha256;
  };
  const Case cases[] = {
      {"", "da39a3ee5e6b4b0d3255bfef95601890afd80709", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "a9993e364706816aba3e25717850c26c9cd0d89d",
       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {std::string(55, 'x'), "cef734ba81a024479e09eb5a75b6ddae62e6abf1",
       "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {std::string(56, 'x'), "901305367c259952f4e7af8323f480d59f81335b",
       "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {std::string(64, 'x'), "bb2fa3ee7afb9f54c6dfb5d021f14b1ffe40c163",
       "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {std::string(1000000, 'a'), "34aa973cd4c4daa4f61eeb2bdbad27316534016f",
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const Case& c : cases) {
    INFO(c.input.size() << " bytes");
    hub::Sha1 sha1;
    Sha256 sha256;
    sha1.update(c.input);
    sha256.update(c.input);
    CHECK(sha1.hex_digest() == c.sha1);
    CHECK(sha256.hex_digest() == c.sha256);
    // The same bytes in pieces of 7, which straddle every block boundary.
    hub::Sha1 sha1_pieces;
    Sha256 sha256_pieces;
    for (size_t at = 0; at < c.input.size(); at += 7) {
      sha1_pieces.update(std::string_view(c.input).substr(at, 7));
      sha256_pieces.update(std::string_view(c.input).substr(at, 7));
    }
    CHECK(sha1_pieces.hex_digest() == c.sha1);
    CHECK(sha256_pieces.hex_digest() == c.sha256);
  }
}

TEST_CASE("hub settings: the cache, the token and offline mode come from huggingface_hub's variables") {
  ScopedEnvironment env;
  TempDir tmp;
  for (const char* name : {"HF_ENDPOINT", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_TOKEN",
                           "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                           "HF_HUB_DOWNLOAD_TIMEOUT"}) {
    env.set(name, std::nullopt);
  }
  env.set("HOME", tmp.path());
  hub::HubSettings s = hub::settings_from_environment();
  CHECK(s.endpoint == "https://huggingface.co");
  CHECK(s.cache_dir == tmp.path() + "/.cache/huggingface/hub");
  CHECK(s.token_file == tmp.path() + "/.cache/huggingface/token");
  CHECK(s.token.empty());
  CHECK_FALSE(s.offline);

  env.set("XDG_CACHE_HOME", tmp.file("xdg"));
  CHECK(hub::settings_from_environment().cache_dir == tmp.file("xdg") + "/huggingface/hub");
  env.set("HF_HOME", "~/hf");
  s = hub::settings_from_environment();
  CHECK(s.cache_dir == tmp.path() + "/hf/hub");
  CHECK(s.token_file == tmp.path() + "/hf/token");
  env.set("HF_HUB_CACHE", tmp.file("cache"));
  env.set("HF_ENDPOINT", "http://127.0.0.1:9/");
  s = hub::settings_from_environment();
  CHECK(s.cache_dir == tmp.file("cache"));
  CHECK(s.endpoint == "http://127.0.0.1:9");
  // Without a scheme libcurl would send the token over plain http.
  env.set("HF_ENDPOINT", "hf-mirror.com");
  CHECK_THROWS_WITH(hub::settings_from_environment(), "HF_ENDPOINT=hf-mirror.com names no scheme: write https://hf-mirror.com");
  env.set("HF_ENDPOINT", "user:secret@hf-mirror.com");  // regression: the password was printed
  CHECK_THROWS_WITH(hub::settings_from_environment(), "HF_ENDPOINT=hf-mirror.com names no scheme: write https://hf-mirror.com");
  env.set("HF_ENDPOINT", "http://127.0.0.1:9/");

  // The token file as `hf auth login` writes it, unless HF_TOKEN is set.
  make_directories(tmp.path() + "/hf");
  testing::write_text(tmp.path() + "/hf/token", "hf_from_file\n");
  s = hub::settings_from_environment();
  CHECK(s.token == "hf_from_file");
  CHECK(s.token_source == tmp.path() + "/hf/token");
  env.set("HF_TOKEN", " hf_from_env ");
  s = hub::settings_from_environment();
  CHECK(s.token == "hf_from_env");
  CHECK(s.token_source == "HF_TOKEN");
  env.set("HF_TOKEN", std::nullopt);
  env.set("HF_TOKEN_PATH", tmp.file("elsewhere"));
  CHECK(hub::settings_from_environment().token.empty());

  for (const char* truthy : {"1", "ON", "yes", "True"}) {
    env.set("HF_HUB_OFFLINE", truthy);
    CHECK_MESSAGE(hub::settings_from_environment().offline, truthy);
  }
  env.set("HF_HUB_OFFLINE", "0");
  env.set("TRANSFORMERS_OFFLINE", "1");
  CHECK_FALSE(hub::settings_from_environment().offline);
  env.set("HF_HUB_OFFLINE", std::nullopt);
  CHECK(hub::settings_from_environment().offline);
}

TEST_CASE("hub settings: the stall time from HF_HUB_DOWNLOAD_TIMEOUT; a token file is read within a bound") {
  ScopedEnvironment env;
  TempDir tmp;
  env.set("HF_HUB_DOWNLOAD_TIMEOUT", std::nullopt);
  CHECK(hub::settings_from_environment().stall_seconds == 10);  // huggingface_hub's DEFAULT_DOWNLOAD_TIMEOUT
  // Not a structured binding: doctest's CHECK_MESSAGE captures it in a lambda, which C++17 forbids (clang refuses).
  for (const auto& value : std::vector<std::pair<const char*, double>>{{"30", 30}, {"2.5", 2.5}, {"0", 10}, {"", 10}}) {
    env.set("HF_HUB_DOWNLOAD_TIMEOUT", std::string(value.first));
    CHECK_MESSAGE(hub::settings_from_environment().stall_seconds == value.second, value.first);
  }
  for (const char* bad : {"ten", "-1", "5s", "inf", "nan"}) {
    env.set("HF_HUB_DOWNLOAD_TIMEOUT", std::string(bad));
    CHECK_THROWS_WITH_AS(hub::settings_from_environment(),
                         doctest::Contains(("HF_HUB_DOWNLOAD_TIMEOUT=" + std::string(bad) + " is not a number of seconds").c_str()),
                         std::runtime_error);
  }
  env.set("HF_HUB_DOWNLOAD_TIMEOUT", std::nullopt);

  // A token file is some 40 characters; a huge one is refused before it is read whole.
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) env.set(name, std::nullopt);
  env.set("HF_TOKEN_PATH", tmp.file("token"));
  testing::write_text(tmp.file("token"), std::string(64 << 10, 'x'));
  CHECK(hub::settings_from_environment().token.size() == (64 << 10));
  testing::write_text(tmp.file("token"), std::string((64 << 10) + 1, 'x'));
  CHECK_THROWS_WITH(hub::settings_from_environment(),
                    doctest::Contains((tmp.file("token") + ": larger than the 65536 bytes such a file may have").c_str()));
  CHECK(read_file(tmp.file("token"), (64 << 10) + 1).size() == (64 << 10) + 1);
}

TEST_CASE("hub cache: a ref that cannot be a commit is not read whole") {
  TempDir tmp;
  hub::RepoCache cache(tmp.path(), "org/name");
  make_directories(cache.folder() + "/refs");
  testing::write_text(cache.folder() + "/refs/main", std::string(5000, 'a'));
  CHECK_THROWS_WITH(cache.commit_of("main"),
                    doctest::Contains((cache.folder() + "/refs/main: larger than the 4096 bytes such a file may have").c_str()));
}

TEST_CASE("hub resolve: a local folder is recorded by its absolute path, a snapshot folder with its commit") {
  TempDir tmp;
  hub::HubSettings offline;
  offline.offline = true;
  offline.cache_dir = tmp.file("cache");
  hub::ResolvedModel local = hub::resolve_model(kShardedModel + "/./", offline);
  CHECK(local.dir == local.name);
  CHECK(local.name.find("/./") == std::string::npos);
  CHECK(local.name.back() != '/');
  CHECK(is_regular_file(local.dir + "/config.json"));
  CHECK(local.revision.empty());

  std::string commit = "0123456789abcdef0123456789abcdef01234567";
  std::string snapshot = tmp.file("cache/models--org--name/snapshots/" + commit);
  make_directories(snapshot);
  CHECK(hub::resolve_model(snapshot, offline).revision == commit);

  // A relative path is made absolute.
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
  REQUIRE(chdir(tmp.path().c_str()) == 0);
  hub::ResolvedModel relative = hub::resolve_model("cache", offline);
  REQUIRE(chdir(cwd) == 0);
  CHECK(relative.name[0] == '/');

  CHECK_THROWS_WITH_AS(hub::resolve_model("./no/such/folder", offline),
                       doctest::Contains("./no/such/folder: no such folder, and not a hub name"), std::invalid_argument);

  CHECK(hub::pinned_model("org/name", commit) == "org/name@" + commit);
  CHECK(hub::pinned_model("org/name@main", commit) == "org/name@" + commit);
  CHECK(hub::pinned_model("/models/gemma", commit) == "/models/gemma");
  CHECK(hub::pinned_model("org/name", "") == "org/name");
}
