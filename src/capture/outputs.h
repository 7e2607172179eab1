// The layer files of a capture run: opened fresh, resumed, or refused when that would overwrite or ignore
// earlier work; and each finished window of rows written into them and committed.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capture/batching.h"
#include "capture/capture_options.h"
#include "capture/plan.h"
#include "activations/activation_store.h"

namespace probekit::capture {

/// One layer file of the run: its writer, or nothing when a resumed run finds it complete.
struct LayerOutput {
  int64_t layer = 0;
  std::string path;
  std::optional<activations::ActivationWriter> writer;
};

/// Prepares the layer files in `dir`; a resumed file's batching replaces `*batching`.
std::vector<LayerOutput> open_outputs(const CaptureOptions& options, const std::string& dir,
                                      const std::vector<int64_t>& layers, activations::FileAttributes attributes,
                                      const std::array<activations::SplitLayout, 3>& layouts, Batching* batching);

/// With --overwrite, refuses (a usage error) a complete layer file in `dir` of a layer other than `layers`, before the
/// model loads: the run would leave it beside its own files, and the trainers, which take every layer file of a
/// directory, would train on files of two captures. Without --overwrite the run adds its layers to those there, and
/// refuse_other_captures refuses those of another capture.
void refuse_other_layers(const CaptureOptions& options, const std::string& dir, const std::vector<int64_t>& layers);

/// Without --overwrite, refuses (a usage error naming the field) a layer file in `dir` of a layer other than `layers`
/// made otherwise than `attributes` say (recipe, model, dataset, split, fields): the trainers take every layer file of
/// a directory as one capture's. Before the model loads the dtype is not yet resolved (`dtype_resolved` false): that
/// field is checked again by open_outputs.
void refuse_other_captures(const std::string& dir, const std::vector<int64_t>& layers,
                           const activations::FileAttributes& attributes, bool dtype_resolved);

/// Rows of one window, per layer, in run order: [layers][rows x width].
struct WindowRows {
  int64_t begin = 0, end = 0;      // run positions
  std::vector<int64_t> row_start;  // per run position in the window: first row in the buffers
  // Left uninitialized: every row is written before the window is stored, and zeroing the buffers of all
  // layers (1.5 GB a window for 34 layers) kept the GPU waiting at each window's start.
  std::vector<std::unique_ptr<float[]>> per_layer;
};

/// Writes a finished window into every open layer file and commits it.
void write_window(std::vector<LayerOutput>& outputs, const WindowRows& window, const std::vector<RunItem>& run,
                  const std::array<activations::SplitLayout, 3>& layouts, Position position, int64_t width);

/// What each split's file holds besides the rows: labels, example indices, kept fields, per-token offsets.
std::array<activations::SplitLayout, 3> make_layouts(const CapturePlan& plan, Position position,
                                                     const std::vector<std::string>& keep_fields);

/// The attributes every layer file of the run records: the model, the dataset, the site, the split, the seed...
activations::FileAttributes file_attributes(const CaptureOptions& options, const CapturePlan& plan,
                                            const std::string& dtype);

}  // namespace probekit::capture
