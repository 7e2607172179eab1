#include "common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <algorithm>

#include "common/error.h"

namespace probekit {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void refuse_unless_regular(const std::string& path, mode_t mode) {
  if (!S_ISREG(mode)) fail("{}: is {}, expected a regular file", path, file_kind(mode));
}

// Closes a descriptor when its scope ends, also when a read throws.
struct ClosedAtExit {
  int fd;
  ~ClosedAtExit() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

int open_input_file(const std::string& path) {
  // O_NONBLOCK makes opening a FIFO return at once; it is cleared again for the reads of a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = errno;
    ::close(fd);
    if (st.st_mode == 0) fail("cannot stat {}: {}", path, std::strerror(err));
    refuse_unless_regular(path, st.st_mode);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

bool in_page_cache(int fd, uint64_t begin, uint64_t end) {
#ifdef __linux__
  if (end <= begin) return true;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = begin / page * page;
  const auto length = static_cast<size_t>(end - first);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first));
  if (map == MAP_FAILED) return false;
  std::vector<unsigned char> resident((length + page - 1) / page);
  const bool known = ::mincore(map, length, resident.data()) == 0;
  ::munmap(map, length);
  return known && std::all_of(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) != 0; });
#else
  (void)fd, (void)begin, (void)end;
  return false;
#endif
}

void require_input_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot open {}: {}", path, std::strerror(errno));
  refuse_unless_regular(path, st.st_mode);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = open_input_file(path);
  struct stat st {};
  ::fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("cannot map {}: {}", path, std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string read_to_end(int fd, const std::string& name, uint64_t max_bytes) {
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read {}: {}", name, std::strerror(errno));
    if (n == 0) return contents;
    if (contents.size() + static_cast<uint64_t>(n) > max_bytes) {
      fail("{}: larger than the {} bytes such a file may have (a damaged or hostile file?)", name, max_bytes);
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
}

std::string read_file(const std::string& path) { return read_file(path, UINT64_MAX); }

std::string read_file(const std::string& path, uint64_t max_bytes) {
  ClosedAtExit file{open_input_file(path)};
  return read_to_end(file.fd, path, max_bytes);
}

InputBytes read_input_once(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot open {}: {}", path, std::strerror(errno));
  if (S_ISREG(st.st_mode)) return InputBytes{read_file(path), false};
  if (!S_ISFIFO(st.st_mode)) fail("{}: is {}, expected a regular file, a pipe or a FIFO", path, file_kind(st.st_mode));
  ClosedAtExit stream{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};  // a FIFO's open returns once it has a writer
  if (stream.fd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  return InputBytes{read_to_end(stream.fd, path), true};
}

InputBytes read_flag_input(const std::string& path, const std::string& flag) {
  if (path != "-") return read_input_once(path);
  if (::isatty(STDIN_FILENO)) {
    fail_input("{} -: standard input is a terminal; pipe the input in (zcat data.jsonl.gz | ... {} -)", flag, flag);
  }
  return InputBytes{read_to_end(STDIN_FILENO, input_name(path)), true};
}

std::string input_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

namespace {

// A new file beside `path`, of a name no one else holds: O_EXCL refuses a name that exists, a symlink put there
// included, so the write never follows a link nor truncates another's file.
int create_temporary(const std::string& path, std::string& temporary) {
  static std::atomic<uint64_t> serial{0};
  for (int attempt = 0;; ++attempt) {
    temporary = fmt::format("{}.tmp-{}-{}", path, ::getpid(), serial.fetch_add(1));
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST || attempt == 100) return fd;
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view contents) {
  std::string temporary;
  // POSIX writes rather than a stream, so a failure reports the system's reason (a full disk, a size limit).
  int fd = create_temporary(path, temporary);
  if (fd < 0) fail("cannot write {}: {}", temporary, std::strerror(errno));
  auto give_up = [&](int err) {
    ::close(fd);
    std::remove(temporary.c_str());
    fail("cannot write {}: {}", temporary, std::strerror(err));
  };
  for (size_t written = 0; written < contents.size();) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) give_up(n < 0 ? errno : ENOSPC);
    written += static_cast<size_t>(n);
  }
  // On disk before the rename: after a crash the name holds the old file or the whole new one, never an empty one.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) give_up(errno);  // some file systems cannot sync
  if (::close(fd) != 0) {
    int err = errno;
    std::remove(temporary.c_str());
    fail("cannot write {}: {}", temporary, std::strerror(err));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(temporary.c_str());
    fail("cannot rename {} to {}: {}", temporary, path, std::strerror(err));
  }
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  std::string parent = parent_directory(path);
  if (!parent.empty() && parent != path) make_directories(parent);
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) fail("cannot create directory {}: {}", path, std::strerror(errno));
}

void remove_tree(const std::string& path) {
  if (!path_exists(path)) return;
  if (!is_directory(path)) {
    if (std::remove(path.c_str()) != 0) fail("cannot remove {}: {}", path, std::strerror(errno));
    return;
  }
  int status = ::nftw(
      path.c_str(), [](const char* entry, const struct stat*, int, struct FTW*) { return std::remove(entry); }, 16,
      FTW_DEPTH | FTW_PHYS);
  if (status != 0) fail("cannot remove {}: {}", path, std::strerror(errno));
}

void copy_tree(const std::string& from, const std::string& to) {
  if (is_directory(from)) {
    make_directories(to);
    for (const std::string& name : list_directory(from)) copy_tree(from + "/" + name, to + "/" + name);
    return;
  }
  require_input_file(from);
  std::ifstream in(from, std::ios::binary);
  if (!in) fail("cannot open {}", from);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  if (!out) fail("cannot write {}", to);
}

void rename_path(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename {} to {}: {}", from, to, std::strerror(errno));
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot stat {}: {}", path, std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

std::vector<std::string> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) fail("cannot list directory {}: {}", path, std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string temp_directory() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

std::string parent_directory(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  auto slash = trimmed.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : trimmed.substr(0, slash);
}

std::string absolute_path(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) fail("{}: {}", path, std::strerror(errno));
  std::string result = resolved;
  std::free(resolved);
  return result;
}

std::string relative_path(const std::string& from, const std::string& target) {
  auto parts = [](const std::string& path) {
    std::vector<std::string> names;
    std::istringstream stream(path);
    for (std::string name; std::getline(stream, name, '/');) {
      if (!name.empty() && name != ".") names.push_back(name);
    }
    return names;
  };
  std::vector<std::string> base = parts(from), to = parts(target);
  size_t common = 0;
  while (common < base.size() && common < to.size() && base[common] == to[common]) ++common;
  std::string relative;
  for (size_t i = common; i < base.size(); ++i) relative += "../";
  for (size_t i = common; i < to.size(); ++i) relative += to[i] + (i + 1 < to.size() ? "/" : "");
  return relative.empty() ? "." : relative;
}

}  // namespace probekit
