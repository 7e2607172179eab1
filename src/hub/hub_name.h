// Names on the Hugging Face hub as the user writes them (`org/name`, `org/name@revision`) and the spellings the
// hub and its cache derive from them: the cache folder `models--org--name` and percent-encoded URL parts.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace probekit::hub {

/// The branch a name without `@revision` refers to.
constexpr const char* kDefaultRevision = "main";

struct HubName {
  std::string repo;      // "org/name"
  std::string revision;  // a branch, a tag or a commit; "main" when none was given
  bool revision_given = false;

  /// "org/name", or "org/name@revision" when a revision was given.
  std::string text() const;
};

/// Reads `org/name[@revision]`; nullopt when `text` is not shaped like a hub name (a path such as `./model`,
/// `/abs/dir` or `a/b/c`). A hub name with a revision git would refuse (`..`, spaces) is a UsageError.
std::optional<HubName> parse_hub_name(const std::string& text);

/// A folder inside a hub repository: `org/name/sub/folder[@revision]` (the SAEs of a release).
struct HubFolder {
  HubName name;
  std::string folder;  // "sub/folder", inside the repository

  /// "org/name/sub/folder", with "@revision" when a revision was given.
  std::string text() const;
};

/// Reads `org/name/sub/folder[@revision]`; nullopt when `text` is not shaped so (a hub name without a folder, an
/// absolute or relative path, a folder with empty, "." or ".." components).
std::optional<HubFolder> parse_hub_folder(const std::string& text);

/// True for a full commit hash: 40 lower-case hex digits.
bool is_commit_hash(std::string_view text);

/// The repository's folder in the cache: "models--org--name".
std::string repo_folder_name(const std::string& repo);

/// Percent-encodes every byte of `text` outside [A-Za-z0-9_.~-] and outside `keep` (Python's urllib quote).
std::string url_quote(std::string_view text, std::string_view keep = "/");

}  // namespace probekit::hub
