#include "capture/outputs.h"

#include <cstdio>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"

namespace probekit::capture {

using activations::Split;

namespace {

// What to do with one layer file given what is on disk: start it, resume it, keep it, or refuse.
// Returns true when the file is settled (resumed or kept complete), false when it is to be created.
bool settle_existing(const CaptureOptions& options, LayerOutput& out, const activations::FileAttributes& attributes,
                     Batching* batching) {
  std::string partial = activations::partial_path_for(out.path);
  for (const std::string* path : {&out.path, &partial}) check_output_file(*path, true);  // never a device or FIFO
  bool complete = is_regular_file(out.path), interrupted = is_regular_file(partial);
  if (options.overwrite) {
    std::remove(out.path.c_str());
    std::remove(partial.c_str());
  } else if (options.resume && interrupted && activations::has_progress_record(out.path)) {
    out.writer = activations::ActivationWriter::resume(out.path, attributes);
    *batching = Batching::decode(out.writer->attributes().batching);
    return true;
  } else if (options.resume && interrupted) {
    std::remove(partial.c_str());  // killed while being created: nothing was committed
    return complete;
  } else if (options.resume && complete) {
    std::string difference = attributes.identity_difference(activations::read_attributes(out.path));
    if (!difference.empty()) fail("{} is complete but {}; use --overwrite to replace it", out.path, difference);
    return true;
  } else if (complete) {
    fail("{} already exists; pass --overwrite to replace it (or --resume to keep complete files)", out.path);
  } else if (interrupted) {
    fail("{} is an interrupted capture; pass --resume to continue it or --overwrite to start again", partial);
  }
  return false;
}

}  // namespace

std::vector<LayerOutput> open_outputs(const CaptureOptions& options, const std::string& dir,
                                      const std::vector<int64_t>& layers, activations::FileAttributes attributes,
                                      const std::array<activations::SplitLayout, 3>& layouts, Batching* batching) {
  std::vector<LayerOutput> outputs;
  std::vector<bool> settled;
  make_directories(dir);
  for (int64_t layer : layers) {
    LayerOutput out;
    out.layer = layer;
    out.path = dir + "/" + activations::layer_file_name(layer);
    attributes.layer = layer;
    settled.push_back(settle_existing(options, out, attributes, batching));
    outputs.push_back(std::move(out));
  }
  attributes.batching = batching->encode();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (settled[i]) continue;
    attributes.layer = outputs[i].layer;
    outputs[i].writer = activations::ActivationWriter::create(outputs[i].path, attributes, layouts, options.gzip);
  }
  return outputs;
}

void write_window(std::vector<LayerOutput>& outputs, const WindowRows& window, const std::vector<RunItem>& run,
                  const std::array<activations::SplitLayout, 3>& layouts, readout::Position position, int64_t width) {
  const bool per_token = position == readout::Position::kAll;
  for (size_t l = 0; l < outputs.size(); ++l) {
    if (!outputs[l].writer) continue;
    // The window's examples are consecutive rows of at most three splits.
    for (int64_t p = window.begin; p < window.end;) {
      Split split = run[static_cast<size_t>(p)].split;
      int64_t q = p;
      while (q < window.end && run[static_cast<size_t>(q)].split == split) ++q;
      const auto& offsets = layouts[static_cast<size_t>(split)].offsets;
      int64_t first_row = run[static_cast<size_t>(p)].row, last_row = run[static_cast<size_t>(q - 1)].row + 1;
      int64_t file_row = per_token ? offsets[static_cast<size_t>(first_row)] : first_row;
      int64_t rows = per_token ? offsets[static_cast<size_t>(last_row)] - file_row : last_row - first_row;
      const float* data = window.per_layer[l].get() + window.row_start[static_cast<size_t>(p - window.begin)] * width;
      outputs[l].writer->write_rows(split, file_row, rows, data);
      p = q;
    }
  }
  for (LayerOutput& out : outputs) {
    if (out.writer) out.writer->commit(window.end);
  }
}

}  // namespace probekit::capture
