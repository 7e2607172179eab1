#include "common/outputs.h"

#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/files.h"

namespace probekit {

void refuse_inputs_inside(const std::string& output_dir, const std::vector<std::string>& inputs) {
  if (!path_exists(output_dir)) return;  // nothing there for --overwrite to delete
  const std::string output = absolute_path(output_dir);
  for (const std::string& input : inputs) {
    if (input.empty() || !path_exists(input)) continue;
    const std::string path = absolute_path(input);
    if (path == output || path.rfind(output + "/", 0) == 0) {
      fail_usage("--output-dir {}: it holds the input {}, which --overwrite would delete; write the outputs elsewhere",
                 output_dir, input);
    }
  }
}

namespace {

// What is at `path` (following symlinks): 0 when nothing is.
mode_t file_type(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    struct stat link {};
    // A dangling symlink: writing through it would create its target somewhere else.
    if (::lstat(path.c_str(), &link) == 0) fail("{}: is a symlink to a missing file; refusing to write through it", path);
    return 0;
  }
  return st.st_mode & S_IFMT;
}

const char* kind_of(mode_t type) {
  switch (type) {
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

void check_output_file(const std::string& path, bool overwrite) {
  mode_t type = file_type(path);
  if (type == 0) return;
  if (type != S_IFREG) fail_input("{}: is {}; an output is never written over it (choose another path)", path, kind_of(type));
  if (!overwrite) fail_input("{} already exists; pass --overwrite to replace it", path);
}

StagedDirectory::StagedDirectory(std::string final_path, bool overwrite)
    : final_(std::move(final_path)), staging_(final_ + ".partial") {
  while (final_.size() > 1 && final_.back() == '/') final_.pop_back();
  staging_ = final_ + ".partial";
  mode_t type = file_type(final_);
  if (type != 0 && type != S_IFDIR) {
    fail_input("{}: is {}, not a directory; choose another output directory", final_, kind_of(type));
  }
  if (type == S_IFDIR && !list_directory(final_).empty() && !overwrite) {
    fail_input("{} already exists and is not empty; pass --overwrite to replace it (or choose another --output-dir)",
               final_);
  }
  remove_tree(staging_);  // left by an interrupted run
  make_directories(staging_);
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  try {
    remove_tree(staging_);
  } catch (const std::exception&) {  // the error that stopped the run is the one to report
  }
}

void StagedDirectory::commit() {
  std::string old = final_ + ".replaced";
  bool replacing = path_exists(final_);
  if (replacing) {
    remove_tree(old);
    rename_path(final_, old);
  }
  rename_path(staging_, final_);
  committed_ = true;
  if (replacing) remove_tree(old);
}

}  // namespace probekit
