#include "hub/resolve.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/interrupt.h"
#include "hub/blob_download.h"
#include "hub/file_lock.h"
#include "hub/hub_cache.h"
#include "hub/hub_name.h"
#include "hub/retry.h"

namespace probekit::hub {

namespace {

constexpr const char* kConfig = "config.json";
constexpr const char* kTokenizer = "tokenizer.json";
constexpr const char* kSingleWeights = "model.safetensors";
constexpr const char* kWeightIndex = "model.safetensors.index.json";
// Read by transformers when present; a checkpoint without them is complete.
const char* const kOptionalFiles[] = {"generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
                                      "chat_template.jinja"};
constexpr int kMaxRelativeRedirects = 5;
// Configs, tokenizers and templates are read into memory whole: the largest real tokenizer.json is some 35 MB, so a
// hub announcing more is not to be trusted with the disk or the memory. Weights (.safetensors, an SAE's .npz) are
// mapped or streamed, and may be any size.
constexpr int64_t kMaxJsonFileBytes = int64_t{256} << 20;

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

bool is_read_whole(const std::string& file) { return ends_with(file, ".json") || ends_with(file, ".jinja"); }

// The shards the snapshot's index names, read within the bound of a JSON file.
std::vector<std::string> indexed_shards(const std::string& index) {
  return shard_names(read_file(index, kMaxJsonFileBytes), index);
}

// The commit of a folder inside a hub cache (.../models--org--name/snapshots/<commit>), else "".
std::string snapshot_commit(const std::string& path) {
  std::string commit = path.substr(path.rfind('/') + 1);
  std::string snapshots = parent_directory(path);
  std::string repo_folder = parent_directory(snapshots);
  std::string repo_name = repo_folder.substr(repo_folder.rfind('/') + 1);
  bool in_cache = snapshots.size() > 10 && snapshots.compare(snapshots.size() - 10, 10, "/snapshots") == 0 &&
                  repo_name.rfind("models--", 0) == 0;
  return in_cache && is_commit_hash(commit) ? commit : "";
}

ResolvedModel local_folder(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) fail("{}: cannot resolve the folder's path", path);
  std::string absolute = resolved;
  return ResolvedModel{absolute, absolute, snapshot_commit(absolute)};
}

// What a snapshot lacks for a run; empty when it is complete.
std::vector<std::string> missing_files(const RepoCache& cache, const std::string& commit) {
  std::vector<std::string> missing;
  for (const char* file : {kConfig, kTokenizer}) {
    if (!cache.has_file(commit, file)) missing.emplace_back(file);
  }
  if (cache.has_file(commit, kSingleWeights)) return missing;
  if (!cache.has_file(commit, kWeightIndex)) {
    missing.emplace_back("model.safetensors (or model.safetensors.index.json and its shards)");
    return missing;
  }
  for (const std::string& shard : indexed_shards(cache.snapshot_dir(commit) + "/" + kWeightIndex)) {
    if (!cache.has_file(commit, shard)) missing.push_back(shard);
  }
  return missing;
}

std::string offline_message(const RepoCache& cache, const HubName& name, const std::optional<std::string>& commit,
                            const std::vector<std::string>& missing) {
  std::string what;
  if (!commit) {
    what = fmt::format("is not in the cache ({} has no refs/{})", cache.folder(), name.revision);
  } else if (!is_directory(cache.snapshot_dir(*commit))) {
    what = fmt::format("is not in the cache (no snapshot {})", cache.snapshot_dir(*commit));
  } else {
    what = fmt::format("is incomplete in the cache: {} lacks {}", cache.snapshot_dir(*commit), fmt::join(missing, ", "));
  }
  return fmt::format("{} {}, and offline mode is on (HF_HUB_OFFLINE=1 or --offline), so nothing is downloaded: run "
                     "once with network access, or pass a local folder",
                     name.text(), what);
}

// Brings files of one repository from the hub into the cache, all from one commit.
class RepoDownload {
 public:
  RepoDownload(const RepoCache& cache, const HubName& name, const HubSettings& settings)
      : cache_(cache), name_(name), settings_(settings), http_(HttpOptions{10, settings.stall_seconds}) {}

  // The commit the revision names now, from the hub's answer for `file` (an optional one need not exist; one that
  // does is stored), recorded as the revision's ref. Every other file is then asked for by that commit, so a push to
  // the branch during the download cannot mix two versions in one snapshot.
  std::string pin(const std::string& file, bool optional) {
    std::string commit;
    std::optional<FileMetadata> found = metadata(name_.revision, file, optional, &commit);
    if (!is_commit_hash(commit)) fail("{}: {}: the hub's answer names no commit (X-Repo-Commit)", name_.repo, file);
    cache_.write_ref(name_.revision, commit);
    if (found) store(commit, file, *found);
    return commit;
  }

  // Makes sure the snapshot holds `file`; false when an optional file does not exist.
  bool fetch(const std::string& commit, const std::string& file, bool optional) {
    if (cache_.has_file(commit, file)) return true;
    if (optional && cache_.known_missing(commit, file)) return false;
    std::optional<FileMetadata> found = metadata(commit, file, optional);
    if (!found) return false;
    store(commit, file, *found);
    return true;
  }

 private:
  std::string resolve_url(const std::string& revision, const std::string& file) const {
    return fmt::format("{}/{}/resolve/{}/{}", settings_.endpoint, name_.repo, url_quote(revision, ""), url_quote(file));
  }

  std::vector<std::string> auth_headers(const std::string& url) const {
    // The token goes only to the hub itself, never to another host a file is served from.
    if (settings_.token.empty() || url_origin(url) != url_origin(settings_.endpoint)) return {};
    return {"Authorization: Bearer " + settings_.token};
  }

  // HEAD of one URL, tried again (retry.h) when no answer comes or the answer is a failure that may pass.
  HttpResponse head_once(const RequestContext& request) {
    std::vector<std::string> headers = auth_headers(request.url);
    headers.emplace_back("Accept-Encoding: identity");  // the size of the bytes themselves, not of a compression
    HttpResponse response;
    try {
      retry_network_errors(settings_, fmt::format("{}: {}", request.model, request.file), [&] {
        response = http_.head(request.url, headers);
        if (is_transient_status(response.status)) throw transient_failure(request, response, settings_);
      });
    } catch (const NetworkError& e) {
      if (e.status() != 0) fail("{}: {}: {} (gave up after {} attempts)", request.model, request.file, e.what(), settings_.max_attempts);
      fail("{}: {}: cannot reach the hub: {} (gave up after {} attempts). Check the network and HF_ENDPOINT ({}); with "
           "HF_HUB_OFFLINE=1 (or --offline) only the cache is used",
           request.model, request.file, e.what(), settings_.max_attempts, url_shown(settings_.endpoint));
    }
    return response;
  }

  // HEAD of a file, following redirects within the hub (a renamed repository) but not to other hosts: a file
  // served elsewhere (LFS) is described by the hub's own redirect answer.
  HttpResponse head(RequestContext& request) {
    for (int hop = 0;; ++hop) {
      HttpResponse response = head_once(request);
      std::string location = header(response.headers, "location");
      bool relative = response.status >= 300 && response.status < 400 && !location.empty() && location[0] == '/';
      if (!relative) return response;
      // Regression: the last redirect was read as an answer, and said to be no hub's.
      if (hop == kMaxRelativeRedirects) {
        fail("{}: {}: {}: redirected {} times within the hub without an answer (a redirect loop); check HF_ENDPOINT "
             "({})", request.model, request.file, url_shown(request.url), hop + 1, url_shown(settings_.endpoint));
      }
      request.url = url_origin(request.url) + location;
    }
  }

  // Asked by a commit (the user's pin, or the commit the first answer named), the hub must answer for that commit:
  // files of another would be used, and recorded, as the pinned one's.
  void check_commit(const RequestContext& request, const HttpResponse& response) const {
    std::string answered = header(response.headers, "x-repo-commit");
    if (!is_commit_hash(request.revision) || answered.empty() || answered == request.revision) return;
    fail("{}: {}: {}: asked for commit {}, the hub answered for commit {}; nothing of it is used or recorded",
         request.model, request.file, url_shown(request.url), request.revision, answered);
  }

  // A file's commit, etag, size and location; nullopt for an optional file the hub does not have.
  // `answered_commit`, when given, gets the commit the hub answered for.
  std::optional<FileMetadata> metadata(const std::string& revision, const std::string& file, bool optional,
                                       std::string* answered_commit = nullptr) {
    RequestContext request{name_.repo, file, revision, resolve_url(revision, file)};
    HttpResponse response = head(request);
    check_commit(request, response);
    if (answered_commit != nullptr) *answered_commit = header(response.headers, "x-repo-commit");
    if (is_missing_entry(response)) {
      // A mirror's bare 404 names no commit: the commit asked for is the one that lacks it (else it is asked again
      // on every run).
      std::string commit = header(response.headers, "x-repo-commit");
      if (!is_commit_hash(commit) && is_commit_hash(revision)) commit = revision;
      if (is_commit_hash(commit)) cache_.mark_missing(commit, file);
      if (optional) {
        spdlog::debug("{}: no {} (optional)", name_.text(), file);
        return std::nullopt;
      }
    }
    if (response.status < 200 || response.status >= 400) fail("{}", explain_http_failure(request, response, settings_));
    FileMetadata metadata =
        read_file_metadata(response.headers, fmt::format("{}: {}: {}", name_.repo, file, url_shown(request.url)));
    // A small file is downloaded from the commit the hub answered for, not from the branch, which may have moved
    // since (regression: config.json came from resolve/main while every other file came from the commit).
    const std::string answered = header(response.headers, "x-repo-commit");
    if (metadata.location.empty() || metadata.location[0] == '/') {
      metadata.location = is_commit_hash(answered) ? resolve_url(answered, file) : request.url;
    }
    if (is_read_whole(file) && metadata.size > kMaxJsonFileBytes) {
      fail("{}: {}: {}: the hub announces {} bytes, more than the {} bytes a JSON file may have; nothing was "
           "downloaded",
           name_.repo, file, url_shown(request.url), metadata.size, kMaxJsonFileBytes);
    }
    return metadata;
  }

  // Puts the file's blob in the cache (downloading it under its lock unless present) and links it.
  void store(const std::string& commit, const std::string& file, const FileMetadata& metadata) {
    std::string blob = cache_.blob_path(metadata.etag);
    if (!is_regular_file(blob)) {
      FileLock lock(cache_.lock_path(metadata.etag),
                    fmt::format("{}: waiting for another process downloading {}", name_.repo, file));
      if (!is_regular_file(blob)) {
        BlobSource source{RequestContext{name_.repo, file, commit, metadata.location}, auth_headers(metadata.location),
                          metadata.etag, metadata.size};
        download_blob(http_, source, blob, settings_);
      }
    }
    cache_.link(commit, file, metadata.etag);
  }

  const RepoCache& cache_;
  const HubName& name_;
  const HubSettings& settings_;
  HttpClient http_;
};

// A model's files, all from the commit its revision names now; returns that commit.
std::string download_model(const RepoCache& cache, const HubName& name, const HubSettings& settings) {
  RepoDownload download(cache, name, settings);
  std::string commit = download.pin(kConfig, false);
  spdlog::info("{}: commit {}; downloading what the cache lacks into {}", name.text(), commit, cache.folder());
  for (const char* file : kOptionalFiles) download.fetch(commit, file, true);
  download.fetch(commit, kTokenizer, false);
  if (!download.fetch(commit, kSingleWeights, true)) {
    // Regression: only the index was named missing, as if a file of the repository were lost.
    if (!download.fetch(commit, kWeightIndex, true)) {
      fail_input("{}: commit {} has neither {} nor {}: its weights are in another format (pickled .bin files are "
                 "never downloaded: loading them can run code); convert them to safetensors",
                 name.text(), commit, kSingleWeights, kWeightIndex);
    }
    for (const std::string& shard : indexed_shards(cache.snapshot_dir(commit) + "/" + kWeightIndex)) {
      download.fetch(commit, shard, false);
    }
  }
  return commit;
}

// The optional files a snapshot neither holds nor records as absent (another client filled it: snapshot_download and
// hf_hub_download write no record of a file a repository lacks), asked for by its commit: a checkpoint used without its generation config or chat
// template would stop, or chat, otherwise than it should. Offline, the snapshot is used as it is.
void complete_optional_files(const RepoCache& cache, const HubName& name, const HubSettings& settings,
                             const std::string& commit) {
  std::vector<const char*> unknown;
  for (const char* file : kOptionalFiles) {
    if (!cache.has_file(commit, file) && !cache.known_missing(commit, file)) unknown.push_back(file);
  }
  if (unknown.empty()) return;
  // Info, not a warning: snapshot_download writes no absence records, and most repositories lack some of these.
  if (settings.offline) {
    spdlog::info("{}: the cache does not say whether commit {} has {}; offline, it is used without them", name.text(),
                 commit, fmt::join(unknown, ", "));
    return;
  }
  // The snapshot serves without them, as it did: an unreachable hub costs one try, and leaves it as it is.
  HubSettings once = settings;
  once.max_attempts = 1;
  try {
    RepoDownload download(cache, name, once);
    while (!unknown.empty()) {
      download.fetch(commit, unknown.back(), true);
      unknown.pop_back();
    }
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::warn("{}: commit {} from the cache without {}: asking the hub for them failed ({})", name.text(), commit,
                 fmt::join(unknown, ", "), e.what());
  }
}

// A hub name's snapshot: from the cache when it is complete there, else downloaded.
ResolvedModel resolve_hub_model(const HubName& name, const HubSettings& settings) {
  RepoCache cache(settings.cache_dir, name.repo);
  std::optional<std::string> commit = cache.commit_of(name.revision);
  std::vector<std::string> missing = commit ? missing_files(cache, *commit) : std::vector<std::string>{};
  if (commit && missing.empty()) {
    complete_optional_files(cache, name, settings, *commit);
    spdlog::info("{}: commit {} from the cache ({})", name.text(), *commit, cache.snapshot_dir(*commit));
    return ResolvedModel{cache.snapshot_dir(*commit), name.text(), *commit};
  }
  if (settings.offline) fail("{}", offline_message(cache, name, commit, missing));
  std::string downloaded = download_model(cache, name, settings);
  missing = missing_files(cache, downloaded);
  if (!missing.empty()) fail("{}: after the download {} still lacks {}", name.text(), cache.snapshot_dir(downloaded), fmt::join(missing, ", "));
  return ResolvedModel{cache.snapshot_dir(downloaded), name.text(), downloaded};
}

}  // namespace

ResolvedModel resolve_model(const std::string& name_or_dir) {
  // The environment (a token file among it) is read for hub names only: a local folder needs none of it.
  if (is_directory(name_or_dir)) return local_folder(name_or_dir);
  return resolve_model(name_or_dir, settings_from_environment());
}

ResolvedModel resolve_model(const std::string& name_or_dir, const HubSettings& settings) {
  if (is_directory(name_or_dir)) return local_folder(name_or_dir);
  std::optional<HubName> name = parse_hub_name(name_or_dir);
  if (!name) fail_input("{}: no such folder, and not a hub name (org/name or org/name@revision)", name_or_dir);
  try {
    return resolve_hub_model(*name, settings);
  } catch (const std::exception&) {
    // A mistyped local path reads as a hub name too: the message says it was looked for both ways.
    rethrow_with_context(fmt::format("no folder {} here, so it was read as a hub name", name_or_dir));
  }
}

namespace {

// Whether the snapshot's `folder` holds every file of one of `file_sets`.
bool holds_a_set(const RepoCache& cache, const std::string& commit, const std::string& folder,
                 const std::vector<std::vector<std::string>>& file_sets) {
  return std::any_of(file_sets.begin(), file_sets.end(), [&](const std::vector<std::string>& files) {
    return std::all_of(files.begin(), files.end(), [&](const std::string& f) { return cache.has_file(commit, folder + "/" + f); });
  });
}

std::string file_sets_text(const std::vector<std::vector<std::string>>& file_sets) {
  std::vector<std::string> sets;
  for (const std::vector<std::string>& files : file_sets) sets.push_back(fmt::format("{}", fmt::join(files, " + ")));
  return fmt::format("{}", fmt::join(sets, "; "));
}

}  // namespace

ResolvedModel resolve_folder(const std::string& hub_folder, const std::vector<std::vector<std::string>>& file_sets,
                             const HubSettings& settings) {
  std::optional<HubFolder> where = parse_hub_folder(hub_folder);
  if (!where || file_sets.empty()) fail_input("{}: no such folder, and not a hub folder (org/name/sub/folder[@revision])", hub_folder);
  RepoCache cache(settings.cache_dir, where->name.repo);
  std::optional<std::string> commit = cache.commit_of(where->name.revision);
  if (commit && holds_a_set(cache, *commit, where->folder, file_sets)) {
    spdlog::info("{}: commit {} from the cache", hub_folder, *commit);
    return ResolvedModel{cache.snapshot_dir(*commit) + "/" + where->folder, hub_folder, *commit};
  }
  if (settings.offline) {
    fail("{}: not in the cache with one of {}, and offline mode is on (HF_HUB_OFFLINE=1 or --offline), so nothing is "
         "downloaded: run once with network access, or pass a local folder", hub_folder, file_sets_text(file_sets));
  }
  RepoDownload download(cache, where->name, settings);
  const std::string pinned = download.pin(where->folder + "/" + file_sets.front().front(), true);
  spdlog::info("{}: commit {}; downloading what the cache lacks into {}", hub_folder, pinned, cache.folder());
  for (const std::vector<std::string>& files : file_sets) {
    // A set's first missing file ends it: its later (larger) files are not downloaded.
    if (std::all_of(files.begin(), files.end(), [&](const std::string& f) { return download.fetch(pinned, where->folder + "/" + f, true); })) {
      return ResolvedModel{cache.snapshot_dir(pinned) + "/" + where->folder, hub_folder, pinned};
    }
  }
  fail_input("{}: the hub's commit {} holds none of {} in {}", hub_folder, pinned, file_sets_text(file_sets), where->folder);
}

std::string pinned_model(const std::string& recorded_name, const std::string& revision) {
  if (recorded_name.empty() || recorded_name[0] == '/' || !is_commit_hash(revision)) return recorded_name;
  try {
    std::optional<HubName> name = parse_hub_name(recorded_name);
    return name ? name->repo + "@" + revision : recorded_name;
  } catch (const UsageError&) {
    return recorded_name;  // recorded by someone else with a revision we would not accept: left for the user
  }
}

}  // namespace probekit::hub
