// capture_activations' command line: every flag declared once with its help text, and the conversion of the
// raw values into CaptureOptions (usage errors, exit 2, name the flag).
#pragma once

#include <string>
#include <vector>

#include "capture/capture_options.h"
#include "cli/app_fwd.h"

namespace probekit::capture {

/// The flags as given, before they are checked and converted.
struct CaptureFlags {
  CaptureOptions options;
  std::vector<std::string> keep_fields;
  std::vector<int> devices;
  std::string position = "last", site = site_name(Site::kResidPost), split = "0.7,0.15,0.15", compression = "none";
  std::string max_gpu_memory, format = "hdf5", shard, mask;
  bool json = false, legacy_flag = false;

  /// Checks the values and returns the options they describe.
  CaptureOptions resolve() const;
};

/// Declares capture_activations' flags on `app`, writing into `flags`.
void add_capture_flags(CLI::App& app, CaptureFlags& flags);

}  // namespace probekit::capture
