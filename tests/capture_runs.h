// Runs that must agree with one another, shared by the capture, scale and GPU tests: a run and its shards, and a
// model's layers split over several devices, which must read bitwise the rows of one device (fp32; the CPU tests
// count cpu and cpu:0 as two devices, the GPU tests use cuda:0 and cuda:1).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "test_util.h"

namespace probekit::testing {

/// Capture options for kGemmaModel on `device` over `examples` texts of write_three_action_dataset, written to
/// tmp/data.jsonl.
inline capture::CaptureOptions three_action_capture(const TempDir& tmp, int examples, const std::string& device) {
  std::string dataset = tmp.file("data.jsonl");
  write_three_action_dataset(dataset, examples);
  capture::CaptureOptions o;
  o.model_dir = kGemmaModel;
  o.dataset_path = dataset;
  o.device = device;
  return o;
}

/// Captures with `o` whole into tmp/whole, then as `shards` shards into tmp/sharded (shard_I_of_N folders).
inline void capture_whole_and_shards(capture::CaptureOptions o, const TempDir& tmp, int shards) {
  o.output_dir = tmp.file("whole");
  capture::run_capture(o);
  o.output_dir = tmp.file("sharded");
  o.shard_count = shards;
  for (int i = 0; i < shards; ++i) {
    o.shard_index = i;
    capture::run_capture(o);
  }
}

/// Captures with `o` on its one device into tmp/one, then with its layers split over `devices` into tmp/split,
/// and checks that each of `layers` has bitwise the same labels and activations in both.
inline void check_split_capture(capture::CaptureOptions o, const TempDir& tmp, const std::vector<std::string>& devices,
                                const std::vector<int64_t>& layers) {
  o.output_dir = tmp.file("one");
  capture::run_capture(o);
  o.devices = devices;
  o.placement = "layers";
  o.output_dir = tmp.file("split");
  capture::run_capture(o);
  for (int64_t layer : layers) {
    auto one = activations::read_activation_file(tmp.file("one/" + activations::layer_file_name(layer)));
    auto split = activations::read_activation_file(tmp.file("split/" + activations::layer_file_name(layer)));
    for (activations::Split s : activations::kSplits) {
      INFO("layer " << layer << ", " << activations::split_name(s));
      CHECK(split.split(s).labels == one.split(s).labels);
      CHECK(split.split(s).activations == one.split(s).activations);
    }
  }
}

/// Checks that `split` reads bitwise what `whole` reads for `texts` at `request`'s site and layers: the last
/// token's rows, every token's rows, and (at the last token) the prefixes of the first text followed by a suffix.
inline void check_split_reads(const model::TransformerModel& split, const model::TransformerModel& whole,
                              const std::vector<readout::Sequence>& texts, readout::Request request) {
  request.position = Position::kLast;
  CHECK(at::equal(readout::read_rows(split, texts, request), readout::read_rows(whole, texts, request)));
  request.position = Position::kAll;
  CHECK(at::equal(readout::read_rows(split, texts, request), readout::read_rows(whole, texts, request)));
  request.position = Position::kLast;
  CHECK(at::equal(readout::read_prefixes(split, texts[0], {20, 21}, request),
                  readout::read_prefixes(whole, texts[0], {20, 21}, request)));
}

}  // namespace probekit::testing
