#include "sweep/sweep_progress.h"

#include <fcntl.h>
#include <sys/file.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"

namespace probekit::sweep {

namespace {

constexpr int kFormatVersion = 1;

// JSON writes a NaN or an infinity as null; read back as NaN, the report shows it as the finished sweep would.
double number_or_nan(const Json& value, const std::string& where, const char* key) {
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!value.is_number()) fail_json_type(where, key, "a number", value);
  return value.get<double>();
}

Json cell_line(size_t index, const CellResult& r) {
  return {{"cell", index}, {"prompt_ids", r.prompt_ids}, {"ids", r.ids}, {"text", r.text}, {"stop", r.stop},
          {"scores", r.scores}, {"kl", r.fluency.kl}, {"kl_mean", r.fluency.kl_mean},
          {"perplexity", r.fluency.perplexity}};
}

// An array member of a cell's line; absent or of another type, refused naming the line and the key.
const Json& array_at(const Json& line, const char* key, const std::string& where) {
  const auto found = line.find(key);
  if (found == line.end() || !found->is_array()) fail_json_type(where, key, "an array", found == line.end() ? Json() : *found);
  return *found;
}

// Token ids of a cell's line, each a 32-bit id.
std::vector<int32_t> ids_at(const Json& line, const char* key, const std::string& where) {
  std::vector<int32_t> ids;
  for (const Json& id : array_at(line, key, where)) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      fail("{}: '{}' must hold token ids, got {}", where, key, dump_json(id));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// A cell's line read back; its scores must have one column per probe label, which the summary indexes.
CellResult cell_of(const Json& line, size_t labels, const std::string& where) {
  CellResult r;
  r.prompt_ids = ids_at(line, "prompt_ids", where);
  r.ids = ids_at(line, "ids", where);
  r.text = json_at<std::string>(line, "text", where);
  r.stop = json_at<std::string>(line, "stop", where);
  for (const Json& token : array_at(line, "scores", where)) {
    if (!token.is_array() || token.size() != labels) {
      fail("{}: 'scores' must hold one array of {} scores per generated token, got {}", where, labels, dump_json(token));
    }
    std::vector<double>& row = r.scores.emplace_back();
    for (const Json& value : token) row.push_back(number_or_nan(value, where, "scores"));
  }
  for (const Json& value : array_at(line, "kl", where)) r.fluency.kl.push_back(number_or_nan(value, where, "kl"));
  r.fluency.kl_mean = number_or_nan(line.value("kl_mean", Json()), where, "kl_mean");
  r.fluency.perplexity = number_or_nan(line.value("perplexity", Json()), where, "perplexity");
  return r;
}

// The first setting that differs, as "other labels (kept: [...]; asked: [...])"; "" when none does.
std::string settings_difference(const Json& kept, const Json& asked) {
  for (const auto& [key, value] : asked.items()) {
    const Json& before = kept.contains(key) ? kept.at(key) : Json();
    if (before == value) continue;
    const std::string was = dump_json(before), now = dump_json(value);
    if (was.size() + now.size() > 240) return fmt::format("other {}", key);
    return fmt::format("other {} (kept: {}; asked: {})", key, was, now);
  }
  return "";
}

// Writes all of `text` at the end of the open file `fd`, naming `path` on failure (a full disk, a size limit).
void append_all(int fd, const std::string& path, const std::string& text) {
  for (size_t written = 0; written < text.size();) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write {}: {}", path, std::strerror(n < 0 ? errno : ENOSPC));
    written += static_cast<size_t>(n);
  }
}

}  // namespace

std::string progress_path(const std::string& output_dir) {
  std::string dir = output_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + ".progress.jsonl";
}

SweepProgress::SweepProgress(const std::string& output_dir, const Json& settings, size_t cells, size_t labels,
                             bool resume, bool overwrite)
    : path_(progress_path(output_dir)) {
  check_output_file(path_, true);  // never a directory, a device or a FIFO
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  const bool made_here = fd_ >= 0;
  if (!made_here && errno == EEXIST) fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) fail("cannot write {}: {}", path_, std::strerror(errno));
  try {
    open_locked(output_dir, settings, cells, labels, resume, overwrite);
  } catch (...) {
    if (made_here && ::lseek(fd_, 0, SEEK_END) == 0) std::remove(path_.c_str());
    ::close(fd_);
    throw;
  }
}

void SweepProgress::open_locked(const std::string& output_dir, const Json& settings, size_t cells, size_t labels,
                                bool resume, bool overwrite) {
  // Two sweeps into one output directory would interleave their lines.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    fail_input("{}: another steering_sweep into {} is running; wait for it or choose another output directory", path_,
               output_dir);
  }
  const std::string text = read_file(path_);
  const size_t whole_lines = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  const bool holds_cells = std::count(text.begin(), text.end(), '\n') > 1;  // the settings line and a cell's
  if (holds_cells && !resume && !overwrite) {
    fail_input("{} holds the generations of an interrupted sweep into {}: pass --resume to go on from them, or "
               "--overwrite to start again",
               path_, output_dir);
  }
  if (holds_cells && resume) {
    read(text, settings, cells, labels);
    truncate_to(whole_lines);  // the next line must not join one a kill cut short
    return;
  }
  if (resume) spdlog::info("--resume: {} holds no generations of an interrupted sweep; starting from the first", path_);
  truncate_to(0);
  append_all(fd_, path_, dump_json({{"probekit_sweep_progress", kFormatVersion}, {"settings", settings}}) + "\n");
}

SweepProgress::~SweepProgress() {
  if (fd_ < 0) return;
  if (cells_in_file_ == 0) std::remove(path_.c_str());  // a run that kept nothing leaves nothing
  ::close(fd_);
}

void SweepProgress::truncate_to(size_t bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) fail("cannot write {}: {}", path_, std::strerror(errno));
}

void SweepProgress::read(const std::string& text, const Json& settings, size_t cells, size_t labels) {
  size_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string where = fmt::format("{}:{}", path_, ++line_number);
    // A last line without its newline was cut by a kill mid-write: its cells are generated again.
    if (end == std::string::npos) {
      spdlog::warn("{}: an unfinished last line (a run killed while writing it) is left out", where);
      break;
    }
    const Json line = parse_json(std::string_view(text).substr(start, end - start), where);
    start = end + 1;
    if (line_number == 1) {
      if (!line.is_object() || json_value<int>(line, "probekit_sweep_progress", 0, where) != kFormatVersion) {
        fail("{}: not a steering_sweep progress file of this version; use --overwrite to start again", where);
      }
      const std::string difference = settings_difference(line.value("settings", Json::object()), settings);
      if (!difference.empty()) fail("cannot resume: {} was made with {}; use --overwrite to start again", path_, difference);
      continue;
    }
    const auto index = json_at<int64_t>(line, "cell", where);
    if (index < 0 || static_cast<size_t>(index) >= cells) fail("{}: 'cell' {} is not one of the sweep's {}", where, index, cells);
    kept_[static_cast<size_t>(index)] = cell_of(line, labels, where);
  }
  cells_in_file_ = kept_.size();
  spdlog::info("--resume: {} of {} generations kept in {}", kept_.size(), cells, path_);
}

void SweepProgress::append(const std::vector<std::pair<size_t, const CellResult*>>& finished) {
  std::string lines;
  for (const auto& [index, result] : finished) lines += dump_json(cell_line(index, *result)) + "\n";
  append_all(fd_, path_, lines);
  cells_in_file_ += finished.size();
}

void SweepProgress::remove() {
  if (std::remove(path_.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("{}: not removed ({}); the sweep is complete and the file can go", path_, std::strerror(errno));
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace probekit::sweep
