// Layers split over two GPUs: the hidden state, positions and cached keys move between them, and the rows are
// bitwise those of one GPU in fp32 (skipped with fewer than two GPUs).
#include <doctest/doctest.h>

#include <ATen/cuda/CUDAContext.h>

#include "capture/capture.h"
#include "activations/activation_store.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;

namespace {
const std::string kModel = std::string(PROBEKIT_FIXTURES) + "/models/gemma3_text";
}  // namespace

TEST_CASE("a model split over cuda:0 and cuda:1 reads bitwise the rows of cuda:0 alone (fp32), prefixes included") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  model::LoadOptions load;
  load.device = at::Device(at::kCUDA, 0);
  model::TransformerModel whole = model::TransformerModel::load(kModel, load);
  for (int64_t l = 0; l < whole.loaded_layers(); ++l) {
    load.layer_devices.push_back(at::Device(at::kCUDA, l < whole.loaded_layers() / 2 ? 0 : 1));
  }
  model::TransformerModel split = model::TransformerModel::load(kModel, load);
  readout::Request request{readout::Site::kResidPost, readout::Position::kLast, {1, 4, 5}, 1};
  std::vector<readout::Sequence> texts = {{2, 10, 11, 12, 13}, {2, 14, 15}};
  at::Tensor rows = readout::read_rows(split, texts, request);
  CHECK(rows.device() == load.device);
  CHECK(at::equal(rows, readout::read_rows(whole, texts, request)));
  request.position = readout::Position::kAll;
  CHECK(at::equal(readout::read_rows(split, texts, request), readout::read_rows(whole, texts, request)));
  request.position = readout::Position::kLast;
  CHECK(at::equal(readout::read_prefixes(split, texts[0], {20, 21}, request),
                  readout::read_prefixes(whole, texts[0], {20, 21}, request)));
}

TEST_CASE("capture with --placement layers over two GPUs writes the rows of one GPU (fp32, same batches)") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  probekit::testing::TempDir tmp;
  std::string dataset = tmp.file("data.jsonl");
  probekit::testing::write_three_action_dataset(dataset, 64);
  capture::CaptureOptions o;
  o.model_dir = kModel;
  o.dataset_path = dataset;
  o.device = "cuda:0";
  o.dtype = "fp32";
  o.layers = "1,5";
  o.batch_size = 5;
  o.window = 16;
  o.output_dir = tmp.file("one");
  capture::run_capture(o);
  o.devices = {"cuda:0", "cuda:1"};
  o.placement = "layers";
  o.output_dir = tmp.file("split");
  capture::run_capture(o);
  for (int64_t layer : {1, 5}) {
    auto one = activations::read_activation_file(tmp.file("one/" + activations::layer_file_name(layer)));
    auto split = activations::read_activation_file(tmp.file("split/" + activations::layer_file_name(layer)));
    for (activations::Split s : activations::kSplits) CHECK(split.split(s).activations == one.split(s).activations);
  }
}
