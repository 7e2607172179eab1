#include "common/outputs.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

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
    case S_IFREG: return "a regular file";
    default: return "not a regular file";
  }
}

}  // namespace

void check_output_folder(const std::string& path) {
  const std::string folder = parent_directory(path);
  if (!folder.empty() && !is_directory(folder)) fail_input("{}: the folder {} does not exist", path, folder);
}

void check_output_file(const std::string& path, bool overwrite) {
  mode_t type = file_type(path);
  if (type == 0) return;
  if (type != S_IFREG) fail_input("{}: is {}; an output is never written over it (choose another path)", path, kind_of(type));
  if (!overwrite) fail_input("{} already exists; pass --overwrite to replace it", path);
}

namespace {

// Marks a staging directory as one of ours, holding the host that made it: only such a directory is ever removed as
// stale, never a folder of the user's that happens to bear a similar name.
constexpr const char* kStagingMarker = ".probekit-staging";

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string();
}

// The staging directories (`final_path`.partial-<pid>-<n>) that runs into `final_path` left when they were killed:
// ours, made on this host by a process that is gone. Best effort: what cannot be read or removed stays.
void remove_stale_staging(const std::string& final_path) {
  std::string parent = parent_directory(final_path);
  if (parent.empty()) parent = ".";
  const std::string prefix = final_path.substr(final_path.rfind('/') + 1) + ".partial-";
  try {
    if (!is_directory(parent)) return;
    for (const std::string& name : list_directory(parent)) {
      const std::string pid = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size(), name.find('-', prefix.size()) - prefix.size()) : "";
      if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string path = parent + "/" + name, marker = path + "/" + kStagingMarker;
      if (!is_regular_file(marker) || read_file(marker, 4096) != host_name()) continue;
      if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;  // its run goes on
      remove_tree(path);
    }
  } catch (const std::exception& e) {
    spdlog::debug("{}: leftovers of killed runs not removed: {}", final_path, e.what());
  }
}

// Refuses to replace a directory no probekit tool wrote (regression: --overwrite on a folder of the user's, even
// the working directory, deleted everything in it).
void refuse_foreign_directory(const std::string& path) {
  if (is_regular_file(path + "/" + kOutputMarker)) return;
  // The records of outputs written before the marker was (the trainers', steering_sweep's, patch_activations'), so
  // that those are replaced as they were.
  for (const char* record : {"probes.json", "training_summary.json", "comparison.json", "sweep.json", "patching.json"}) {
    if (is_regular_file(path + "/" + record)) return;
  }
  std::vector<std::string> names = list_directory(path);
  const size_t shown = std::min<size_t>(names.size(), 3);
  std::string listing;
  for (size_t i = 0; i < shown; ++i) listing += (i > 0 ? ", " : "") + names[i];
  if (names.size() > shown) listing += fmt::format(" and {} more", names.size() - shown);
  fail_input("{}: --overwrite replaces only a directory that a probekit tool wrote (one holding {}), and this one holds "
             "{}; remove it yourself, or choose another output directory",
             path, kOutputMarker, listing);
}

}  // namespace

StagedDirectory::StagedDirectory(std::string final_path, bool overwrite, const std::vector<std::string>& inputs)
    : final_(std::move(final_path)) {
  while (final_.size() > 1 && final_.back() == '/') final_.pop_back();
  mode_t type = file_type(final_);
  if (type != 0 && type != S_IFDIR) {
    fail_input("{}: is {}, not a directory; choose another output directory", final_, kind_of(type));
  }
  const bool replacing = type == S_IFDIR && !list_directory(final_).empty();
  if (replacing && !overwrite) {
    fail_input("{} already exists and is not empty; pass --overwrite to replace it (or choose another output directory)",
               final_);
  }
  refuse_inputs_inside(final_, inputs);
  if (replacing) refuse_foreign_directory(final_);
  remove_stale_staging(final_);
  // One staging directory per run: two runs into one output directory (two processes, or two threads of the Python
  // package) never write into each other's.
  static std::atomic<uint64_t> serial{0};
  staging_ = fmt::format("{}.partial-{}-{}", final_, ::getpid(), serial.fetch_add(1));
  remove_tree(staging_);
  make_directories(parent_directory(staging_));
  // Named as the user gave it: the staging directory's name is none they know.
  if (::mkdir(staging_.c_str(), 0777) != 0) fail("cannot write the output directory {}: {}", final_, std::strerror(errno));
  write_file_atomic(staging_ + "/" + kStagingMarker, host_name());
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  try {
    remove_tree(staging_);
  } catch (const std::exception&) {  // the error that stopped the run is the one to report
  }
}

void StagedDirectory::commit() {
  const bool replacing = path_exists(final_);
  // The earlier directory moves aside under a name no one holds, and goes once the new one is in place.
  std::string old;
  for (int n = 0; replacing && (old.empty() || path_exists(old)); ++n) old = fmt::format("{}.replaced-{}-{}", final_, ::getpid(), n);
  if (replacing) rename_path(final_, old);
  rename_path(staging_, final_);
  committed_ = true;
  // Renamed once in place: a staging directory killed before its rename keeps the marker its cleanup looks for, and a
  // committed one holds the marker that lets --overwrite replace it.
  rename_path(final_ + "/" + kStagingMarker, final_ + "/" + kOutputMarker);
  if (replacing) remove_tree(old);
}

}  // namespace probekit
