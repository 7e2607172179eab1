// What the tools call with the value of --model: a local checkpoint folder, or a model on the Hugging Face hub
// by name (`org/name`, `org/name@revision` with a branch, tag or commit). A hub name is looked up in the shared
// Hugging Face cache first; what the cache lacks is downloaded (unless offline): only the files a run reads
// (config.json, generation_config.json, the tokenizer files, the safetensors weights and their index), never
// pickles (*.bin, *.pth, *.pt) or code.
#pragma once

#include <string>
#include <vector>

#include "hub/hub_settings.h"

namespace probekit::hub {

struct ResolvedModel {
  std::string dir;       // a folder holding config.json, tokenizer.json and the weights
  std::string name;      // what results record: the hub name as given, or the folder's absolute path
  std::string revision;  // the commit of the weights; empty for a folder outside the hub cache
};

/// Finds or downloads `name_or_dir` (see above), with the settings of the environment unless given. An existing
/// folder is used as it is; a hub name comes from the cache when its snapshot is complete, else from the hub.
ResolvedModel resolve_model(const std::string& name_or_dir);
ResolvedModel resolve_model(const std::string& name_or_dir, const HubSettings& settings);

/// Finds or downloads the folder `org/name/sub/folder[@revision]` names (an SAE of a release), holding the files of
/// one of `file_sets` (paths inside the folder, small files first: the first set complete in the cache, else on the
/// hub, is the one taken). `name` is the folder as given; refused naming the folder and the sets when none is there.
ResolvedModel resolve_folder(const std::string& hub_folder, const std::vector<std::vector<std::string>>& file_sets,
                             const HubSettings& settings);

/// The --model value that names exactly the weights recorded with a result: "org/name@<commit>" for a hub name
/// recorded with its commit, else the recorded name (a folder's path) as it is.
std::string pinned_model(const std::string& recorded_name, const std::string& revision);

}  // namespace probekit::hub
