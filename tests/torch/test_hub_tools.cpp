// The tools with models by their hub name, against a mock hub on 127.0.0.1 (tests/mock_hub.h): capture records
// the hub name and the commit, the probes carry them on, inference without --model loads that model from the
// cache with the network off, and two processes downloading one model at once leave a valid cache.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "common/files.h"
#include "common/json.h"
#include "activations/activation_store.h"
#include "mock_hub.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// The environment of a tool run against `endpoint` with its Hugging Face home in `home` (no token, no other cache).
std::string hub_environment(const std::string& endpoint, const std::string& home) {
  return fmt::format("env -u HF_HUB_CACHE -u HUGGINGFACE_HUB_CACHE -u HF_TOKEN -u HF_TOKEN_PATH -u HF_HUB_OFFLINE "
                     "HF_ENDPOINT={} HF_HOME={}",
                     endpoint, home);
}

// The gemma3_text fixture as a hub repository.
MockRepo gemma_repo() {
  MockRepo repo;
  for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
    repo.files[file] = read_file(kGemmaModel + "/" + file);
  }
  return repo;
}

void write_dataset(const std::string& path) {
  static const char* labels[] = {"analyzing", "reframing", "noticing"};
  static const char* cues[] = {"I examined each part of the problem step by step.",
                               "Instead of a setback, I saw it as a chance to learn.",
                               "Suddenly I noticed the small crack in the window."};
  std::string lines;
  for (int i = 0; i < 45; ++i) {
    lines += Json({{"text", fmt::format("{} Day {}.", cues[i % 3], i)}, {"cognitive_action", labels[i % 3]}}).dump() + "\n";
  }
  testing::write_text(path, lines);
}

}  // namespace

TEST_CASE("hub names in the tools: capture records name and commit, inference finds the model offline without --model") {
  MockHub mock;
  TempDir tmp;
  MockRepo repo = gemma_repo();
  std::string commit = mock.add_repo("probekit-test/gemma3-text", repo);
  std::string online = hub_environment(mock.endpoint(), tmp.file("hf"));
  write_dataset(tmp.file("data.jsonl"));

  CommandResult r = run_command(fmt::format("{} {} --model probekit-test/gemma3-text --dataset {} --output-dir {} --layers 5 "
                                            "--device cpu",
                                            online, tool("capture_activations"), tmp.file("data.jsonl"), tmp.file("act")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  activations::FileAttributes attributes = activations::read_attributes(tmp.file("act/layer_5_activations.h5"));
  CHECK(attributes.recipe.model_name == "probekit-test/gemma3-text");
  CHECK(attributes.recipe.model_revision == commit);
  CHECK(is_regular_file(tmp.file("hf/hub/models--probekit-test--gemma3-text/snapshots/" + commit + "/model.safetensors")));

  r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 20 --device cpu --quiet", tool("train_binary_probes"),
                              tmp.file("act"), tmp.file("probes")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  Json index = read_json_file(tmp.file("probes/probes.json"));
  CHECK(index.at("readout").at("model_name") == "probekit-test/gemma3-text");
  CHECK(index.at("readout").at("model_revision") == commit);

  // Without --model, with the hub out of reach and offline mode on: the recorded model comes from the cache.
  size_t requests = mock.requests().size();
  std::string offline = hub_environment("http://127.0.0.1:1", tmp.file("hf")) + " HF_HUB_OFFLINE=1";
  r = run_command(fmt::format("{} {} --probes-dir {} --device cpu --json --text \"{}\"", offline,
                              tool("multi_probe_inference"), tmp.file("probes"), kReframingText));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "model probekit-test/gemma3-text@" + commit + " (recorded in ");
  Json recorded = Json::parse(r.output.substr(r.output.find('{')));
  // The same weights by their folder give the same scores.
  r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --json --quiet --text \"{}\"",
                              tool("multi_probe_inference"), tmp.file("probes"), kGemmaModel, kReframingText));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(Json::parse(r.output.substr(r.output.find('{')))["predictions"] == recorded["predictions"]);

  r = run_command(fmt::format("{} {} info --model probekit-test/gemma3-text --offline", hub_environment("http://127.0.0.1:1", tmp.file("hf")),
                              tool("inspect_model")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "family: gemma3_text");
  CHECK(mock.requests().size() == requests);

  // Offline without the model in the cache: one clear error, exit code 1.
  r = run_command(fmt::format("{} {} info --model probekit-test/other --offline", online, tool("inspect_model")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "probekit-test/other is not in the cache");
  CHECK(mock.requests().size() == requests);
}

TEST_CASE("hub names in the tools: two processes downloading one model at once leave one valid copy") {
  MockHub mock;
  TempDir tmp;
  MockRepo repo;
  std::vector<std::string> shards = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                     "model-00003-of-00003.safetensors"};
  for (const std::string& file : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"}) {
    repo.files[file] = read_file(kShardedModel + "/" + file);
  }
  for (const std::string& shard : shards) repo.files[shard] = read_file(kShardedModel + "/" + shard);
  std::string commit = mock.add_repo("probekit-test/qwen3-sharded", repo);
  mock.set_pause_per_piece_ms(10);  // slow enough that the two overlap
  std::string run = fmt::format("{} {} info --model probekit-test/qwen3-sharded --json", hub_environment(mock.endpoint(), tmp.file("hf")),
                                tool("inspect_model"));
  CommandResult r = run_command(fmt::format("({0} > {1}/a.out 2>&1; echo $? > {1}/a.rc) & ({0} > {1}/b.out 2>&1; echo $? > {1}/b.rc) & wait",
                                            run, tmp.path()));
  CHECK_MESSAGE(read_file(tmp.file("a.rc")) == "0\n", read_file(tmp.file("a.out")));
  CHECK_MESSAGE(read_file(tmp.file("b.rc")) == "0\n", read_file(tmp.file("b.out")));
  std::string folder = tmp.file("hf/hub/models--probekit-test--qwen3-sharded");
  for (const std::string& shard : shards) {
    std::string sha = testing::sha256_hex(repo.files[shard]);
    CHECK_MESSAGE(mock.count("GET", sha) == 1, shard);
    CHECK(read_file(folder + "/snapshots/" + commit + "/" + shard) == repo.files[shard]);
    CHECK_FALSE(path_exists(folder + "/blobs/" + sha + ".incomplete"));
  }
  CHECK(read_file(folder + "/refs/main") == commit);
}

TEST_CASE("hub names in the tools: a download killed with kill -9 continues where it stopped in the next run") {
  MockHub mock;
  TempDir tmp;
  MockRepo repo = gemma_repo();
  std::string commit = mock.add_repo("probekit-test/gemma3-text", repo);
  std::string sha = testing::sha256_hex(repo.files["model.safetensors"]);
  std::string blob = tmp.file("hf/hub/models--probekit-test--gemma3-text/blobs/" + sha);
  mock.set_pause_per_piece_ms(50);  // the 1.3 MB file takes about 4 s
  std::string run = fmt::format("{} {} info --model probekit-test/gemma3-text", hub_environment(mock.endpoint(), tmp.file("hf")),
                                tool("inspect_model"));
  CommandResult started = run_command(fmt::format("{} > {} 2>&1 & echo $!", run, tmp.file("killed.log")));
  pid_t pid = std::stoi(started.output);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((!is_regular_file(blob + ".incomplete") || file_size(blob + ".incomplete") < 100000) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // Until it is gone or a zombie (its parent shell has exited; whether anyone reaps it depends on the container).
  auto alive = [pid] {
    std::string stat = testing::read_text(fmt::format("/proc/{}/stat", pid));
    size_t state = stat.rfind(')');
    return state != std::string::npos && state + 2 < stat.size() && stat[state + 2] != 'Z';
  };
  while (alive()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(is_regular_file(blob + ".incomplete"));
  uint64_t kept = file_size(blob + ".incomplete");
  CHECK(kept > 0);
  CHECK(kept < repo.files["model.safetensors"].size());
  CHECK_FALSE(path_exists(blob));

  mock.set_pause_per_piece_ms(0);
  CommandResult r = run_command(run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, fmt::format("model.safetensors: continuing an interrupted download from byte {}", kept));
  CHECK(mock.requests().back().range == fmt::format("bytes={}-", kept));
  CHECK(read_file(blob) == repo.files["model.safetensors"]);
  CHECK(read_file(tmp.file("hf/hub/models--probekit-test--gemma3-text/snapshots/" + commit + "/model.safetensors")) ==
        repo.files["model.safetensors"]);
}

TEST_CASE("--sae with a hub folder: the layout's files downloaded (no other layout's weights), then from the cache offline") {
  MockHub mock;
  TempDir tmp;
  MockRepo repo;
  const std::string saes = std::string(PROBEKIT_FIXTURES) + "/saes";
  const std::string gemma_scope_2 = "resid_post/layer_3_width_256_l0_small";
  for (const char* file : {"config.json", "params.safetensors"}) {
    repo.files[gemma_scope_2 + "/" + file] = read_file(saes + "/gemma_scope_2/" + gemma_scope_2 + "/" + file);
  }
  // sparsify's cfg.json is also SAELens' first file: its absent sae_weights.safetensors makes it sparsify's.
  for (const char* file : {"cfg.json", "sae.safetensors"}) repo.files[std::string("layers.3/") + file] = read_file(saes + "/sparsify/layers.3/" + file);
  const std::string commit = mock.add_repo("probekit-test/saes", repo);
  write_dataset(tmp.file("data.jsonl"));
  auto capture = [&](const std::string& environment, const std::string& sae, const std::string& out) {
    return run_command(fmt::format("{} {} --model {} --dataset {} --output-dir {} --device cpu --sae x={} --site sae:x -q",
                                   environment, tool("capture_activations"), kGemmaModel, tmp.file("data.jsonl"),
                                   tmp.file(out), sae));
  };
  const std::string online = hub_environment(mock.endpoint(), tmp.file("hf"));
  CommandResult r = capture(online, "probekit-test/saes/" + gemma_scope_2, "g");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  Json record = activations::read_attributes(tmp.file("g/layer_3_activations.h5")).recipe.sae->dictionary;
  CHECK(record["layout"] == "gemma_scope_2");
  const std::string snapshot = tmp.file("hf/hub/models--probekit-test--saes/snapshots/" + commit + "/");
  CHECK(record["path"] == snapshot + gemma_scope_2);
  r = capture(online, "probekit-test/saes/layers.3@main", "s");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(activations::read_attributes(tmp.file("s/layer_3_activations.h5")).recipe.sae->dictionary["layout"] == "sparsify");
  CHECK(mock.count("GET", "layers.3/sae_weights.safetensors") == 0);
  CHECK_FALSE(path_exists(snapshot + "layers.3/sae_weights.safetensors"));

  // From the cache, the hub out of reach; a folder the cache lacks is one clear error.
  const size_t requests = mock.requests().size();
  const std::string offline = hub_environment("http://127.0.0.1:1", tmp.file("hf")) + " HF_HUB_OFFLINE=1";
  r = capture(offline, "probekit-test/saes/" + gemma_scope_2, "g2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  r = capture(offline, "probekit-test/saes/resid_post/layer_9", "none");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "--sae probekit-test/saes/resid_post/layer_9: no such folder here, and as a hub folder "
                           "(org/name/sub/folder): probekit-test/saes/resid_post/layer_9: not in the cache with one of "
                           "cfg.json + sae_weights.safetensors;");
  CHECK(mock.requests().size() == requests);
  // Online, a folder of no layout: refused naming the commit and the sets.
  r = capture(online, "probekit-test/saes/resid_post", "none2");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "probekit-test/saes/resid_post: the hub's commit " + commit + " holds none of cfg.json");
}
