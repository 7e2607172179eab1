// Writing outputs: a file replaced in one step without following a link, and directories staged beside their final
// name without touching the user's folders or the run's own inputs.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::TempDir;

namespace {

std::string this_host() {
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof(name) - 1) == 0);
  return name;
}

// A process id that no process holds now: a child's, once it has exited and been waited for.
pid_t gone_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  return child;
}

}  // namespace

TEST_CASE("write_file_atomic never writes through a link, nor over a file, left at a temporary name") {
  TempDir tmp;
  testing::write_text(tmp.file("precious.txt"), "precious");
  // The temporary name the writer used before: a link there had the output written into its target.
  REQUIRE(::symlink(tmp.file("precious.txt").c_str(), tmp.file("out.csv.tmp").c_str()) == 0);
  write_file_atomic(tmp.file("out.csv"), "a,b\n");
  CHECK(read_file(tmp.file("precious.txt")) == "precious");
  CHECK(read_file(tmp.file("out.csv")) == "a,b\n");
  CHECK(is_regular_file(tmp.file("out.csv")));
  write_file_atomic(tmp.file("out.csv"), "c\n");
  CHECK(read_file(tmp.file("out.csv")) == "c\n");
  for (const std::string& name : list_directory(tmp.path())) CHECK_MESSAGE(name.find(".tmp-") == std::string::npos, name);
}

TEST_CASE("a staged directory leaves the user's folders of similar names alone and removes only its runs' leftovers") {
  TempDir tmp;
  const std::string out = tmp.file("out");
  for (const char* folder : {"out.partial", "out.replaced"}) {
    make_directories(tmp.file(folder));
    testing::write_text(tmp.file(folder) + "/notes.txt", "mine");
  }
  // Left by runs killed on this host: one of ours whose process is gone goes; one without our marker, or whose
  // process still runs, stays.
  const std::string stale = fmt::format("{}.partial-{}-0", out, gone_pid());
  const std::string running = fmt::format("{}.partial-{}", out, ::getppid());
  const std::string unmarked = fmt::format("{}.partial-{}", out, gone_pid());
  for (const std::string& dir : {stale, running}) {
    make_directories(dir);
    testing::write_text(dir + "/.probekit-staging", this_host());
  }
  make_directories(unmarked);
  {
    StagedDirectory staged(out, false, {});
    CHECK(staged.path().rfind(fmt::format("{}.partial-{}-", out, ::getpid()), 0) == 0);
    testing::write_text(staged.path() + "/result.json", "{}");
    staged.commit();
  }
  CHECK(read_file(out + "/result.json") == "{}");
  CHECK_FALSE(path_exists(out + "/.probekit-staging"));
  CHECK(is_regular_file(out + "/" + kOutputMarker));
  CHECK_FALSE(path_exists(stale));
  CHECK(is_directory(running));
  CHECK(is_directory(unmarked));
  {
    StagedDirectory again(out, true, {});
    testing::write_text(again.path() + "/result.json", "[]");
    again.commit();
  }
  CHECK(read_file(out + "/result.json") == "[]");
  CHECK(read_file(tmp.file("out.partial") + "/notes.txt") == "mine");
  CHECK(read_file(tmp.file("out.replaced") + "/notes.txt") == "mine");
}

TEST_CASE("a staged directory refuses to replace a directory holding the run's inputs") {
  TempDir tmp;
  make_directories(tmp.file("probes"));
  testing::write_text(tmp.file("probes/probes.json"), "{}");
  CHECK_THROWS_WITH_AS(StagedDirectory(tmp.file("probes"), true, {tmp.file("probes/probes.json")}),
                       doctest::Contains("it holds the input"), UsageError);
  CHECK_THROWS_WITH_AS(StagedDirectory(tmp.path(), true, {tmp.file("probes")}), doctest::Contains("it holds the input"),
                       UsageError);
  CHECK(read_file(tmp.file("probes/probes.json")) == "{}");
}

TEST_CASE("--overwrite replaces only a directory a probekit tool wrote, never a folder of the user's") {
  TempDir tmp;
  const std::string mine = tmp.file("mine");
  make_directories(mine + "/photos");
  for (const char* name : {"a.txt", "b.txt", "c.txt", "d.txt"}) testing::write_text(mine + "/" + name, name);
  // Regression: the commit moved the folder aside and deleted everything in it.
  CHECK_THROWS_WITH_AS(StagedDirectory(mine, true, {}),
                       doctest::Contains("--overwrite replaces only a directory that a probekit tool wrote (one holding "
                                         ".probekit-output), and this one holds a.txt, b.txt, c.txt and 2 more"),
                       std::invalid_argument);
  CHECK(read_file(mine + "/a.txt") == "a.txt");
  CHECK(is_directory(mine + "/photos"));
  // Probes written before the marker was are still replaced.
  const std::string earlier = tmp.file("earlier");
  make_directories(earlier);
  testing::write_text(earlier + "/probes.json", "{}");
  StagedDirectory again(earlier, true, {});
  testing::write_text(again.path() + "/probes.json", "[]");
  again.commit();
  CHECK(read_file(earlier + "/probes.json") == "[]");
}

// Regression: the message named the staging directory (OUT.partial-<pid>-<n>), a path the user never gave.
TEST_CASE("a staged directory that cannot be made is reported by the output directory's name") {
  if (!is_directory("/proc/self")) return;  // Linux: nothing, not even root, makes a directory in /proc
  try {
    StagedDirectory staged("/proc/probekit-out", false, {});
    FAIL("a directory was made in /proc");
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.rfind("cannot write the output directory /proc/probekit-out: ", 0) == 0, message);
    CHECK_MESSAGE(message.find(".partial-") == std::string::npos, message);
  }
}
