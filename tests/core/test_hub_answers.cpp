// The hub client's answers to what a hub or a mirror says: another commit than the one asked for, a 404 without the
// hub's error code, a repository without safetensors weights, a snapshot another client filled, a redirect loop.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>

#include <string>
#include <thread>

#include "common/files.h"
#include "hub/http_client.h"
#include "hub/resolve.h"
#include "hub_case.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

TEST_CASE_FIXTURE(HubCase, "hub commits: an answer for another commit than the one asked for is refused, naming both") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  std::string other = testing::git_blob_sha1("another commit");
  std::string folder = settings.cache_dir + "/models--probekit-test--gemma";
  auto refused_message = [&](const std::string& file, const std::string& revision) {
    return fmt::format("probekit-test/gemma: {}: {}/probekit-test/gemma/resolve/{}/{}: asked for commit {}, the hub "
                       "answered for commit {}; nothing of it is used or recorded",
                       file, mock.endpoint(), revision, file, commit, other);
  };
  SUBCASE("pinned with @<commit>: the first answer already") {
    mock.misreport_commit("config.json", other);
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma@" + commit, settings), contains(refused_message("config.json", commit)));
    CHECK(mock.count("GET", "/config.json") == 0);
    CHECK_FALSE(path_exists(folder + "/snapshots/" + commit));
    CHECK_FALSE(path_exists(folder + "/snapshots/" + other));
    CHECK_FALSE(path_exists(folder + "/refs"));
  }
  SUBCASE("pinned with @<commit>: a later file, an optional file the hub lacks too") {
    // The optional file first: once the hub said it lacks it, the cache remembers that and no request is made.
    for (std::string file : {"generation_config.json", "tokenizer.json"}) {
      CAPTURE(file);
      mock.misreport_commit(file, other);
      CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma@" + commit, settings), contains(refused_message(file, commit)));
      CHECK_FALSE(path_exists(folder + "/snapshots/" + commit + "/" + file));
      CHECK_FALSE(path_exists(folder + "/.no_exist/" + other));
      mock.misreport_commit(file, commit);
    }
  }
  SUBCASE("a branch: its files are asked for by the commit of the first answer, and must come from it") {
    mock.misreport_commit("model.safetensors", other);
    CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings), contains(refused_message("model.safetensors", commit)));
    CHECK(mock.count("GET", testing::sha256_hex(read_file(kGemmaModel + "/model.safetensors"))) == 0);
  }
}

TEST_CASE_FIXTURE(HubCase, "hub answers: a mirror's 404 without an error code, and a repository of pickled weights only") {
  mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  // Regression: "the hub refused the request".
  mock.fail_next("HEAD", "config.json", 404, 1);
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                    contains("HTTP 404 from " + mock.endpoint() + "/probekit-test/gemma/resolve/main/config.json: not found: " +
                             mock.endpoint() + " (HF_ENDPOINT) has no such repository, revision or file"));
  // Regression: "has no file model.safetensors.index.json", as if a file of the repository were lost.
  mock.add_repo("probekit-test/pickles", fixture_repo(kGemmaModel, {"config.json", "tokenizer.json"}));
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/pickles", settings),
                    contains("has neither model.safetensors nor model.safetensors.index.json: its weights are in another "
                             "format (pickled .bin files are never downloaded"));
}

TEST_CASE_FIXTURE(HubCase, "hub cache: a snapshot another client filled without the optional files gets them, by its commit") {
  std::string commit = mock.add_repo("probekit-test/gemma", fixture_repo(kGemmaModel, kGemmaFiles));
  const hub::ResolvedModel first = hub::resolve_model("probekit-test/gemma", settings);
  // As hf_hub_download of config, tokenizer and weights alone leaves it: no chat template, nor a record of its absence.
  std::remove((first.dir + "/chat_template.jinja").c_str());
  hub::HubSettings offline = settings;
  offline.offline = true;
  testing::LoggedLines log;
  CHECK(hub::resolve_model("probekit-test/gemma", offline).dir == first.dir);
  CHECK_CONTAINS(log.text(), "the cache does not say whether commit " + commit + " has chat_template.jinja");
  CHECK_FALSE(path_exists(first.dir + "/chat_template.jinja"));
  // An unreachable hub leaves it as it is, after one try, as the cache served it before.
  hub::HubSettings unreachable = settings;
  unreachable.endpoint = "http://127.0.0.1:1";  // nothing listens there
  CHECK(hub::resolve_model("probekit-test/gemma", unreachable).dir == first.dir);
  CHECK_CONTAINS(log.text(), "from the cache without chat_template.jinja: asking the hub for them failed");
  // Regression: used as complete, so the model had no chat template until the snapshot was deleted.
  const int heads = mock.count("HEAD", "/config.json");
  const int by_commit = mock.count("HEAD", "/resolve/" + commit + "/chat_template.jinja");
  CHECK(hub::resolve_model("probekit-test/gemma", settings).dir == first.dir);
  CHECK(read_file(first.dir + "/chat_template.jinja") == read_file(kGemmaModel + "/chat_template.jinja"));
  CHECK(mock.count("HEAD", "/config.json") == heads);  // not pinned again: asked by the snapshot's commit
  CHECK(mock.count("HEAD", "/resolve/" + commit + "/chat_template.jinja") == by_commit + 1);
  // A file the hub lacks is recorded absent (huggingface_hub's .no_exist), a mirror's bare 404 by the commit asked
  // for (regression: not recorded, so asked for again on every run), and not asked for again.
  const std::string absent = settings.cache_dir + "/models--probekit-test--gemma/.no_exist/" + commit;
  REQUIRE(std::remove((absent + "/special_tokens_map.json").c_str()) == 0);
  mock.fail_next("HEAD", "special_tokens_map.json", 404, 1);
  hub::resolve_model("probekit-test/gemma", settings);
  CHECK(path_exists(absent + "/special_tokens_map.json"));
  const int asked = mock.count("HEAD", "/special_tokens_map.json");
  hub::resolve_model("probekit-test/gemma", settings);
  CHECK(mock.count("HEAD", "/special_tokens_map.json") == asked);
}

TEST_CASE_FIXTURE(HubCase, "hub answers: a redirect loop within the hub is named so, after its redirects, and not tried again") {
  httplib::Server looping;
  int requests = 0;
  looping.Get(".*", [&](const httplib::Request& request, httplib::Response& response) {  // HEAD too
    ++requests;
    response.status = 302;
    response.set_header("Location", request.path);
  });
  const int port = looping.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { looping.listen_after_bind(); });
  settings.endpoint = fmt::format("http://127.0.0.1:{}", port);
  // Regression: the last redirect was read as the answer: "no X-Repo-Commit header: is HF_ENDPOINT a Hugging Face hub".
  CHECK_THROWS_WITH(hub::resolve_model("probekit-test/gemma", settings),
                    contains("config.json: " + settings.endpoint + "/probekit-test/gemma/resolve/main/config.json: "
                             "redirected 6 times within the hub without an answer (a redirect loop)"));
  CHECK(requests == 6);
  // A download's redirects (an LFS location's) are followed by libcurl up to its bound: a loop is no network failure,
  // which would be tried again (regression: five tries, then "cannot reach the hub").
  hub::HttpClient client(hub::HttpOptions{});
  try {
    client.get(settings.endpoint + "/blob", {}, nullptr, nullptr);
    FAIL("a redirect loop was followed to an answer");
  } catch (const hub::NetworkError& e) {
    FAIL("a redirect loop read as a network failure: " << e.what());
  } catch (const std::runtime_error& e) {
    CHECK_CONTAINS(std::string(e.what()), "/blob: redirected more than 10 times (a redirect loop)");
  }
  looping.stop();
  serving.join();
}
