// What the hub client's tests share: fixture checkpoints as repositories of a mock hub on 127.0.0.1 (mock_hub.h),
// and each case's start, a client of that hub with a cache of its own.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/files.h"
#include "hub/hub_settings.h"
#include "mock_hub.h"
#include "test_util.h"

namespace probekit::testing {

inline const std::vector<std::string> kShardedFiles = {
    "config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json",
    "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
inline const std::vector<std::string> kGemmaFiles = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                                     "chat_template.jinja", "model.safetensors"};
inline const std::string kShard2 = "model-00002-of-00003.safetensors";

// A fixture checkpoint as a hub repository, with files a run must never download beside it.
inline MockRepo fixture_repo(const std::string& dir, const std::vector<std::string>& files) {
  MockRepo repo;
  for (const std::string& file : files) repo.files[file] = read_file(dir + "/" + file);
  repo.files["pytorch_model.bin"] = "a pickle";
  repo.files["modeling_custom.py"] = "import os";
  repo.files["README.md"] = "# a model";
  repo.tags = {"v1.0"};
  return repo;
}

// doctest's matcher from a std::string.
inline doctest::Contains contains(const std::string& part) { return doctest::Contains(part.c_str()); }

// What each case starts from: a mock hub with no repository yet, and the settings of a client of it whose cache
// and token file lie in a fresh temp dir, with short waits between its retries.
struct HubCase {
  HubCase() {
    settings.endpoint = mock.endpoint();
    settings.cache_dir = tmp.file("hub");
    settings.token_file = tmp.file("token");
    settings.retry_wait_seconds = 0.01;
    settings.max_attempts = 3;
    settings.stall_seconds = 10;
  }

  MockHub mock;
  TempDir tmp;
  hub::HubSettings settings;
};

}  // namespace probekit::testing
