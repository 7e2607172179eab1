// Layers split over two GPUs: the hidden state, positions and cached keys move between them, and the rows are
// bitwise those of one GPU in fp32 (skipped with fewer than two GPUs).
#include <doctest/doctest.h>

#include <ATen/cuda/CUDAContext.h>

#include "capture/capture.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "capture_runs.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

TEST_CASE("a model split over cuda:0 and cuda:1 reads bitwise the rows of cuda:0 alone (fp32), prefixes included") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  model::LoadOptions load;
  load.device = at::Device(at::kCUDA, 0);
  model::TransformerModel whole = model::TransformerModel::load(kGemmaModel, load);
  for (int64_t l = 0; l < whole.loaded_layers(); ++l) {
    load.layer_devices.push_back(at::Device(at::kCUDA, l < whole.loaded_layers() / 2 ? 0 : 1));
  }
  model::TransformerModel split = model::TransformerModel::load(kGemmaModel, load);
  readout::Request request{readout::Site::kResidPost, readout::Position::kLast, {1, 4, 5}, 1};
  std::vector<readout::Sequence> texts = {{2, 10, 11, 12, 13}, {2, 14, 15}};
  CHECK(readout::read_rows(split, texts, request).device() == load.device);
  check_split_reads(split, whole, texts, request);
}

TEST_CASE("capture with --placement layers over two GPUs writes the rows of one GPU (fp32, same batches)") {
  if (at::cuda::device_count() < 2) {
    MESSAGE("skipped: needs two GPUs");
    return;
  }
  TempDir tmp;
  capture::CaptureOptions o = three_action_capture(tmp, 64, "cuda:0");
  o.dtype = "fp32";
  o.layers = "1,5";
  o.batch_size = 5;
  o.window = 16;
  check_split_capture(o, tmp, {"cuda:0", "cuda:1"}, {1, 5});
}
