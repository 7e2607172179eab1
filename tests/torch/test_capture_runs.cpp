// capture_activations runs as a whole: out-of-memory retries, compressed datasets and long texts, resumption after
// kill -9 and after a full disk, outputs never overwritten silently, bad input and bad checkpoints through the tool,
// replicas and shards that write the files of one run, and the summary's counts.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include <functional>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture/summary.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "data/dataset.h"
#include "model/transformer.h"
#include "activation_checks.h"
#include "capture_dataset.h"
#include "capture_runs.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;
using activations::Split;

TEST_CASE("an out-of-memory batch is retried in halves and the run completes with the same rows") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 30);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("normal"));
  o.layers = "4";
  auto normal = capture::run_capture(o);
  o.output_dir = tmp.file("retried");
  o.simulate_out_of_memory_above = 3;
  auto retried = capture::run_capture(o);
  CHECK(retried.out_of_memory_retries > 0);
  auto a = layer_activations(o.output_dir, {4}), b = layer_activations(tmp.file("normal"), {4});
  REQUIRE(a.size() == b.size());
  for (size_t g = 0; g < a.size(); ++g) {
    REQUIRE(a[g].size() == b[g].size());
    for (size_t i = 0; i < a[g].size(); ++i) CHECK(a[g][i] == doctest::Approx(b[g][i]).epsilon(1e-5));
  }
}

TEST_CASE("gzip files hold the same data, and long texts are cut from the start") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 20);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("plain"));
  o.layers = "5";
  capture::run_capture(o);
  o.output_dir = tmp.file("gzip");
  o.gzip = true;
  capture::run_capture(o);
  CHECK(layer_activations(tmp.file("gzip"), {5}) == layer_activations(tmp.file("plain"), {5}));

  o.output_dir = tmp.file("short");
  o.gzip = false;
  o.max_length = 12;
  capture::CaptureSummary s = capture::run_capture(o);
  CHECK(s.truncated > 0);
  // The suffix and the last token survive: the last row of a cut text equals a run of BOS + its last tokens.
  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  auto file = activations::read_activation_file(s.files[0]);
  data::Dataset d = data::read_dataset(dataset, {});
  const auto& train = file.split(Split::kTrain);
  std::vector<int32_t> ids = tok.encode(d.examples[static_cast<size_t>(train.example_index[0])].text + activations::kDefaultPromptSuffix);
  if (ids.size() > 12) ids.erase(ids.begin() + 1, ids.end() - 11);
  auto m = model::TransformerModel::load(kGemmaModel, {});
  model::ForwardPass pass;
  pass.input_ids = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  pass.last_layer = 5;
  at::Tensor expected = m.forward(pass)[0][-1];
  at::Tensor actual = at::from_blob(const_cast<float*>(train.activations.data()), {64}, at::kFloat);
  CHECK((actual - expected).abs().max().item<double>() < 1e-4);
}

TEST_CASE("kill -9 at several points, then --resume, gives datasets identical to an uninterrupted run") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 400);
  std::string common = fmt::format("{} --model {} --dataset {} --device cpu --layers 1,5 --window 4 --threads 1 --quiet",
                                   tool("capture_activations"), kGemmaModel, dataset);
  CommandResult reference = run_command(common + " --output-dir " + tmp.file("reference"));
  REQUIRE_MESSAGE(reference.exit_code == 0, reference.output);
  auto expected = layer_activations(tmp.file("reference"), {1, 5});
  // Kill once the files exist but nothing is committed (-1), and after 40, 200 and 360 committed examples.
  for (int target : {-1, 40, 200, 360}) {
    std::string out = tmp.file(fmt::format("killed_{}", target + 1));
    std::string partial = out + "/" + activations::layer_file_name(5) + ".partial";
    std::string wait_for = target < 0 ? fmt::format("[ -e {} ]", partial)
                                      : fmt::format("[ \"$(sed -n s/examples_done=//p {}.progress 2>/dev/null)\" -ge {} ] 2>/dev/null",
                                                    partial, target);
    CommandResult killed = run_command(fmt::format(
        "bash -c '{} --output-dir {} & pid=$!; until {}; do kill -0 $pid 2>/dev/null || exit 3; sleep 0.005; done; "
        "kill -9 $pid; wait $pid'",
        common, out, wait_for));
    REQUIRE_MESSAGE(killed.exit_code == 137, "the run was not killed midway (target ", target, "): ", killed.output);
    CommandResult resumed = run_command(common + " --output-dir " + out + " --resume");
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
    CHECK_MESSAGE(layer_activations(out, {1, 5}) == expected, "killed at ", target);
    CHECK_FALSE(path_exists(out + "/" + activations::layer_file_name(1) + ".partial"));
  }
}

TEST_CASE("disk full while capturing: a clear error, complete files untouched, --resume completes once space is freed") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 300);
  // Per-token rows make each layer file a few megabytes of 1 MB chunks, so a full disk stops the run between
  // commits rather than before the first.
  auto capture = [&](const std::string& out, int layer, const std::string& extra = "") {
    return fmt::format("{} --model {} --dataset {} --device cpu --layers {} --position all --window 4 --threads 1 --quiet "
                       "--output-dir {} {}",
                       tool("capture_activations"), kGemmaModel, dataset, layer, out, extra);
  };
  CommandResult reference = run_command(capture(tmp.file("reference"), 5));
  REQUIRE_MESSAGE(reference.exit_code == 0, reference.output);
  const auto expected = layer_activations(tmp.file("reference"), {5});

  // In `out`, a file of layer 1 from an earlier run stays as it was while layer 5's capture fails with `reason`;
  // after `free_space`, --resume finishes layer 5 with the rows of an uninterrupted run.
  auto check = [&](const std::string& out, const std::string& earlier, const CommandResult& failed, const char* reason,
                   const std::function<void()>& free_space) {
    CHECK(failed.exit_code == 1);
    CHECK_CONTAINS(failed.output, out + "/" + activations::layer_file_name(5) + ".partial");
    CHECK_CONTAINS(failed.output, reason);
    CHECK_CONTAINS(failed.output, "The disk is full (or a file size limit was reached): free space and run the command again");
    CHECK(probekit::testing::read_text(out + "/" + activations::layer_file_name(1)) == earlier);
    CHECK_FALSE(path_exists(out + "/" + activations::layer_file_name(5)));
    free_space();
    CommandResult resumed = run_command(capture(out, 5, "--resume"));
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
    CHECK(layer_activations(out, {5}) == expected);
    CHECK(probekit::testing::read_text(out + "/" + activations::layer_file_name(1)) == earlier);
  };

  // A file size limit (ulimit -f, in KiB) works without privileges; it stops the run as it creates its file,
  // whose layout reserves the whole size up front.
  std::string limited = tmp.file("size_limit");
  REQUIRE(run_command(capture(limited, 1)).exit_code == 0);
  std::string earlier = probekit::testing::read_text(limited + "/" + activations::layer_file_name(1));
  CommandResult failed = run_command(fmt::format("bash -c 'ulimit -f 1024 && exec {}'", capture(limited, 5)));
  check(limited, earlier, failed, "File too large", [] {});

  // A small tmpfs stops the run when it runs out of space in the middle, after some commits.
  std::string disk = tmp.file("disk");
  make_directories(disk);
  CommandResult mounted = run_command(fmt::format("mount -t tmpfs -o size=16m tmpfs {}", disk));
  if (mounted.exit_code != 0) {
    MESSAGE("a disk filling up mid-run is not tested here: mounting a tmpfs needs root and CAP_SYS_ADMIN (",
            mounted.output, ")");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { run_command("umount " + path); }
  } unmount{disk};
  std::string out = disk + "/out";
  REQUIRE(run_command(capture(out, 1)).exit_code == 0);
  earlier = probekit::testing::read_text(out + "/" + activations::layer_file_name(1));
  struct statvfs space {};
  REQUIRE(statvfs(disk.c_str(), &space) == 0);
  // Room for half of a layer file: the run fails once its first chunks are written.
  uint64_t free_bytes = static_cast<uint64_t>(space.f_bavail) * space.f_frsize;
  REQUIRE(free_bytes > earlier.size() / 2);
  probekit::testing::write_text(disk + "/filler", std::string(free_bytes - earlier.size() / 2, 'x'));
  failed = run_command(capture(out, 5));
  CHECK_MESSAGE(activations::has_progress_record(out + "/" + activations::layer_file_name(5)),
                "the run failed before its first commit: ", failed.output);
  check(out, earlier, failed, "No space left on device", [&] { remove_tree(disk + "/filler"); });
}

TEST_CASE("existing outputs are never overwritten or ignored silently") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  std::string common = fmt::format("{} --model {} --dataset {} --device cpu --layers 2 --output-dir {} --quiet",
                                   tool("capture_activations"), kGemmaModel, dataset, tmp.file("out"));
  REQUIRE(run_command(common).exit_code == 0);
  CommandResult again = run_command(common);
  CHECK(again.exit_code == 1);
  CHECK_CONTAINS(again.output, "already exists; pass --overwrite");
  CommandResult resumed = run_command(common + " --resume");
  CHECK(resumed.exit_code == 0);
  CHECK_CONTAINS(resumed.output, "already complete");
  CHECK(run_command(common + " --overwrite").exit_code == 0);
}

TEST_CASE("--overwrite replaces a layer file only once its successor is complete, and refuses other layers' files") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 300);
  const std::string out = tmp.file("out"), file = out + "/" + activations::layer_file_name(1);
  // Per-token rows make a file of a few megabytes, which a file size limit stops as it is created.
  auto capture = [&](const std::string& layers, const std::string& extra) {
    return fmt::format("{} --model {} --dataset {} --device cpu --layers {} --position all --threads 1 --quiet "
                       "--output-dir {} {}",
                       tool("capture_activations"), kGemmaModel, dataset, layers, out, extra);
  };
  CommandResult first = run_command(capture("1", "--max-examples 100"));
  REQUIRE_MESSAGE(first.exit_code == 0, first.output);
  const std::string earlier = probekit::testing::read_text(file);
  // Regression: --overwrite deleted the earlier files before its run, so a run that failed lost them.
  CommandResult failed = run_command(fmt::format("bash -c 'ulimit -f 1024 && exec {}'", capture("1", "--overwrite")));
  CHECK(failed.exit_code == 1);
  CHECK_CONTAINS(failed.output, "File too large");
  CHECK(probekit::testing::read_text(file) == earlier);
  // Nor does --resume keep the earlier file as this run's (the failed run committed nothing to resume).
  check_failure(run_command(capture("1", "--resume")), 1,
                {"is complete but was made with max_examples=100 but this run has max_examples=0"});
  CommandResult replaced = run_command(capture("1", "--overwrite"));
  REQUIRE_MESSAGE(replaced.exit_code == 0, replaced.output);
  const activations::ActivationFile now = activations::read_activation_file(file);
  CHECK(now.attributes.max_examples == 0);
  CHECK(now.split(Split::kTrain).examples() + now.split(Split::kVal).examples() + now.split(Split::kTest).examples() == 300);
  CHECK_FALSE(path_exists(activations::partial_path_for(file)));
  // Regression: the files of layers not in --layers stayed beside the new ones, and a trainer took both captures.
  check_failure(run_command(capture("3", "--overwrite")), 2,
                {"layer_1_activations.h5 holds layer 1, which this run (layers 3) does not capture"});
  CHECK_FALSE(path_exists(out + "/" + activations::layer_file_name(3)));
  CHECK(is_regular_file(file));
  // A plain run adds its layers to a capture of the same recipe and data, and refuses one of another before writing
  // (regression: it wrote them beside each other, and only training refused the directory).
  check_failure(run_command(capture("3", "--max-examples 100")), 2,
                {"--output-dir ", "layer_1_activations.h5 (layer 1) was made with max_examples=0 but this run has "
                                  "max_examples=100: the trainers take every layer file"});
  CHECK_FALSE(path_exists(out + "/" + activations::layer_file_name(3)));
  CommandResult added = run_command(capture("3", ""));
  REQUIRE_MESSAGE(added.exit_code == 0, added.output);
  CHECK(activations::read_attributes(out + "/" + activations::layer_file_name(3)).layer == 3);
}

TEST_CASE("a resumed run whose files hold every example (killed between two layers' finish) only finishes them") {
  TempDir tmp;
  check_resume_with_nothing_left(cpu_capture_options("", ""), tmp);
}

TEST_CASE("flags capture cannot use are refused before the model loads: --keep-fields twice or unfit to name a column, "
          "--batch-size past 1048576, a negative --seed") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  auto run_with = [&](const std::string& flags) {
    return run_command(fmt::format("{} --model {} --dataset {} --device cpu --layers 1 --output-dir {} {}",
                                   tool("capture_activations"), kGemmaModel, dataset, tmp.file("out"), flags));
  };
  // Regression: a name given twice made a column of twice the values, which train_binary_probes refused.
  check_failure(run_with("--keep-fields domain,domain"), 2, {"--keep-fields: 'domain' is named twice"});
  // Regression: these failed once the model had loaded, with HDF5's error and a .partial file left behind.
  for (const char* name : {"a/b", ".", "./domain"}) {
    CAPTURE(name);
    const std::string expected = fmt::format("--keep-fields: '{}' cannot name a metadata column", name);
    check_failure(run_with(fmt::format("--keep-fields '{}'", name)), 2, {expected.c_str()});
  }
  // Regression: the batches' token budget (examples x the longest prompt) overflowed, and a later --resume failed.
  check_failure(run_with("--batch-size 1048577"), 2,
                {"--batch-size 1048577: expected 0 (chosen from device memory) to 1048576 examples per forward pass"});
  // Regression: -1 was read as 2^64 - 1 (Python's random.seed(-1) seeds with 1).
  check_failure(run_with("--seed -1"), 2, {"--seed: must be 0 or more, got -1"});
  CHECK_FALSE(path_exists(tmp.file("out")));
  // The library refuses them too (the Python package fills the options itself); the largest batch size runs.
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("out"));
  o.layers = "1";
  o.dataset.keep_fields = {"domain", "domain"};
  CHECK_THROWS_WITH_AS(capture::run_capture(o), doctest::Contains("'domain' is named twice"), UsageError);
  o.dataset.keep_fields = {"domain"};
  o.batch_size = capture::kMaxBatchSize + 1;
  CHECK_THROWS_WITH_AS(capture::run_capture(o), doctest::Contains("--batch-size 1048577"), UsageError);
  o.batch_size = capture::kMaxBatchSize;
  CHECK(capture::run_capture(o).batches == 1);
}

TEST_CASE("bad input to capture_activations: clear message, exit code 1 (2 for bad flags)") {
  TempDir tmp;
  std::string good = write_action_dataset(tmp, 16);
  auto run_with = [&](const std::string& model, const std::string& dataset, const std::string& extra = "") {
    return run_command(fmt::format("{} --model {} --dataset {} --device cpu --output-dir {} {}", tool("capture_activations"),
                                   model, dataset, tmp.file("out"), extra));
  };
  std::string bad = tmp.file("bad.jsonl");
  probekit::testing::write_text(bad, probekit::testing::read_text(good) + "{\"text\": oops}\n");
  CommandResult r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:17: invalid JSON");

  probekit::testing::write_text(bad, "{\"text\": \"x\", \"cognitive_action\": \"a\"}\n{\"cognitive_action\": \"a\"}\n");
  r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:2: missing field 'text'");

  probekit::testing::write_text(bad, "{\"text\": \"x\", \"topic\": \"a\"}\n");
  CHECK_CONTAINS(run_with(kGemmaModel, bad).output, "unknown label field");
  probekit::testing::write_text(bad, "\n\n");
  CHECK_CONTAINS(run_with(kGemmaModel, bad).output, "no usable examples");
  // Refused before the output directory is made (a regression: the directory and its lock file were left behind).
  const CommandResult missing = run_command(fmt::format("{} --model {} --dataset {} --device cpu --output-dir {}",
                                                        tool("capture_activations"), kGemmaModel,
                                                        tmp.file("missing.jsonl"), tmp.file("never_made")));
  CHECK_CONTAINS(missing.output, "cannot open the dataset");
  CHECK(!path_exists(tmp.file("never_made")));
  const CommandResult no_model = run_command(fmt::format("{} --model {} --dataset {} --device cpu --offline --output-dir {}",
                                                         tool("capture_activations"), tmp.file("no_such_model"), good,
                                                         tmp.file("never_made")));
  CHECK(no_model.exit_code == 1);
  CHECK(!path_exists(tmp.file("never_made")));  // and a model not found (regression: it was made first)
  CHECK_CONTAINS(run_with(tmp.path(), good).output, "no config.json");

  std::string no_weights = tmp.file("no_weights");
  probekit::testing::copy_dir(kGemmaModel, no_weights);
  remove_tree(no_weights + "/model.safetensors");
  CHECK_CONTAINS(run_with(no_weights, good).output, "no model.safetensors");

  r = run_with(kGemmaModel, good, "--layers 9");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "layer 9 is out of range: the model has 6 layers");
  CHECK(run_with(kGemmaModel, good, "--position middle").exit_code == 2);
  CHECK(run_with(kGemmaModel, good, "--split 0.5,0.5").exit_code == 2);

  probekit::testing::write_text(bad, probekit::testing::read_text(good) + "not json\n");
  r = run_with(kGemmaModel, bad, "--skip-invalid");
  CHECK(r.exit_code == 0);
  CHECK_CONTAINS(r.output, "1 invalid lines were skipped");

  std::string first_line = probekit::testing::read_text(good).substr(0, probekit::testing::read_text(good).find('\n') + 1);
  probekit::testing::write_text(bad, first_line + "{\"text\": \" \", \"cognitive_action\": \"noticing\"}\n");
  r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:2: field 'text' is empty");
  probekit::testing::write_text(bad, first_line + "{\"text\": \"caf\xe9\", \"cognitive_action\": \"noticing\"}\n");
  r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:2: the line is not valid UTF-8 text");

  auto run_on = [&](const std::string& device) {
    return run_command(fmt::format("{} --model {} --dataset {} --output-dir {} {}", tool("capture_activations"), kGemmaModel,
                                   good, tmp.file("out"), device));
  };
  r = run_on("--device tpu");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--device tpu: unknown device; expected auto, cpu, cuda, cuda:N, rocm or mps");
  // MPS exists only on Apple machines; there bf16 becomes fp32 with a warning (tests/core/test_device_select.cpp).
  r = run_on("--device mps --dtype bf16");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--device mps: Apple MPS is not available here");
}

TEST_CASE("bad checkpoints through capture_activations: exit code 1, the file and the problem named") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  auto run_with = [&](const std::string& model) {
    return run_command(fmt::format("{} --model {} --dataset {} --device cpu --output-dir {}", tool("capture_activations"),
                                   model, dataset, tmp.file("out")));
  };
  auto damaged_copy = [&](const std::string& fixture, const std::string& name) {
    std::string dir = tmp.file(name);
    probekit::testing::copy_dir(fixture_model(fixture), dir);
    return dir;
  };

  std::string truncated = damaged_copy("gemma3_text", "truncated");
  std::string weights = truncated + "/model.safetensors";
  REQUIRE(::truncate(weights.c_str(), static_cast<off_t>(file_size(weights) / 2)) == 0);
  CommandResult r = run_with(truncated);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "truncated/model.safetensors: tensor");
  CHECK_CONTAINS(r.output, "(file truncated?)");

  std::string corrupt = damaged_copy("gemma3_text", "corrupt");
  probekit::testing::write_text(corrupt + "/model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  r = run_with(corrupt);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "corrupt/model.safetensors: header length 9223372036854775807 exceeds");

  std::string sharded = damaged_copy("qwen3_sharded", "sharded");
  remove_tree(sharded + "/model-00002-of-00003.safetensors");
  r = run_with(sharded);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "model-00002-of-00003.safetensors listed in the index is missing");

  std::string inconsistent = damaged_copy("gemma3_text", "inconsistent");
  Json config = read_json_file(inconsistent + "/config.json");
  config["num_key_value_heads"] = 3;
  write_json_file(inconsistent + "/config.json", config);
  r = run_with(inconsistent);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "inconsistent/config.json: num_attention_heads (4) must be a multiple of num_key_value_heads (3)");

  config["num_key_value_heads"] = 1;
  config["model_type"] = "mamba";
  write_json_file(inconsistent + "/config.json", config);
  r = run_with(inconsistent);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "inconsistent/config.json: unsupported model_type 'mamba' (supported: llama,");

  std::string tokenizer = damaged_copy("gemma3_text", "tokenizer");
  Json tokenizer_json = read_json_file(tokenizer + "/tokenizer.json");
  tokenizer_json["normalizer"] = {{"type", "Lowercased"}};
  write_json_file(tokenizer + "/tokenizer.json", tokenizer_json);
  r = run_with(tokenizer);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "tokenizer/tokenizer.json: normalizer: unknown type \"Lowercased\" (supported: NFC,");
}

TEST_CASE("texts longer than a learned-position model's positions: an error naming --max-length, or cut with a warning") {
  // GPT-2 has 512 learned positions; rotary models have no such limit and run long texts whole.
  TempDir tmp;
  std::string lines;
  for (int i = 0; i < 16; ++i) {
    std::string text = i == 3 ? "" : kActionLabels[static_cast<size_t>(i % 4)] + " looked again";
    for (int w = 0; i == 3 && w < 700; ++w) text += "again and ";
    lines += Json({{"text", text}, {"cognitive_action", kActionLabels[static_cast<size_t>(i % 4)]}}).dump() + "\n";
  }
  probekit::testing::write_text(tmp.file("long.jsonl"), lines);
  auto run_with = [&](const std::string& extra) {
    return run_command(fmt::format("{} --model {}/models/gpt2 --dataset {} --device cpu --layers 1 --output-dir {} {}",
                                   tool("capture_activations"), PROBEKIT_FIXTURES, tmp.file("long.jsonl"), tmp.file("out"), extra));
  };
  CommandResult r = run_with("");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "long.jsonl:4: this text's prompt is");
  CHECK_CONTAINS(r.output, "more than the model's 512 positions (learned position embeddings, none past them): cut long "
                           "texts with --max-length 512");
  r = run_with("--max-length 512");
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "1 of 16 texts were longer than --max-length 512 tokens and were cut from the start");
  CHECK_CONTAINS(r.output, "1 texts were cut to --max-length 512");
}

TEST_CASE("several model replicas share the batches and write the same files as one") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 40);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("one"));
  o.layers = "2,5";
  o.window = 16;
  o.batch_size = 3;
  capture::run_capture(o);
  o.output_dir = tmp.file("two");
  o.devices = {"cpu", "cpu"};
  capture::CaptureSummary two = capture::run_capture(o);
  CHECK(two.device == "cpu,cpu");
  // Replicas cut the run's last batches finer (capture::with_finer_tail): those rows are batched differently.
  for (int64_t layer : {2, 5}) {
    check_same_rows(activations::read_activation_file(tmp.file("two/" + activations::layer_file_name(layer))),
                    activations::read_activation_file(tmp.file("one/" + activations::layer_file_name(layer))));
  }
  CHECK(two.processed == 40);
}

TEST_CASE("shards of a run, merged, equal the whole run") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 30);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("whole"));
  o.layers = "3";
  o.position = Position::kAll;
  o.dataset.keep_fields = {"domain"};
  capture_whole_and_shards(o, tmp, 3);
  std::string merge = tool("merge_activations") + " --output-dir " + tmp.file("sharded");
  CommandResult partial = run_command(merge + " " + tmp.file("sharded/shard_0_of_3") + " " + tmp.file("sharded/shard_2_of_3"));
  CHECK(partial.exit_code == 1);
  CHECK_CONTAINS(partial.output, "every shard 0..N-1 is needed once");
  CommandResult merged = run_command(merge);
  REQUIRE_MESSAGE(merged.exit_code == 0, merged.output);
  auto whole = activations::read_activation_file(tmp.file("whole/" + activations::layer_file_name(3)));
  auto joined = activations::read_activation_file(tmp.file("sharded/" + activations::layer_file_name(3)));
  CHECK(joined.attributes.identity() == whole.attributes.identity());
  testing::check_same_rows(joined, whole);
}

TEST_CASE("the summary counts the batches and the padding they computed") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 24);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("one"));
  o.batch_size = 1;  // no batch, no padding
  capture::CaptureSummary single = capture::run_capture(o);
  CHECK(single.tokens > 0);
  CHECK(single.computed_tokens == single.tokens);
  CHECK(single.batches == 24);
  o.output_dir = tmp.file("all");
  o.batch_size = 24;  // one batch, every text padded to the longest
  capture::CaptureSummary batched = capture::run_capture(o);
  CHECK(batched.tokens == single.tokens);
  CHECK(batched.computed_tokens > batched.tokens);
  CHECK(batched.batches == 1);
  Json summary = capture::summary_json(batched);
  CHECK(summary["batches"].get<int64_t>() == 1);
  CHECK(summary["padding_fraction"].get<double>() ==
        doctest::Approx(1.0 - static_cast<double>(batched.tokens) / batched.computed_tokens));
}

TEST_CASE("--shard I/N takes whole numbers an int holds; anything else is refused, never cut") {
  capture::CaptureOptions options;
  capture::parse_shard("3/8", options);
  CHECK(options.shard_index == 3);
  CHECK(options.shard_count == 8);
  capture::parse_shard("2147483646/2147483647", options);
  CHECK(options.shard_count == 2147483647);
  // 4294967298 would be 2 cut to 32 bits: shard 1 of 2 while the log said 1 of 4294967298.
  for (const char* bad : {"1/4294967298", "4294967297/4", "1/-2", "-1/2", "1/2x", "1 /2", "1/", "/2", "12", "1.0/2", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(capture::parse_shard(bad, options),
                         doctest::Contains("expected I/N, e.g. 0/4 (whole numbers up to 2147483647)"), UsageError);
  }
}
