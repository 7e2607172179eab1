// Beyond one process: --shard auto under each launcher's environment (four ranks, each a process of the built
// tool), merge_activations --virtual (read by our reader, our trainer and h5py), missing and interrupted
// shards, and layers split over several devices.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <future>

#include <unistd.h>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture/merge.h"
#include "capture/batching.h"
#include "capture/window_queue.h"
#include "common/error.h"
#include "common/files.h"
#include "model/placement.h"
#include "readout/readout.h"
#include "activation_checks.h"
#include "capture_runs.h"
#include "split_devices.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;
using activations::Split;

namespace {

// The environment a Slurm job array --array=1-4 gives its task `rank` (ids counted from 1).
std::string slurm_array_task(int rank) {
  return fmt::format("env SLURM_ARRAY_TASK_ID={} SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=4 SLURM_ARRAY_TASK_COUNT=4 "
                     "SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0",
                     rank + 1);
}

}  // namespace

TEST_CASE("--shard auto: four Slurm array tasks as processes, one interrupted and resumed, merged --virtual, equal one "
          "process") {
  TempDir tmp;
  std::string dataset = tmp.file("data.jsonl");
  probekit::testing::write_three_action_dataset(dataset, 240);
  std::string capture = fmt::format("{} --model {} --dataset {} --device cpu --layers 1,3 --window 2 --threads 1",
                                    tool("capture_activations"), kGemmaModel, dataset);
  CommandResult whole = run_command(capture + " --quiet --output-dir " + tmp.file("whole"));
  REQUIRE_MESSAGE(whole.exit_code == 0, whole.output);

  std::string shards = tmp.file("shards");
  for (int rank : {0, 2, 3}) {
    CommandResult r = run_command(slurm_array_task(rank) + " " + capture + " --shard auto --output-dir " + shards);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK_CONTAINS(r.output, fmt::format("--shard auto: Slurm job array (SLURM_ARRAY_TASK_ID={} SLURM_ARRAY_TASK_MIN=1 "
                                         "SLURM_ARRAY_TASK_COUNT=4): shard {} of 4",
                                         rank + 1, rank));
  }
  std::string merge = tool("merge_activations") + " --virtual --output-dir " + shards;
  probekit::testing::check_failure(run_command(merge), 1, {"shard 1 of 4 missing", "every shard 0..N-1 is needed once"});

  // Task 1 is preempted (kill -9) after its first commits, then run again with --resume.
  std::string task = slurm_array_task(1) + " " + capture + " --quiet --shard auto --output-dir " + shards;
  std::string progress = shards + "/shard_1_of_4/" + activations::layer_file_name(3) + ".partial.progress";
  CommandResult killed = run_command(fmt::format(
      "bash -c '{} & pid=$!; until [ \"$(sed -n s/examples_done=//p {} 2>/dev/null)\" -ge 4 ] 2>/dev/null; do "
      "kill -0 $pid 2>/dev/null || exit 3; sleep 0.005; done; kill -9 $pid; wait $pid'",
      task, progress));
  REQUIRE_MESSAGE(killed.exit_code == 137, "the task was not killed midway: ", killed.output);
  probekit::testing::check_failure(run_command(merge), 1, {"shard_1_of_4/layer_1_activations.h5 is incomplete", "--resume"});
  CommandResult resumed = run_command(task + " --resume");
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);

  CommandResult merged = run_command(merge);
  REQUIRE_MESSAGE(merged.exit_code == 0, merged.output);
  CHECK_CONTAINS(merged.output, "Merged 4 shards into 2 virtual layer files");
  for (int64_t layer : {1, 3}) {
    std::string name = activations::layer_file_name(layer);
    auto joined = activations::read_activation_file(shards + "/" + name);
    testing::check_same_rows(joined, activations::read_activation_file(tmp.file("whole/" + name)));
  }

  {  // h5py (Debian's python3-h5py) reads the virtual datasets, the shards named relative to the merged file.
    std::string script = tmp.file("read.py");
    probekit::testing::write_text(script, R"(import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f["train/activations"]
    print(d.is_virtual, [s.file_name for s in d.virtual_sources()][:2])
    print(d.shape[0], f["train/labels"][:].tolist()[:5], float(abs(d[:]).sum()))
)");
    auto ours = activations::read_activation_file(shards + "/" + activations::layer_file_name(3)).split(Split::kTrain);
    // The first python3 with h5py: on PATH, else Debian's (a venv on PATH may lack it, or hide Debian's).
    CommandResult r = run_command(fmt::format(
        "for python in python3 /usr/bin/python3; do if \"$python\" -c 'import h5py' 2>/dev/null; then "
        "exec \"$python\" {} {}/{}; fi; done; echo 'no python3 with h5py'; exit 1",
        script, shards, activations::layer_file_name(3)));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    double sum = 0;
    for (float v : ours.activations) sum += std::fabs(static_cast<double>(v));
    CHECK_CONTAINS(r.output, "True ['shard_0_of_4/layer_3_activations.h5', 'shard_1_of_4/layer_3_activations.h5']");
    CHECK_CONTAINS(r.output, fmt::format("{} [{}, {}, {}, {}, {}]", ours.rows, ours.labels[0], ours.labels[1],
                                         ours.labels[2], ours.labels[3], ours.labels[4]));
    double h5py_sum = std::stod(r.output.substr(r.output.rfind(' ') + 1));
    CHECK(std::fabs(h5py_sum - sum) <= 1e-4 * sum);
  }
  {  // The trainer trains on the virtual files.
    CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 2 --quiet",
                                              tool("train_binary_probes"), shards + "/" + activations::layer_file_name(3),
                                              tmp.file("probes")));
    CHECK_MESSAGE(r.exit_code == 0, r.output);
    CHECK(is_regular_file(tmp.file("probes/probes.json")));
  }
  {  // The merged files and their shards move together; a shard gone is an error naming it.
    rename_path(shards, tmp.file("moved"));
    auto moved = activations::read_activation_file(tmp.file("moved/" + activations::layer_file_name(1)));
    CHECK(moved.split(Split::kTest).examples() > 0);
    rename_path(tmp.file("moved/shard_2_of_4"), tmp.file("elsewhere"));
    CHECK_THROWS_WITH(activations::read_activation_file(tmp.file("moved/" + activations::layer_file_name(1))),
                      doctest::Contains("moved/shard_2_of_4/layer_1_activations.h5, which is missing"));
  }
}

TEST_CASE("merge --virtual of per-token shards: offsets rebased and stored, metadata stored, the rest mapped") {
  TempDir tmp;
  capture::CaptureOptions o = three_action_capture(tmp, 45, "cpu");
  o.layers = "2";
  o.position = Position::kAll;
  o.dataset.keep_fields = {"cognitive_action"};
  capture_whole_and_shards(o, tmp, 3);
  capture::MergeOptions merge;
  merge.virtual_files = true;
  std::vector<std::string> files = capture::merge_shards(capture::find_shard_dirs(tmp.file("sharded")), tmp.file("sharded"), merge);
  REQUIRE(files.size() == 1);
  auto joined = activations::read_activation_file(files[0]);
  CHECK(joined.attributes.identity() ==
        activations::read_activation_file(tmp.file("whole/" + activations::layer_file_name(2))).attributes.identity());
  testing::check_same_rows(joined, activations::read_activation_file(tmp.file("whole/" + activations::layer_file_name(2))));
  merge.gzip = true;
  CHECK_THROWS_AS(capture::merge_shards(capture::find_shard_dirs(tmp.file("sharded")), tmp.file("sharded"), merge), UsageError);
}

TEST_CASE("placement: replicas when the model fits one device, else consecutive layers split by bytes, replicated") {
  using model::Placement;
  // Embeddings of 10 bytes and four layers of 10: 50 bytes, which fit a device with 80% of its free memory.
  const model::ModelBytes bytes{10, {10, 10, 10, 10}};
  auto plan = model::plan_devices(Placement::kAuto, {100, 100}, bytes);
  CHECK(plan.replicas == std::vector<std::vector<size_t>>{{0, 0, 0, 0}, {1, 1, 1, 1}});
  CHECK(plan.description == "2 replicas of the whole model");
  // 40 free each: 50 bytes do not fit one device (32 usable), halves by bytes do: the embeddings and layers
  // 0-1 (30 bytes) on the first, layers 2-3 (20) on the second.
  plan = model::plan_devices(Placement::kAuto, {40, 40}, bytes);
  CHECK(plan.replicas == std::vector<std::vector<size_t>>{{0, 0, 1, 1}});
  CHECK(plan.description == "layers 0-1 on device 0, layers 2-3 on device 1; 1 replica");
  CHECK(plan.stages(0) == 2);
  CHECK(plan.weight_bytes == std::vector<int64_t>{30, 20});
  // Four such devices: two replicas of the split.
  plan = model::plan_devices(Placement::kAuto, {40, 40, 40, 40}, bytes);
  CHECK(plan.replicas == std::vector<std::vector<size_t>>{{0, 0, 1, 1}, {2, 2, 3, 3}});
  // Forced either way; the CPU (free memory unknown) takes replicas.
  CHECK(model::plan_devices(Placement::kReplicas, {40, 40}, bytes).replicas.size() == 2);
  // Three stages of 50 bytes: each layer goes to the stage its middle byte falls in.
  CHECK(model::plan_devices(Placement::kLayers, {100, 100, 100}, bytes).replicas ==
        std::vector<std::vector<size_t>>{{0, 1, 2, 2}});
  CHECK(model::plan_devices(Placement::kAuto, {0, 0}, bytes).replicas.size() == 2);
  // More devices than layers: every stage keeps at least one layer.
  CHECK(model::plan_devices(Placement::kLayers, {1, 1, 1}, model::ModelBytes{100, {1, 1}}).replicas ==
        std::vector<std::vector<size_t>>{{0, 1}});
  CHECK_THROWS_WITH_AS(model::plan_devices(Placement::kAuto, {20, 20}, bytes),
                       doctest::Contains("do not fit 2 devices"), std::invalid_argument);
  CHECK_THROWS_AS(model::plan_devices(Placement::kLayers, {100}, bytes), UsageError);
  CHECK_THROWS_AS(model::parse_placement("pipeline"), UsageError);
}

TEST_CASE("layers split over two devices, batches pipelined through them: bitwise the rows of one device (fp32)") {
  TempDir tmp;
  capture::CaptureOptions o = three_action_capture(tmp, 40, "cpu");
  o.layers = "1,4";
  o.window = 16;
  o.batch_size = 3;
  check_split_capture(o, tmp, {"cpu", "cpu"}, {1, 4});

  // Inference reads through the same readout: ranking rows and every prefix of a text, split and whole.
  model::LoadOptions load;
  model::TransformerModel whole = model::TransformerModel::load(kGemmaModel, load);
  load.layer_devices = cpu_split_devices(whole.loaded_layers());
  model::TransformerModel split = model::TransformerModel::load(kGemmaModel, load);
  check_split_reads(split, whole, {{2, 10, 11, 12}, {2, 13, 14}},
                    readout::Request{Site::kResidPost, Position::kLast, {1, 4}, 1});
  load.layer_devices.pop_back();
  CHECK_THROWS_WITH(model::TransformerModel::load(kGemmaModel, load), doctest::Contains("layer devices for"));
}

TEST_CASE("the last batches of a run shared by replicas are cut finer, keeping every example once and in order") {
  const std::vector<std::vector<int64_t>> batches = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}, {16, 17}, {18}};
  auto finer = capture::with_finer_tail(batches, 3, 4);
  const std::vector<std::vector<int64_t>> expected = {
      {0, 1, 2, 3, 4, 5, 6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}, {16}, {17}, {18}};
  CHECK(finer == expected);
  CHECK(capture::with_finer_tail(batches, 10, 1) == batches);  // one part: as they were
  CHECK(capture::with_finer_tail({}, 4, 4).empty());
}

TEST_CASE("a window's batches fill the token budget with padded tokens, or packed with their own tokens") {
  // Window [1, 5) of these lengths, longest first: 9 (position 3), 5 (2), 3 (1), 2 (4).
  const std::vector<int64_t> lengths = {100, 3, 5, 9, 2, 100};
  const std::vector<std::vector<int64_t>> padded = {{3, 2}, {1, 4}};  // 2 x 9 <= 20 < 3 x 9
  CHECK(capture::plan_window_batches(lengths, 1, 5, {0, 20, 64, false}) == padded);
  const std::vector<std::vector<int64_t>> packed = {{3, 2, 1, 4}};  // 9 + 5 + 3 + 2 = 19
  CHECK(capture::plan_window_batches(lengths, 1, 5, {0, 20, 64, true}) == packed);
  CHECK(capture::plan_window_batches(lengths, 1, 5, {0, 18, 64, true}) == std::vector<std::vector<int64_t>>{{3, 2, 1}, {4}});
  CHECK(capture::plan_window_batches(lengths, 1, 5, {0, 1000, 2, true}) == padded);  // two examples a batch at most
  // A sequence longer than the budget is a batch of its own.
  CHECK(capture::plan_window_batches(lengths, 0, 2, {0, 50, 64, true}) == std::vector<std::vector<int64_t>>{{0}, {1}});
}

TEST_CASE("the batching recorded in a capture's files reads back, and files from before packed batching too") {
  capture::Batching packed{1024, 32768, 512, true};
  CHECK(packed.encode() == "1024,32768,512,packed");
  capture::Batching read = capture::Batching::decode(packed.encode());
  CHECK(read.window == 1024);
  CHECK(read.token_budget == 32768);
  CHECK(read.max_examples == 512);
  CHECK(read.packed);
  CHECK_FALSE(capture::Batching::decode("1024,4096,64").packed);
  for (const char* bad : {"1024,4096", "1024,4096,64,padded", "1024,0,64", "x,4096,64", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(capture::Batching::decode(bad), doctest::Contains("no usable batching"));
  }
}

TEST_CASE("the window queue hands out batches across window boundaries and finishes windows in run order") {
  // Windows of 3 run positions, one batch per position; at most two windows open.
  capture::WindowQueue queue(0, 9, 3, 2, [](int64_t begin, int64_t end) {
    capture::WindowWork work{std::make_shared<capture::WindowRows>(), {}};
    work.rows->begin = begin;
    work.rows->end = end;
    for (int64_t p = begin; p < end; ++p) work.batches.push_back({p});
    return work;
  });
  std::vector<capture::WindowQueue::Task> tasks;
  for (int i = 0; i < 6; ++i) tasks.push_back(*queue.next());
  // Window 0's batches all handed out, the next worker takes window 1's while window 0 still computes.
  CHECK(tasks[3].window == 1);
  CHECK((*tasks[3].batch)[0] == 3);
  // Two windows open at most: a worker asking for window 2 waits until window 0 completes.
  auto waiting = std::async(std::launch::async, [&] { return queue.next(); });
  CHECK(waiting.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  std::vector<int64_t> finished;
  auto record = [&](std::shared_ptr<capture::WindowRows> rows) { finished.push_back(rows->begin); };
  for (size_t t : {3, 4, 5, 1, 2}) queue.done(tasks[t], record);
  CHECK(finished.empty());  // window 1 is complete, but window 0 waits for its first batch
  queue.done(tasks[0], record);
  CHECK(finished == std::vector<int64_t>{0, 3});
  std::optional<capture::WindowQueue::Task> next = waiting.get();
  REQUIRE(next.has_value());
  CHECK(next->window == 2);
  // After a failure (abort) no more batches are handed out.
  queue.abort();
  CHECK_FALSE(queue.next().has_value());
}

TEST_CASE("a run keeps a window open a worker, at least two, within a quarter of the host's memory") {
  CHECK(capture::windows_open(1, 1e9, 64e9) == 2);
  CHECK(capture::windows_open(2, 1e9, 64e9) == 2);
  CHECK(capture::windows_open(4, 1e9, 64e9) == 4);
  CHECK(capture::windows_open(8, 3.9e9, 64e9) == 4);   // four windows of rows take 15.6 of the 16 GB allowed
  CHECK(capture::windows_open(4, 10e9, 16e9) == 2);    // two at least, whatever they take
  CHECK(capture::windows_open(4, 1e9, 0) == 4);        // the host's memory unknown
}

TEST_CASE("--shard auto: the launch's rank is the shard, its local rank the GPU when the device is left to it") {
  LaunchRank launch{"torchrun", 5, 16, 3, "RANK=5 WORLD_SIZE=16 LOCAL_RANK=3"};
  capture::CaptureOptions o;
  capture::apply_launch_rank(launch, 8, o);
  CHECK(o.shard_index == 5);
  CHECK(o.shard_count == 16);
  CHECK(o.device == "cuda:3");
  // One GPU visible per task (Slurm's --gpus-per-task=1): local rank 3 is that GPU, cuda:0.
  o = {};
  capture::apply_launch_rank(launch, 1, o);
  CHECK(o.device == "cuda:0");
  // An explicit device, --devices, no GPU or no local rank: the device stays as given.
  for (const char* device : {"cpu", "cuda:1"}) {
    o = {};
    o.device = device;
    capture::apply_launch_rank(launch, 8, o);
    CHECK(o.device == device);
  }
  o = {};
  o.devices = {"cuda:0", "cuda:1"};
  capture::apply_launch_rank(launch, 8, o);
  CHECK(o.device == "auto");
  o = {};
  capture::apply_launch_rank(launch, 0, o);
  CHECK(o.device == "auto");
  launch.local_rank = -1;
  o = {};
  capture::apply_launch_rank(launch, 8, o);
  CHECK(o.device == "auto");
  CHECK(o.shard_index == 5);
}

namespace {

// `count` shards of a 30-example capture of `layers` (seed 42) in tmp/sharded; their directories.
std::vector<std::string> capture_shards(const TempDir& tmp, int64_t count, const std::string& layers) {
  capture::CaptureOptions o = three_action_capture(tmp, 30, "cpu");
  o.layers = layers;
  o.output_dir = tmp.file("sharded");
  o.shard_count = count;
  for (int64_t i = 0; i < count; ++i) {
    o.shard_index = i;
    capture::run_capture(o);
  }
  return capture::find_shard_dirs(tmp.file("sharded"));
}

// Two shards of layer 2.
std::vector<std::string> two_shards(const TempDir& tmp) { return capture_shards(tmp, 2, "2"); }

}  // namespace

TEST_CASE("merge: an output that is or lies inside a shard directory is refused, --overwrite or not; the shard survives") {
  TempDir tmp;
  std::vector<std::string> shards = two_shards(tmp);
  const std::string shard_file = shards[0] + "/" + activations::layer_file_name(2);
  const activations::ActivationFile before = activations::read_activation_file(shard_file);
  REQUIRE(::symlink(shards[0].c_str(), tmp.file("link").c_str()) == 0);
  for (bool virtual_files : {true, false}) {
    for (bool overwrite : {true, false}) {
      CAPTURE(virtual_files);
      CAPTURE(overwrite);
      capture::MergeOptions m;
      m.virtual_files = virtual_files;
      m.overwrite = overwrite;
      // Regression: --virtual --overwrite into a shard's own directory replaced it with a file mapping itself.
      CHECK_THROWS_WITH_AS(capture::merge_shards(shards, shards[0], m), doctest::Contains("is the shard directory"), UsageError);
      CHECK_THROWS_WITH_AS(capture::merge_shards(shards, tmp.file("link"), m), doctest::Contains("is the shard directory"),
                           UsageError);
      CHECK_THROWS_WITH_AS(capture::merge_shards(shards, shards[1] + "/merged", m),
                           doctest::Contains("lies inside the shard directory"), UsageError);
    }
  }
  check_same_rows(activations::read_activation_file(shard_file), before);
  CHECK_FALSE(path_exists(shards[1] + "/merged"));
  CommandResult r = run_command(fmt::format("{} --virtual --overwrite --output-dir {} {} {}", tool("merge_activations"),
                                            shards[0], shards[0], shards[1]));
  check_failure(r, 2, {"is the shard directory", "choose an --output-dir outside every shard"});
  check_same_rows(activations::read_activation_file(shard_file), before);
  // The default layout, the output holding the shard directories, merges.
  capture::MergeOptions m;
  m.virtual_files = true;
  CHECK(capture::merge_shards(shards, tmp.file("sharded"), m).size() == 1);
}

TEST_CASE("a virtual merge records its sources: a shard captured again since is refused by every reader, naming it") {
  TempDir tmp;
  std::vector<std::string> shards = two_shards(tmp);
  capture::MergeOptions m;
  m.virtual_files = true;
  const std::string merged = capture::merge_shards(shards, tmp.file("sharded"), m).front();
  CHECK(activations::read_activation_file(merged).attributes.seed == 42);
  // Regression: shard 0 captured again with another seed (same shapes) was paired with the merged file's old
  // labels and indices, and the trainer took it.
  capture::CaptureOptions o = three_action_capture(tmp, 30, "cpu");
  o.layers = "2";
  o.output_dir = tmp.file("sharded");
  o.shard_count = 2;
  o.shard_index = 0;
  o.seed = 7;
  o.overwrite = true;
  capture::run_capture(o);
  const std::string changed = "shard_0_of_2/" + activations::layer_file_name(2);
  CHECK_THROWS_WITH_AS(activations::read_activation_file(merged), doctest::Contains(changed.c_str()), std::runtime_error);
  CHECK_THROWS_WITH_AS(activations::read_attributes(merged), doctest::Contains("changed since the merge (seed was 42, is now 7)"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(activations::read_layouts(merged), doctest::Contains("merge the shards again"), std::runtime_error);
  CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 2 --device cpu --quiet",
                                            tool("train_binary_probes"), merged, tmp.file("probes")));
  check_failure(r, 1, {changed.c_str(), "changed since the merge"});
  // Shard 1 captured again too and the shards merged again, it reads; a source gone is named too.
  o.shard_index = 1;
  capture::run_capture(o);
  capture::MergeOptions again = m;
  again.overwrite = true;
  CHECK(activations::read_activation_file(capture::merge_shards(shards, tmp.file("sharded"), again).front()).attributes.seed == 7);
  remove_tree(shards[1] + "/" + activations::layer_file_name(2));
  CHECK_THROWS_WITH_AS(activations::read_attributes(merged), doctest::Contains("layer_2_activations.h5, which is missing; put it back"), std::runtime_error);
}

TEST_CASE("merge: every layer the run captured, in every shard, or an error naming the file; outputs checked before "
          "any is written") {
  TempDir tmp;
  const std::vector<std::string> shards = capture_shards(tmp, 3, "1,3");
  const std::string merged = tmp.file("merged");
  REQUIRE(capture::merge_shards(shards, merged, {}).size() == 2);
  // Regression: layer 1's file was written before layer 3's, which exists, was refused.
  const std::string merged_1 = merged + "/" + activations::layer_file_name(1);
  remove_tree(merged_1);
  CHECK_THROWS_WITH_AS(capture::merge_shards(shards, merged, {}),
                       doctest::Contains("layer_3_activations.h5 already exists; pass --overwrite"), std::runtime_error);
  CHECK_FALSE(path_exists(merged_1));

  // Regression: the layers merged were those of shard 0's directory, so shard 0 without layer 3 (left .partial by a
  // kill between its two layers' finish(), or deleted) merged layer 1 alone, exit 0.
  const std::string layer_3 = shards[0] + "/" + activations::layer_file_name(3);
  rename_path(layer_3, activations::partial_path_for(layer_3));
  const std::string merge = fmt::format("{} --output-dir {} {} {} {}", tool("merge_activations"), tmp.file("again"),
                                        shards[0], shards[1], shards[2]);
  check_failure(run_command(merge), 1,
                {"shard_0_of_3/layer_3_activations.h5 is incomplete: its capture was interrupted", "--resume"});
  remove_tree(activations::partial_path_for(layer_3));
  check_failure(run_command(merge), 1, {"shard_0_of_3/layer_3_activations.h5 is missing"});
  // Gone from every shard, layer 3 is still named by the files' layers attribute.
  for (const std::string& dir : shards) remove_tree(dir + "/" + activations::layer_file_name(3));
  check_failure(run_command(merge), 1, {"layer_3_activations.h5 is missing: the run captured layers 1, 3"});
  CHECK_FALSE(path_exists(tmp.file("again")));
}

