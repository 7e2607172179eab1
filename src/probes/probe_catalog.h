// Where the probes of a probes directory are: one layer (probes.json at the top, as train_binary_probes writes
// for one activation file) or several (layer_{L}/probes.json), plus each label's best layer when
// per_action_layer_analysis.json is there. Pickled PyTorch probes (the reference's probe_*.pth) are refused:
// unpickling runs arbitrary code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace probekit::probes {

struct ProbeCatalog {
  std::string dir;
  std::map<int64_t, std::string> layer_dirs;  // layer -> directory holding its probes.json
  std::map<std::string, int64_t> best_layer;  // label -> best layer by validation AUROC (may be empty)
};

/// Reads the layout of `dir`; throws naming the directory when it holds no probes.
ProbeCatalog find_probes(const std::string& dir);

/// The layers to load: `selection` ("21-30", "8,17", "all"), or a single --layer, or by default every
/// layer of a multi-layer directory's best layers (best_layer mode) or the one layer of a single-layer one.
std::vector<int64_t> select_layers(const ProbeCatalog& catalog, const std::string& selection, int64_t single_layer,
                                   bool best_layer_mode);

}  // namespace probekit::probes
