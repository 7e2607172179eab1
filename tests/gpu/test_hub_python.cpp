// One Hugging Face cache for Python and for us, checked against huggingface_hub itself (installed on the GPU
// machine, not in Debian): Python reads offline the cache our client wrote, and our client reads offline the
// cache Python's downloads wrote, both from the same mock hub.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "common/files.h"
#include "hub/resolve.h"
#include "mock_hub.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const std::string kRepo = "probekit-test/gemma3-text";
const std::vector<std::string> kFiles = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};

hub::HubSettings settings_for(const MockHub& mock, const std::string& cache, bool offline) {
  hub::HubSettings settings;
  settings.endpoint = mock.endpoint();
  settings.cache_dir = cache;
  settings.offline = offline;
  return settings;
}

std::string python(const std::string& cache, const std::string& endpoint, const std::string& code) {
  return fmt::format("HF_HUB_CACHE={} HF_ENDPOINT={} HF_HUB_DISABLE_TELEMETRY=1 python3 -c \"{}\"", cache, endpoint, code);
}

}  // namespace

TEST_CASE("huggingface_hub reads the cache we wrote, and we read the cache it wrote") {
  REQUIRE_MESSAGE(run_command("python3 -c 'import huggingface_hub'").exit_code == 0, "huggingface_hub is not installed");
  MockHub mock;
  std::string commit = mock.add_folder(kRepo, std::string(PROBEKIT_FIXTURES) + "/models/gemma3_text", kFiles);
  TempDir tmp;

  hub::ResolvedModel ours = hub::resolve_model(kRepo, settings_for(mock, tmp.file("ours"), false));
  CHECK(ours.revision == commit);
  CommandResult read = run_command(python(
      tmp.file("ours"), mock.endpoint(),
      fmt::format("from huggingface_hub import snapshot_download; print(snapshot_download('{}', local_files_only=True))", kRepo)));
  REQUIRE_MESSAGE(read.exit_code == 0, read.output);
  CHECK_CONTAINS(read.output, "snapshots/" + commit);
  for (const std::string& file : kFiles) {
    CommandResult same = run_command(fmt::format("cmp {}/{} {}/models/gemma3_text/{}", ours.dir, file, PROBEKIT_FIXTURES, file));
    CHECK_MESSAGE(same.exit_code == 0, file, ": ", same.output);
  }

  std::string downloads;
  for (const std::string& file : kFiles) downloads += fmt::format("hf_hub_download('{}', '{}'); ", kRepo, file);
  CommandResult wrote = run_command(python(tmp.file("theirs"), mock.endpoint(), "from huggingface_hub import hf_hub_download; " + downloads));
  REQUIRE_MESSAGE(wrote.exit_code == 0, wrote.output);
  hub::ResolvedModel theirs = hub::resolve_model(kRepo, settings_for(mock, tmp.file("theirs"), true));
  CHECK(theirs.revision == commit);
  CHECK(is_regular_file(theirs.dir + "/model.safetensors"));
  CHECK(read_file(theirs.dir + "/config.json") == read_file(ours.dir + "/config.json"));
}
