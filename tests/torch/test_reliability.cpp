// Reliability, as a demanding user and an attacker would try it: inputs that are FIFOs or devices, outputs
// that already exist, writes that fail, resumed runs with other settings, probes of another model, numbers
// that are not finite, and the error messages and exit codes of each. Every case is a row of the bad-input table,
// docs/bad_input.md.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture/merge.h"
#include "common/files.h"
#include "common/json.h"
#include "common/run_lock.h"
#include "io/safetensors.h"
#include "probes/probe_catalog.h"
#include "probes/synthetic_activations.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

std::string write_labelled(const TempDir& tmp, const std::string& name, const std::vector<std::string>& labels,
                           int per_label) {
  std::string lines;
  for (int i = 0; i < per_label * static_cast<int>(labels.size()); ++i) {
    const std::string& label = labels[static_cast<size_t>(i) % labels.size()];
    lines += Json({{"text", fmt::format("Example {} about {} and what followed.", i, label)}, {"cognitive_action", label}})
                 .dump() + "\n";
  }
  write_text(tmp.file(name), lines);
  return tmp.file(name);
}

std::string capture_command(const std::string& model, const std::string& dataset, const std::string& out) {
  return fmt::format("{} --model {} --dataset {} --device cpu --layers 2 --output-dir {} -q", tool("capture_activations"),
                     model, dataset, out);
}

// Activations of layer 2 and probes trained on them: tmp/act, tmp/probes; the training's run (its log with
// `train_flags` other than -q).
CommandResult capture_and_train(const TempDir& tmp,
                                const std::vector<std::string>& labels = {"analyzing", "noticing", "reframing"},
                                const std::string& train_flags = "-q") {
  std::string dataset = write_labelled(tmp, "data.jsonl", labels, 8);
  CommandResult r = run_command(capture_command(kGemmaModel, dataset, tmp.file("act")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 3 --device cpu {}", tool("train_binary_probes"),
                              tmp.file("act"), tmp.file("probes"), train_flags));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return r;
}

// The Gemma 3 fixture with query_pre_attn_scalar: 0, which makes the attention scale infinite: tmp/broken.
std::string broken_gemma(const TempDir& tmp) {
  copy_dir(kGemmaModel, tmp.file("broken"));
  Json config = read_json_file(tmp.file("broken/config.json"));
  config["query_pre_attn_scalar"] = 0;
  write_json_file(tmp.file("broken/config.json"), config);
  return tmp.file("broken");
}

std::string inference(const std::string& probes, const std::string& model, const std::string& extra) {
  return fmt::format("{} --probes-dir {} --model {} --device cpu --text 'I looked again.' {}", tool("multi_probe_inference"),
                     probes, model, extra);
}

// Writes `names` as the activation file's label_names in place of its own, bytes as given (as another program could).
void replace_label_names(const std::string& file, const std::vector<std::string>& names) {
  hid_t h5 = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(h5 >= 0);
  H5Adelete(h5, "label_names");
  std::vector<const char*> pointers;
  for (const std::string& n : names) pointers.push_back(n.c_str());
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hsize_t count = names.size();
  hid_t space = H5Screate_simple(1, &count, nullptr);
  hid_t attribute = H5Acreate2(h5, "label_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attribute, type, pointers.data());
  H5Aclose(attribute);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(h5);
}

}  // namespace

TEST_CASE("a dataset on a pipe or standard input is read once, the same as from a file; --resume is refused for it") {
  TempDir tmp;
  std::string dataset = write_labelled(tmp, "data.jsonl", {"analyzing", "noticing", "reframing"}, 8);
  // `timeout` turns a hang into a failure of this test instead of a stuck suite.
  CommandResult r = run_command("timeout 60 " + capture_command(kGemmaModel, dataset, tmp.file("file")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  r = run_command(fmt::format("cat {} | timeout 60 {}", dataset, capture_command(kGemmaModel, "-", tmp.file("stdin"))));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  r = run_command(fmt::format("bash -c 'timeout 60 {}'", capture_command(kGemmaModel, "<(cat " + dataset + ")", tmp.file("pipe"))));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const activations::ActivationFile from_file = activations::read_activation_file(tmp.file("file/layer_2_activations.h5"));
  for (const char* out : {"stdin", "pipe"}) {
    CAPTURE(out);
    const activations::ActivationFile streamed =
        activations::read_activation_file(tmp.file(std::string(out) + "/layer_2_activations.h5"));
    CHECK(streamed.attributes.dataset_sha256 == from_file.attributes.dataset_sha256);
    for (activations::Split split : activations::kSplits) {
      CHECK(streamed.split(split).activations == from_file.split(split).activations);
      CHECK(streamed.split(split).labels == from_file.split(split).labels);
    }
  }
  r = run_command(fmt::format("cat {} | timeout 60 {} --resume", dataset, capture_command(kGemmaModel, "-", tmp.file("stdin"))));
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--resume with --dataset -: a dataset read from standard input or a pipe cannot be read again");
}

TEST_CASE("a FIFO where a file is expected is named, never waited on (model, tokenizer, probes)") {
  TempDir tmp;
  REQUIRE(mkfifo(tmp.file("fifo").c_str(), 0600) == 0);
  CommandResult r;

  copy_dir(kGemmaModel, tmp.file("model"));
  remove_tree(tmp.file("model/model.safetensors"));
  REQUIRE(mkfifo(tmp.file("model/model.safetensors").c_str(), 0600) == 0);
  r = run_command(fmt::format("timeout 60 {} info --model {}", tool("inspect_model"), tmp.file("model")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "model.safetensors: is a FIFO");

  r = run_command(fmt::format("timeout 60 {} tokenize --tokenizer {} --text hi", tool("inspect_model"), tmp.file("fifo")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "is a FIFO");

  make_directories(tmp.file("probes"));
  REQUIRE(mkfifo(tmp.file("probes/probes.json").c_str(), 0600) == 0);
  r = run_command("timeout 60 " + inference(tmp.file("probes"), kGemmaModel, ""));
  CHECK(r.exit_code == 1);
}

TEST_CASE("outputs: replaced only with --overwrite, never a device, and a failed write is never a success") {
  TempDir tmp;
  capture_and_train(tmp);
  std::string train = fmt::format("{} --activations {} --output-dir {} --epochs 2 --device cpu -q", tool("train_binary_probes"),
                                  tmp.file("act"), tmp.file("probes"));
  CommandResult r = run_command(train + " --labels analyzing,noticing");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "already exists and is not empty; pass --overwrite");
  CHECK(read_json_file(tmp.file("probes/probes.json"))["probes"].size() == 3);
  r = run_command(train + " --labels analyzing,noticing --overwrite");
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(read_json_file(tmp.file("probes/probes.json"))["probes"].size() == 2);
  for (const std::string& name : list_directory(tmp.path())) {
    CHECK_MESSAGE(name.find("probes.partial") == std::string::npos, name);  // staged, then moved into place whole
    CHECK_MESSAGE(name.find("probes.replaced") == std::string::npos, name);
  }

  std::string make = fmt::format("{} dataset --output {} --labels 2 --per-label 3 -q", tool("make_example"), tmp.file("d.jsonl"));
  CHECK(run_command(make).exit_code == 0);
  r = run_command(make);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "already exists; pass --overwrite");
  CHECK(run_command(make + " --overwrite").exit_code == 0);
  // A write past a file size limit fails like a full disk: exit 1, and no file under the final name.
  r = run_command(fmt::format("sh -c 'ulimit -f 1; {} dataset --output {} --labels 8 --per-label 40 -q'", tool("make_example"),
                              tmp.file("big.jsonl")));
  CHECK(r.exit_code == 1);
  CHECK_FALSE(path_exists(tmp.file("big.jsonl")));

  r = run_command(inference(tmp.file("probes"), kGemmaModel, "--per-token --csv /dev/null"));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "/dev/null: is a character device");
  symlink("/dev/null", tmp.file("link.csv").c_str());
  CHECK_CONTAINS(run_command(inference(tmp.file("probes"), kGemmaModel, "--per-token --csv " + tmp.file("link.csv"))).output,
                 "is a character device");

  r = run_command("sh -c \"" + inference(tmp.file("probes"), kGemmaModel, "--json") + " > /dev/full\"");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "cannot write the output to standard output");
}

TEST_CASE("--resume refuses other arguments, naming the one that differs") {
  TempDir tmp;
  std::string dataset = write_labelled(tmp, "data.jsonl", {"analyzing", "noticing"}, 12);
  std::string base = capture_command(kGemmaModel, dataset, tmp.file("out"));
  REQUIRE(run_command(base + " --max-examples 16").exit_code == 0);
  CommandResult r = run_command(base + " --max-examples 20 --resume");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "max_examples=16 but this run has max_examples=20");
  r = run_command(base + " --max-examples 16 --keep-fields cognitive_action --resume");
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "keep_fields=");
}

TEST_CASE("capture checks its data first: labels that cannot name probe files, empty splits, --max-length") {
  TempDir tmp;
  CommandResult r = run_command(capture_command(kGemmaModel, write_labelled(tmp, "case.jsonl", {"Analyzing", "analyzing"}, 8),
                                                tmp.file("a")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "labels 'Analyzing' and 'analyzing' differ only in case");
  r = run_command(capture_command(kGemmaModel, write_labelled(tmp, "few.jsonl", {"a", "b", "c"}, 1), tmp.file("b")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "split comes out empty");
  CHECK_CONTAINS(r.output, "a (1), b (1), c (1)");
  r = run_command(capture_command(kGemmaModel, write_labelled(tmp, "ok.jsonl", {"a", "b"}, 8), tmp.file("c")) + " --max-length 4");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--max-length 4 tokens leaves no room for text");
}

TEST_CASE("non-finite numbers stop the run: activations at capture, probe weights at inference, a diverging training") {
  TempDir tmp;
  std::string dataset = write_labelled(tmp, "data.jsonl", {"analyzing", "noticing"}, 8);
  CommandResult r = run_command(capture_command(broken_gemma(tmp), dataset, tmp.file("out")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "the activations of layer 2 are not finite");
  CHECK_CONTAINS(r.output, "data.jsonl:");

  // A NaN weight in layer 3 leaves layer 1 finite: the message names the first captured layer that is not.
  copy_dir(kGemmaModel, tmp.file("nan_layer"));
  std::string weights = read_file(tmp.file("nan_layer/model.safetensors"));
  {
    safetensors::File file(tmp.file("nan_layer/model.safetensors"));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(weights.data() + file.at("model.layers.3.mlp.down_proj.weight").data_begin, &nan, sizeof nan);
  }
  write_file_atomic(tmp.file("nan_layer/model.safetensors"), weights);
  r = run_command(fmt::format("{} --model {} --dataset {} --device cpu --layers 1,4 --output-dir {} -q",
                              tool("capture_activations"), tmp.file("nan_layer"), dataset, tmp.file("out_nan")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "the activations of layer 4 are not finite");

  capture_and_train(tmp);
  std::string probe = tmp.file("probes/probe_analyzing.safetensors");
  std::string bytes = read_file(probe);
  safetensors::File file(probe);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + file.at("linear.bias").data_begin, &nan, sizeof nan);
  write_file_atomic(probe, bytes);
  r = run_command(inference(tmp.file("probes"), kGemmaModel, ""));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "probe_analyzing.safetensors: tensor 'linear.bias' holds NaN or infinite values");

  r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 5 --lr 1e30 --device cpu -q",
                              tool("train_binary_probes"), tmp.file("act"), tmp.file("diverged")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "diverged at epoch");
  CHECK_CONTAINS(r.output, "Lower --lr");
  CHECK_FALSE(path_exists(tmp.file("diverged")));
}

TEST_CASE("probes refuse another model, even of the same width, unless --force") {
  TempDir tmp;
  capture_and_train(tmp);
  copy_dir(kGemmaModel, tmp.file("other"));
  Json config = read_json_file(tmp.file("other/config.json"));
  config["rms_norm_eps"] = 1e-5;
  write_json_file(tmp.file("other/config.json"), config);
  CommandResult r = run_command(inference(tmp.file("probes"), tmp.file("other"), ""));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "these probes were trained on another model");
  CHECK_CONTAINS(r.output, "pass --force");
  r = run_command(inference(tmp.file("probes"), tmp.file("other"), "--force"));
  CHECK(r.exit_code == 0);
  CHECK_CONTAINS(r.output, "running them anyway (--force)");
  CHECK(run_command(inference(tmp.file("probes"), kGemmaModel, "")).exit_code == 0);
}

TEST_CASE("labels stored as floating point are refused, naming the group and the row") {
  TempDir tmp;
  probes::SyntheticActivations spec = probes::uniform_synthetic(2, {6, 3, 3}, 8);
  std::string path = tmp.file("layer_0_activations.h5");
  probes::write_synthetic_activation_file(path, spec);
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  REQUIRE(H5Ldelete(file, "val/labels", H5P_DEFAULT) >= 0);
  std::vector<double> labels = {0, 1, 0.5, 1, 0, 1};
  hsize_t count = labels.size();
  hid_t space = H5Screate_simple(1, &count, nullptr);
  hid_t dataset = H5Dcreate2(file, "val/labels", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
  H5Dclose(dataset);
  H5Sclose(space);
  H5Fclose(file);
  CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --device cpu -q", tool("train_binary_probes"),
                                            path, tmp.file("out")));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "'val'/labels: row 2 holds 0.5, stored as a floating-point number");
}

TEST_CASE("train_probes keeps a best epoch when validation accuracy stays 0") {
  TempDir tmp;
  // Validation holds only a class no training example has: every epoch scores 0 there.
  probes::SyntheticActivations spec = probes::uniform_synthetic(3, {12, 0, 4}, 8);
  spec.examples[2] = {0, 6, 0};
  std::string path = tmp.file("layer_0_activations.h5");
  probes::write_synthetic_activation_file(path, spec);
  CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 3 --device cpu -q --json",
                                            tool("train_probes"), path, tmp.file("out")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(path_exists(tmp.file("out/best_probe.safetensors")));
  CHECK(read_json_file(tmp.file("out/training_history.json"))["best_epoch"] == 1);
}

TEST_CASE("inputs in the wrong encoding or shape, and flags out of range, are named") {
  TempDir tmp;
  write_text(tmp.file("bom.json"), "\xEF\xBB\xBF" + read_file(kGemmaModel + "/tokenizer.json"));
  CHECK(run_command(fmt::format("{} tokenize --tokenizer {} --text hi", tool("inspect_model"), tmp.file("bom.json"))).exit_code == 0);

  Json tokenizer = read_json_file(kGemmaModel + "/tokenizer.json");
  auto& vocab = tokenizer["model"]["vocab"];
  vocab[vocab.begin().key()] = std::next(vocab.begin()).value();
  write_json_file(tmp.file("dup.json"), tokenizer);
  check_failure(run_command(fmt::format("{} tokenize --tokenizer {} --text hi", tool("inspect_model"),
                                        tmp.file("dup.json"))),
                1, {"is given to both"});

  write_text(tmp.file("utf16.jsonl"), std::string("\xFF\xFE{\0\"\0", 6));
  check_failure(run_command(capture_command(kGemmaModel, tmp.file("utf16.jsonl"), tmp.file("out"))), 1,
                {"the file is UTF-16 or UTF-32 text"});

  check_failure(run_command(fmt::format("{} hidden --model {} --text hi --output {} --device cpu --dtype fp16",
                                        tool("inspect_model"), kGemmaModel, tmp.file("h.safetensors"))),
                2, {"the CPU cannot run fp16"});

  for (const char* bad : {"--threshold nan", "--threshold 2", "--top-k 0", "--batch-size 0", "--threads 100000"}) {
    CommandResult r = run_command(inference(tmp.path(), kGemmaModel, bad));
    CHECK_MESSAGE(r.exit_code == 2, bad, ": ", r.output);
  }
  check_failure(run_command(inference(tmp.path(), kGemmaModel, "--thresold 0.3")), 2,
                {"--thresold: did you mean --threshold?"});
  CHECK_CONTAINS(run_command(tool("capture_activations") + " --version").output, "probekit ");
  CommandResult info = run_command(fmt::format("{} info --model {} -q --json", tool("inspect_model"), kGemmaModel));
  CHECK_MESSAGE(info.exit_code == 0, info.output);

  // Regressions: a dataset given as activations read "cannot open HDF5 file ...: file signature not found", and a
  // capture's folder given to train_probes "is a directory, expected a regular file".
  make_directories(tmp.file("act"));
  write_text(tmp.file("act/layer_3_activations.h5"), "{\"text\": \"a\"}\n");
  check_failure(run_command(fmt::format("{} --activations {} --output-dir {} --device cpu", tool("train_binary_probes"),
                                        tmp.file("act"), tmp.file("p1"))),
                1, {"layer_3_activations.h5: not an HDF5 file (it does not start as one)"});
  check_failure(run_command(fmt::format("{} --activations {} --output-dir {} --device cpu", tool("train_probes"),
                                        tmp.file("act"), tmp.file("p2"))),
                2, {"a directory; train_probes trains on one layer's file, as", "(train_binary_probes takes a directory)"});
}

TEST_CASE("a misspelt flag or subcommand is named first, not reported as a required one missing") {
  // Regression: CLI11 checks required flags and subcommands before the arguments it could not use, so `--modle M`
  // read "--model is required" and `inspect_model inf` read "A subcommand is required", the typo never named.
  CommandResult r = run_command(fmt::format("{} --modle {} --dataset d.jsonl", tool("capture_activations"), kGemmaModel));
  check_failure(r, 2, {"--modle: unknown flag (did you mean --model?)"});
  CHECK_MESSAGE(r.output.find("--modle: unknown flag") < r.output.find("--model is required"), r.output);
  check_failure(run_command(tool("train_binary_probes") + " --activation x"), 2,
                {"--activation: unknown flag (did you mean --activations?)"});
  r = run_command(fmt::format("{} inf --model {}", tool("inspect_model"), kGemmaModel));
  check_failure(r, 2, {"unknown subcommand 'inf' (expected one of: info, hidden, generate, tokenize, chat-template, device)"});
  CHECK_MESSAGE(r.output.find("A subcommand is required") == std::string::npos, r.output);
  check_failure(run_command(tool("make_example") + " modl --output x"), 2,
                {"unknown subcommand 'modl' (expected one of: dataset, model)"});
  // With nothing left unused, a missing flag or subcommand reads as before.
  check_failure(run_command(tool("train_binary_probes")), 2, {"--activations is required"});
  check_failure(run_command(tool("make_example")), 2, {"A subcommand is required"});
}

TEST_CASE("a flag's value CLI11 cannot take is named with what was expected") {
  // Regression: CLI11's own words, "Could not convert: --epochs = abc" and "--threads: Value abc not in range".
  const std::string train = tool("train_binary_probes") + " --activations x ";
  check_failure(run_command(train + "--epochs abc"), 2, {"--epochs: must be a whole number, got abc"});
  check_failure(run_command(train + "--C abc"), 2, {"--C abc: expected a number"});
  check_failure(run_command(train + "--model-type linaer"), 2,
                {"--model-type linaer: expected one of ", "linear, ", "(did you mean linear?)"});
  check_failure(run_command(tool("inspect_model") + " --threads abc device"), 2,
                {"--threads abc: expected a number from 0 to 4096"});
  check_failure(run_command(tool("probe_server") + " --probes-dir x --request-timeout abc"), 2,
                {"--request-timeout abc: expected a number from 0.001 to 86400"});
  // Regression: CLI11's PositiveNumber read "expected a number from 0 to 1.79769e+308", 0 inside it.
  check_failure(run_command(tool("capture_activations") + " --model x --dataset x --sae-top-k 0"), 2,
                {"--sae-top-k 0: expected a whole number above 0"});
}

TEST_CASE("a text too long for the CPU's memory is refused before the model loads, naming the line and --max-length") {
  TempDir tmp;
  std::string lines;
  for (int i = 0; i < 16; ++i) {
    std::string text = i == 5 ? std::string() : fmt::format("short text {}", i);
    for (int w = 0; i == 5 && w < 60000; ++w) text += "word ";
    lines += Json({{"text", text}, {"cognitive_action", i % 2 == 0 ? "a" : "b"}}).dump() + "\n";
  }
  write_text(tmp.file("huge.jsonl"), lines);
  check_failure(run_command(capture_command(kGemmaModel, tmp.file("huge.jsonl"), tmp.file("out"))), 1,
                {"huge.jsonl:6: this text's prompt is", "cut long texts with --max-length"});
}

TEST_CASE("Ctrl-C during training into an existing probes directory stops it, saying what was kept") {
  TempDir tmp;
  capture_and_train(tmp);
  const std::string train = fmt::format(
      "{} --activations {} --output-dir {} --epochs 1000000 --early-stopping-patience -1 --device cpu -q --overwrite",
      tool("train_binary_probes"), tmp.file("act"), tmp.file("probes"));
  // sh starts a background job with SIGINT ignored, which env resets to the default a foreground job has. The signals
  // go once the staging directory is there: the tool's handlers are in place by then.
  const std::string started = fmt::format(
      "for i in $(seq 600); do ls -d {}.partial-* >/dev/null 2>&1 && break; sleep 0.1; done; sleep 1;", tmp.file("probes"));
  CommandResult r = run_command(fmt::format(
      "{{ env --default-signal=INT {} & pid=$!; {} kill -INT $pid; wait $pid; echo \"exit $?\"; }}", train, started));
  CHECK_CONTAINS(r.output, "interrupted: the output directory is as it was before this run");
  CHECK_CONTAINS(r.output, "exit 130");
  // Regression: started with SIGINT ignored (a script's background job), the tool stopped at the terminal's Ctrl-C;
  // it keeps ignoring it, and SIGTERM still stops it.
  r = run_command(fmt::format("{{ {} & pid=$!; {} kill -INT $pid; sleep 2; kill -0 $pid && echo running; "
                              "kill -TERM $pid; wait $pid; echo \"exit $?\"; }}", train, started));
  CHECK_CONTAINS(r.output, "running");
  CHECK_CONTAINS(r.output, "exit 130");
  CHECK(read_json_file(tmp.file("probes/probes.json"))["probes"].size() == 3);
  for (const std::string& name : list_directory(tmp.path())) CHECK_MESSAGE(name.find("probes.partial") == std::string::npos, name);
}

TEST_CASE("a probes.json value of the wrong type names the file and the key") {
  TempDir tmp;
  capture_and_train(tmp);
  Json index = read_json_file(tmp.file("probes/probes.json"));
  index["layer"] = "two";
  write_json_file(tmp.file("probes/probes.json"), index);
  CommandResult r = run_command(inference(tmp.file("probes"), kGemmaModel, ""));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "probes.json: 'layer' must be an integer, got \"two\"");
  index["layer"] = 2;
  index["probes"][0]["threshold"] = "high";
  write_json_file(tmp.file("probes/probes.json"), index);
  r = run_command(inference(tmp.file("probes"), kGemmaModel, ""));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "probes[0]: 'threshold' must be a number, got \"high\"");
  // Values out of range are errors of the file (exit 1), naming the value.
  index["probes"][0]["threshold"] = 0.5;
  index["layer"] = -3;
  write_json_file(tmp.file("probes/probes.json"), index);
  r = run_command(inference(tmp.file("probes"), kGemmaModel, ""));
  check_failure(r, 1, {"probes.json", "layer -3 is out of range"});
  index["layer"] = 2;
  index["readout"]["position"] = "middle";
  write_json_file(tmp.file("probes/probes.json"), index);
  r = run_command(inference(tmp.file("probes"), kGemmaModel, ""));
  check_failure(r, 1, {"probes.json: readout: 'position' is 'middle', expected last, mean, max or all"});
}

TEST_CASE("a model whose numbers go non-finite is refused by every tool the way capture refuses it") {
  TempDir tmp;
  const std::string broken = broken_gemma(tmp);
  // Regression: inspect_model hidden exited 0 with NaN rows.
  CommandResult r = run_command(fmt::format("{} hidden --model {} --text 'I looked again.' --device cpu --output {}",
                                            tool("inspect_model"), broken, tmp.file("hidden.safetensors")));
  check_failure(r, 1, {"the activations of layer 0 are not finite (NaN or Inf): the checkpoint's weights or its config",
                       "query_pre_attn_scalar: 0"});
  CHECK_FALSE(path_exists(tmp.file("hidden.safetensors")));
  capture_and_train(tmp);
  for (const char* extra : {"--force", "--force --per-token", "--force --generate --max-new-tokens 2"}) {
    CAPTURE(extra);
    r = run_command(inference(tmp.file("probes"), broken, extra));
    check_failure(r, 1, {"not finite (NaN or Inf)", "query_pre_attn_scalar: 0"});
    CHECK(r.output.find(" nan") == std::string::npos);
  }
}

TEST_CASE("two labels of one name are refused, naming the label: an activation file's label_names, probes.json") {
  TempDir tmp;
  capture_and_train(tmp);
  // Regression: an edited label_names with a repeated name trained two probes into one file.
  const std::string file = tmp.file("act/layer_2_activations.h5");
  replace_label_names(file, {"analyzing", "noticing", "analyzing"});
  CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 2 --device cpu -q",
                                            tool("train_binary_probes"), tmp.file("act"), tmp.file("again")));
  check_failure(r, 1, {"label_names holds 'analyzing' twice (labels 0 and 2)"});
  // Regression: two probes of one label in probes.json dropped one of them from every ranking.
  Json index = read_json_file(tmp.file("probes/probes.json"));
  const std::string label = index["probes"][0]["label"].get<std::string>();
  index["probes"][1]["label"] = label;
  write_json_file(tmp.file("probes/probes.json"), index);
  r = run_command(inference(tmp.file("probes"), kGemmaModel, ""));
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, fmt::format("lists label '{}' twice (entries 0 and 1)", label));
}

TEST_CASE("regression: an activation file's label that is not UTF-8 is refused when read, naming it") {
  // A label of stray bytes (Latin-1 "analyz\xE9", written by hand or another program) trained, then failed writing its
  // probe file: the safetensors header's serializer threw its own invalid UTF-8 error, and the training was lost.
  TempDir tmp;
  CommandResult r = run_command(capture_command(kGemmaModel, write_labelled(tmp, "data.jsonl", {"a", "b", "c"}, 8), tmp.file("act")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const std::string file = tmp.file("act/layer_2_activations.h5");
  replace_label_names(file, {"analyz\xE9", "noticing", "other"});
  r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 2 --device cpu -q", tool("train_binary_probes"),
                              tmp.file("act"), tmp.file("again")));
  check_failure(r, 1, {"label_names[0]", "is not UTF-8 text"});
}

TEST_CASE("regression: numbers past int64 in folder and file names, and a damaged layer analysis, are refused naming them") {
  // layer_N and shard_I_of_N folders with N past int64 threw std::stoll's out_of_range ("stoll"), naming nothing: no
  // layer or shard has such a number, so they are not layers' or shards'.
  TempDir tmp;
  const std::string huge = "99999999999999999999";
  make_directories(tmp.file("probes/layer_" + huge));
  write_text(tmp.file("probes/layer_" + huge + "/probes.json"), R"({"layer": 2})");
  CHECK_THROWS_WITH(probes::find_probes(tmp.file("probes")), doctest::Contains("no probes.json and no layer_{L}/probes.json"));
  make_directories(tmp.file("sharded/shard_" + huge + "_of_2"));
  CHECK_THROWS_WITH(capture::find_shard_dirs(tmp.file("sharded")), doctest::Contains("no shard_I_of_N directories"));
  CHECK(activations::layer_from_file_name("act/layer_" + huge + "_activations.h5") == -1);
  // An analysis entry without its action threw the JSON library's out_of_range, naming neither the file nor the key.
  make_directories(tmp.file("analysed"));
  write_text(tmp.file("analysed/probes.json"), R"({"layer": 2})");
  const std::string analysis = tmp.file("analysed/per_action_layer_analysis.json");
  write_text(analysis, R"({"per_action_best_layers": [{"best_layer": 3}]})");
  CHECK_THROWS_WITH(probes::find_probes(tmp.file("analysed")), doctest::Contains((analysis + ": missing 'action'").c_str()));
  write_text(analysis, R"({"per_action_best_layers": {"action": "a"}})");
  CHECK_THROWS_WITH(probes::find_probes(tmp.file("analysed")), doctest::Contains("'per_action_best_layers' must be a list"));
  write_text(analysis, R"([{"action": "a", "best_layer": 3}])");
  CHECK_THROWS_WITH(probes::find_probes(tmp.file("analysed")), doctest::Contains("expected a JSON object"));
  write_text(analysis, R"({"per_action_best_layers": [{"action": "a", "best_layer": 3}]})");
  CHECK(probes::find_probes(tmp.file("analysed")).best_layer.at("a") == 3);
}

TEST_CASE("a directory of several probe kinds (train_binary_probes --model-type a,b) names its kinds' folders") {
  // Regression: it was refused as holding no probes, telling the user to train some.
  TempDir tmp;
  for (const std::string folder : {"kinds/linear", "kinds/logistic/layer_3"}) {
    make_directories(tmp.file(folder));
    write_text(tmp.file(folder + "/probes.json"), R"({"layer": 3})");
  }
  write_text(tmp.file("kinds/comparison.json"), "{}");
  CHECK_THROWS_WITH(probes::find_probes(tmp.file("kinds")),
                    doctest::Contains((tmp.file("kinds") + ": holds no probes itself, but in a folder of each kind (linear, "
                                                           "logistic): pass one of them, as " + tmp.file("kinds/linear"))
                                          .c_str()));
}

TEST_CASE("labels and texts on a terminal show their control characters escaped; JSON escapes them as JSON") {
  TempDir tmp;
  // Regression: a label holding ESC[31m coloured the terminal, one holding BEL rang it.
  CommandResult r = capture_and_train(tmp, {"\x1b[31mred", "bell\x07", "plain"}, "");
  CHECK(r.output.find('\x1b') == std::string::npos);
  for (const char* extra : {"--top-k 3 --threshold 0", "--per-token", "--mode by-layer", "--generate --max-new-tokens 2"}) {
    CAPTURE(extra);
    r = run_command(fmt::format("{} --probes-dir {} --device cpu --text \"$(printf 'I \\033[2J looked \\007 again.')\" {}",
                                tool("multi_probe_inference"), tmp.file("probes"), extra));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK(r.output.find('\x1b') == std::string::npos);
    CHECK(r.output.find('\a') == std::string::npos);
  }
  r = run_command(fmt::format("{} --probes-dir {} --device cpu --text 'I looked again.' --top-k 3 --threshold 0",
                              tool("multi_probe_inference"), tmp.file("probes")));
  CHECK_CONTAINS(r.output, "\\x1b[31mred");
  CHECK_CONTAINS(r.output, "bell\\x07");
  r = run_command(fmt::format("{} --probes-dir {} --device cpu --text 'I looked again.' --top-k 3 --json",
                              tool("multi_probe_inference"), tmp.file("probes")));
  CHECK_CONTAINS(r.output, "\\u001b[31mred");
}

TEST_CASE("a second capture into a directory another capture writes stops at the start, naming the first process") {
  TempDir tmp;
  std::string dataset = write_labelled(tmp, "data.jsonl", {"analyzing", "noticing"}, 8);
  make_directories(tmp.file("out"));
  {
    // Held as a running capture holds it (this process standing in for the first capture).
    RunLock first(tmp.file("out/.capture.lock"), "busy", "wait");
    // Regression: the second capture ran to a rename error at the end.
    CommandResult r = run_command(capture_command(kGemmaModel, dataset, tmp.file("out")));
    check_failure(r, 1, {fmt::format("another capture_activations is writing into {} (process {} holds", tmp.file("out"), getpid()).c_str(),
                         "wait for it to finish, or capture into another --output-dir"});
    CHECK_FALSE(path_exists(tmp.file("out/layer_2_activations.h5.partial")));
    // Another shard of the same run writes into a directory of its own: not held.
    r = run_command(capture_command(kGemmaModel, dataset, tmp.file("out")) + " --shard 1/2");
    CHECK_MESSAGE(r.exit_code == 0, r.output);
  }
  // Once the first is gone (however it ended: the system releases the lock), the next one runs.
  CommandResult r = run_command(capture_command(kGemmaModel, dataset, tmp.file("out")));
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(path_exists(tmp.file("out/layer_2_activations.h5")));
}

// Regression for the restart with sleeping OpenMP threads (tools/start/tool_start.cpp), moved before the libraries
// initialize: without a policy in the environment the tool restarts once and runs; with one it runs as started.
TEST_CASE("tools run whether or not the environment sets OpenMP's wait policy, spinning trainers too") {
  for (const std::string& name : {"merge_activations", "inspect_model", "train_probes"}) {
    CommandResult r = run_command("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + tool(name) + " --version");
    CHECK_MESSAGE(r.exit_code == 0, name, ": ", r.output);
    CHECK_CONTAINS(r.output, "probekit");
    r = run_command("env OMP_WAIT_POLICY=ACTIVE " + tool(name) + " --version");
    CHECK_MESSAGE(r.exit_code == 0, name, ": ", r.output);
  }
}
