// make_steering_vectors as a library: a label's steering vector at each captured layer, from activations
// (contrastive activation addition: the mean of the label's rows minus the mean of the other rows of the train
// split, kept at its length, which is part of what users scale) or from the label's probes (their unit directions).
#pragma once

#include <string>

#include "cli/app_fwd.h"
#include "common/json.h"
#include "steering/vector_file.h"

namespace probekit::steering {

struct MakeVectorsOptions {
  std::string activations;          // a capture's output directory (layer_{L}_activations.h5), or one such file
  std::string label;
  std::string method = "mean-diff";  // mean-diff | probe
  std::string probes_dir;            // method probe: the probes whose directions to write
  std::string layers;                // a subset of the captured (or probed) layers; empty: all of them
  std::string output;                // .safetensors or .gguf
  bool overwrite = false;
};

/// The flags of make_steering_vectors.
void add_make_vectors_flags(CLI::App& app, MakeVectorsOptions& options);

/// The vectors the options ask for (not yet written).
VectorFile make_vectors(const MakeVectorsOptions& options);

/// Makes the vectors and writes them to options.output; returns a summary (layers, norms, file).
Json make_and_write_vectors(const MakeVectorsOptions& options);

}  // namespace probekit::steering
