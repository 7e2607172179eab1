// The one overwrite rule for every tool that writes. An existing output (a file, or a directory of outputs) is
// replaced only when the user passed --overwrite; what is not a regular file or directory (a device, a FIFO, a
// socket, or a symlink to one) is never replaced; and outputs are written under a temporary name and renamed
// into place, so an interrupted run never leaves a half-written output under the final name.
#pragma once

#include <string>
#include <vector>

namespace probekit {

/// Checks `path` before anything is computed: refuses a device, FIFO, socket, directory or a symlink to one
/// always, and an existing file unless `overwrite` (the message names --overwrite).
void check_output_file(const std::string& path, bool overwrite);

/// Refuses (a usage error) an `output_dir` that is one of `inputs` or holds one: --overwrite would replace it.
void refuse_inputs_inside(const std::string& output_dir, const std::vector<std::string>& inputs);

/// Refuses an output file whose folder does not exist: checked before the work, whose result would be lost.
void check_output_folder(const std::string& path);

/// The file every directory of outputs holds once committed: --overwrite replaces only a directory holding it.
inline constexpr const char* kOutputMarker = ".probekit-output";

/// A directory of outputs built under a temporary sibling name and moved into place whole by commit(). Until
/// then the final directory is untouched; without commit() (an error) the temporary one is removed.
class StagedDirectory {
 public:
  /// Refuses an existing non-empty `final_path` unless `overwrite`, and even then unless a probekit tool wrote it
  /// (it holds kOutputMarker: the commit replaces it whole, and a folder of the user's must never go that way);
  /// anything there that is not a directory, and `inputs` inside it (refuse_inputs_inside: the commit would delete
  /// them). Stages into `final_path`.partial-<pid>-<n>, removing those that runs killed on this host left.
  StagedDirectory(std::string final_path, bool overwrite, const std::vector<std::string>& inputs);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  /// Where to write until commit().
  const std::string& path() const { return staging_; }
  /// Moves the staged directory to its final name, replacing an earlier one.
  void commit();

 private:
  std::string final_, staging_;
  bool committed_ = false;
};

}  // namespace probekit
