#include "hub/hub_name.h"

#include <fmt/format.h>

#include <cctype>

#include "common/error.h"

namespace probekit::hub {

namespace {

constexpr size_t kMaxPartLength = 96;  // huggingface_hub's REPO_ID_REGEX bounds the name; we bound the org alike

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// One half of "org/name" as the hub accepts it: word characters, '-' and '.', starting and ending with a word
// character, without "--" (the cache's separator) or "..".
bool is_repo_part(std::string_view part) {
  if (part.empty() || part.size() > kMaxPartLength || !is_word_char(part.front()) || !is_word_char(part.back())) return false;
  for (char c : part) {
    if (!is_word_char(c) && c != '-' && c != '.') return false;
  }
  return part.find("--") == std::string_view::npos && part.find("..") == std::string_view::npos;
}

// A branch, tag or commit: it names a file under refs/ in the cache, so no component may climb out of it; as
// git, ".." appears nowhere and no component starts with '.'.
void check_revision(const std::string& revision, const std::string& text) {
  if (revision.empty()) fail_usage("{}: the revision after '@' is empty", text);
  if (revision.find("..") != std::string::npos) fail_usage("{}: '{}' is not a branch, tag or commit name", text, revision);
  size_t start = 0;
  while (start <= revision.size()) {
    size_t end = revision.find('/', start);
    if (end == std::string::npos) end = revision.size();
    std::string_view component(revision.data() + start, end - start);
    if (component.empty() || component.front() == '.') {
      fail_usage("{}: '{}' is not a branch, tag or commit name", text, revision);
    }
    for (char c : component) {
      if (!is_word_char(c) && c != '-' && c != '.' && c != '+' && c != '=' && c != ',') {
        fail_usage("{}: the revision '{}' holds the character '{}', which no branch, tag or commit name has", text,
                   revision, c);
      }
    }
    start = end + 1;
  }
}

}  // namespace

std::string HubName::text() const { return revision_given ? repo + "@" + revision : repo; }

std::optional<HubName> parse_hub_name(const std::string& text) {
  size_t at = text.find('@');
  std::string repo = text.substr(0, at);
  size_t slash = repo.find('/');
  if (slash == std::string::npos) return std::nullopt;
  if (!is_repo_part(std::string_view(repo).substr(0, slash)) || !is_repo_part(std::string_view(repo).substr(slash + 1))) {
    return std::nullopt;
  }
  HubName name;
  name.repo = repo;
  name.revision = kDefaultRevision;
  if (at != std::string::npos) {
    name.revision = text.substr(at + 1);
    name.revision_given = true;
    check_revision(name.revision, text);
  }
  return name;
}

std::string HubFolder::text() const {
  return name.repo + "/" + folder + (name.revision_given ? "@" + name.revision : "");
}

std::optional<HubFolder> parse_hub_folder(const std::string& text) {
  const size_t at = text.find('@');
  const std::string path = text.substr(0, at);
  const size_t first = path.find('/');
  const size_t second = first == std::string::npos ? std::string::npos : path.find('/', first + 1);
  if (second == std::string::npos) return std::nullopt;
  HubFolder folder;
  folder.folder = path.substr(second + 1);
  for (size_t start = 0; start <= folder.folder.size();) {
    const size_t end = std::min(folder.folder.find('/', start), folder.folder.size());
    const std::string part = folder.folder.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return std::nullopt;
    start = end + 1;
  }
  std::optional<HubName> name = parse_hub_name(path.substr(0, second) + (at == std::string::npos ? "" : text.substr(at)));
  if (!name) return std::nullopt;
  folder.name = *name;
  return folder;
}

bool is_commit_hash(std::string_view text) {
  if (text.size() != 40) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

std::string repo_folder_name(const std::string& repo) {
  std::string folder = "models--";
  for (char c : repo) {
    if (c == '/') {
      folder += "--";
    } else {
      folder += c;
    }
  }
  return folder;
}

std::string url_quote(std::string_view text, std::string_view keep) {
  std::string out;
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '_' || c == '.' || c == '~' || c == '-' || keep.find(c) != std::string_view::npos) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

}  // namespace probekit::hub
