#include "sweep/sweep_progress.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
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

// A value quoted in a message, cut short: a damaged line may hold megabytes.
std::string shown(const Json& value) {
  const std::string text = dump_json(value);
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

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
      fail("{}: '{}' must hold token ids, got {}", where, key, shown(id));
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
      fail("{}: 'scores' must hold one array of {} scores per generated token, got {}", where, labels, shown(token));
    }
    std::vector<double>& row = r.scores.emplace_back();
    for (const Json& value : token) row.push_back(number_or_nan(value, where, "scores"));
  }
  for (const Json& value : array_at(line, "kl", where)) r.fluency.kl.push_back(number_or_nan(value, where, "kl"));
  // Every generated token is scored and measured, the last (an end of sequence) too.
  if (r.scores.size() != r.ids.size() || r.fluency.kl.size() != r.ids.size()) {
    fail("{}: {} generated ids, but {} tokens' scores and {} KL values (one of each per token)", where, r.ids.size(),
         r.scores.size(), r.fluency.kl.size());
  }
  if (r.stop != "eos" && r.stop != "length") fail("{}: 'stop' must be \"eos\" or \"length\", got {}", where, shown(line["stop"]));
  for (const char* key : {"kl_mean", "perplexity"}) {
    if (!line.contains(key)) fail_json_type(where, key, "a number", nullptr);
  }
  r.fluency.kl_mean = number_or_nan(line.at("kl_mean"), where, "kl_mean");
  r.fluency.perplexity = number_or_nan(line.at("perplexity"), where, "perplexity");
  return r;
}

// The first setting that differs, as "other labels (kept: [...]; asked: [...])"; "" when none does.
std::string settings_difference(const Json& kept, const Json& asked) {
  for (const auto& [key, value] : asked.items()) {
    const Json& before = kept.contains(key) ? kept.at(key) : Json();
    if (before == value) continue;
    const std::string was = dump_json(before), now = dump_json(value);
    if (was.size() + now.size() > 240) return fmt::format("other {}", key);  // prompts: thousands of lines
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
  // "out/", "out/." and "out/./" are "out"; "." and ".." are named by their absolute path, which has a last name.
  while (dir.size() > 1 && (dir.back() == '/' || (dir.size() > 2 && dir.compare(dir.size() - 2, 2, "/.") == 0))) {
    dir.erase(dir.size() - (dir.back() == '/' ? 1 : 2));
  }
  const std::string last = dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  if (last == "." || last == ".." || last.empty()) dir = absolute_path(dir.empty() ? "." : dir);
  return dir + ".progress.jsonl";
}

SweepProgress::SweepProgress(const std::string& output_dir, bool resume, bool overwrite)
    : path_(progress_path(output_dir)), resume_(resume), overwrite_(overwrite) {
  check_output_file(path_, true);  // never a directory, a device or a FIFO
  lock_file();
  try {
    text_ = read_file(path_);
    cells_in_file_ = static_cast<size_t>(std::max<std::ptrdiff_t>(0, std::count(text_.begin(), text_.end(), '\n') - 1));
    if (cells_in_file_ > 0 && !resume && !overwrite) {
      fail_input("{} holds the generations of an interrupted sweep into {}: pass --resume to go on from them, or "
                 "--overwrite to start again",
                 path_, output_dir);
    }
  } catch (...) {
    struct stat held {};
    if (::fstat(fd_, &held) == 0 && held.st_size == 0) std::remove(path_.c_str());  // made by this run; the lock is held
    ::close(fd_);
    throw;
  }
}

// Opens the file and takes its lock. A sweep that finished removes its file: one opened just before that is no
// longer the file of that name once locked, and is opened again.
void SweepProgress::lock_file() {
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) fail("cannot write {}: {}", path_, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      if (err == EWOULDBLOCK) fail_input("{}: another steering_sweep into the same output directory is running", path_);
      fail("cannot lock {}: {}", path_, std::strerror(err));
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      return;
    }
    ::close(fd_);
  }
  fail("cannot lock {}: it was replaced again and again while being opened", path_);
}

SweepProgress::~SweepProgress() {
  if (fd_ < 0) return;
  if (cells_in_file_ == 0) std::remove(path_.c_str());  // a run that kept nothing leaves nothing
  ::close(fd_);
}

void SweepProgress::start(const Json& settings, size_t cells, size_t labels) {
  if (resume_ && cells_in_file_ > 0) {
    read(settings, cells, labels);
    truncate_to(text_.rfind('\n') + 1);  // the next line must not join one a kill cut short
    text_.clear();
    return;
  }
  if (resume_) spdlog::info("--resume: {} holds no generations of an interrupted sweep; starting from the first", path_);
  if (cells_in_file_ > 0) {
    spdlog::warn("--overwrite: the {} generations an interrupted sweep kept in {} are discarded; the sweep starts "
                 "again (--resume goes on from them)",
                 cells_in_file_, path_);
  }
  text_.clear();
  truncate_to(0);
  cells_in_file_ = 0;
  const std::string header = dump_json({{"probekit_sweep_progress", kFormatVersion}, {"settings", settings}}) + "\n";
  append_all(fd_, path_, header);
}

void SweepProgress::truncate_to(size_t bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) fail("cannot write {}: {}", path_, std::strerror(errno));
}

void SweepProgress::read(const Json& settings, size_t cells, size_t labels) {
  const char* again = overwrite_ ? "leave out --resume to start again" : "use --overwrite to start again";
  size_t line_number = 0;
  for (size_t start = 0; start < text_.size();) {
    const size_t end = text_.find('\n', start);
    const std::string where = fmt::format("{}:{}", path_, ++line_number);
    // A last line without its newline was cut by a kill mid-write: its cells are generated again.
    if (end == std::string::npos) {
      spdlog::warn("{}: an unfinished last line (a run killed while writing it) is left out", where);
      break;
    }
    const Json line = parse_json(std::string_view(text_).substr(start, end - start), where);
    start = end + 1;
    if (line_number == 1) {
      if (!line.is_object() || json_value<int64_t>(line, "probekit_sweep_progress", 0, where) != kFormatVersion) {
        fail("{}: not a steering_sweep progress file of this version; {}", where, again);
      }
      const std::string difference = settings_difference(line.value("settings", Json::object()), settings);
      if (!difference.empty()) fail("cannot resume: {} was made with {}; {}", path_, difference, again);
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
  // On disk, not only in the page cache: a lost machine loses no finished generation.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != ENOTSUP) fail("cannot write {}: {}", path_, std::strerror(errno));
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
