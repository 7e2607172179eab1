// steering_sweep keeps each finished generation in OUT.progress.jsonl, so that a sweep stopped by Ctrl-C (or an
// error, or a lost machine) goes on with --resume: the resumed sweep's file is the uninterrupted one's, number for
// number, and a progress file of other settings, of a cut last line or of damaged cells is handled naming the line.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "common/files.h"
#include "common/json.h"
#include "probe_fixture.h"
#include "sweep/sweep_progress.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

sweep::CellResult some_cell() {
  sweep::CellResult cell;
  cell.prompt_ids = {2, 651, 1780};
  cell.ids = {17, 4};
  cell.text = "é \"quoted\"\n";
  cell.stop = "length";
  cell.scores = {{0.1, 1.0 / 3.0}, {std::nextafter(0.5, 1.0), 2e-300}};
  cell.fluency.kl = {0.0, std::numeric_limits<double>::quiet_NaN()};
  cell.fluency.kl_mean = 0.125;
  cell.fluency.perplexity = std::numeric_limits<double>::infinity();  // kept as JSON keeps it: null, read back as NaN
  return cell;
}

// Lines of a text file, without their newlines.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// A progress file opened and started as a sweep of 5 cells scored by `labels` probes does.
std::unique_ptr<sweep::SweepProgress> opened(const std::string& out, const Json& settings, bool resume, bool overwrite,
                                             size_t labels = 2) {
  auto progress = std::make_unique<sweep::SweepProgress>(out, resume, overwrite);
  progress->start(settings, 5, labels);
  return progress;
}

const Json kSettings = {{"labels", {"a", "b"}}, {"coefficients", {-4, 4}}};

// The progress file a run of kSettings leaves after keeping one cell (cell 1).
std::string progress_of_one_cell(const std::string& out) {
  const sweep::CellResult cell = some_cell();
  opened(out, kSettings, false, false)->append({{1, &cell}});
  return read_file(out + ".progress.jsonl");
}

}  // namespace

TEST_CASE("a sweep's progress file keeps every bit of its cells, is one run's at a time, and is checked on --resume") {
  TempDir tmp;
  const std::string out = tmp.file("out");
  const sweep::CellResult cell = some_cell();
  {
    const auto progress = opened(out, kSettings, false, false);
    CHECK(progress->path() == out + ".progress.jsonl");
    // Regression guard: a second run into the same directory would interleave its lines.
    CHECK_THROWS_WITH_AS(sweep::SweepProgress(out, true, true),
                         doctest::Contains("another steering_sweep into the same output directory is running"),
                         std::invalid_argument);
    progress->append({{3, &cell}});
  }
  // Refused before the model loads: the constructor reads the file.
  CHECK_THROWS_WITH_AS(sweep::SweepProgress(out, false, false),
                       doctest::Contains("holds the generations of an interrupted sweep into"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(opened(out, {{"labels", {"a"}}, {"coefficients", {-4, 4}}}, true, false, 1),
                       doctest::Contains("was made with other labels (kept: [\"a\",\"b\"]; asked: [\"a\"]); use --overwrite"),
                       std::runtime_error);
  // Regression: with --overwrite given too, the advice was to pass it.
  CHECK_THROWS_WITH_AS(opened(out, {{"labels", {"a", "b"}}, {"coefficients", {-8, 8}}}, true, true),
                       doctest::Contains("other coefficients (kept: [-4,4]; asked: [-8,8]); leave out --resume to start again"),
                       std::runtime_error);
  {
    const auto resumed = opened(out, kSettings, true, false);
    REQUIRE(resumed->kept().size() == 1);
    const sweep::CellResult& back = resumed->kept().at(3);
    CHECK(back.prompt_ids == cell.prompt_ids);
    CHECK(back.ids == cell.ids);
    CHECK(back.text == cell.text);
    CHECK(back.stop == cell.stop);
    CHECK(back.scores == cell.scores);  // bit for bit
    CHECK(back.fluency.kl[0] == 0.0);
    CHECK(std::isnan(back.fluency.kl[1]));
    CHECK(back.fluency.kl_mean == 0.125);
    CHECK(std::isnan(back.fluency.perplexity));
    resumed->remove();
  }
  CHECK_FALSE(path_exists(out + ".progress.jsonl"));
  // A run that kept nothing leaves no file, whether or not it started.
  { const auto nothing = opened(out, kSettings, false, false); }
  { sweep::SweepProgress unstarted(out, false, false); }
  CHECK_FALSE(path_exists(out + ".progress.jsonl"));
}

TEST_CASE("a sweep's progress file: --overwrite discards the kept cells with a warning, a cut last line is left out") {
  TempDir tmp;
  const std::string out = tmp.file("out");
  const sweep::CellResult cell = some_cell();
  const std::string kept = progress_of_one_cell(out);
  // A last line a kill cut short is left out, and the next line starts on a line of its own.
  write_text(out + ".progress.jsonl", kept + "{\"cell\": 4, \"prompt_i");
  {
    const auto resumed = opened(out, kSettings, true, false);
    CHECK(resumed->kept().size() == 1);
    resumed->append({{4, &cell}});
  }
  CHECK(read_file(out + ".progress.jsonl").find("\"prompt_i{") == std::string::npos);
  CHECK(opened(out, kSettings, true, false)->kept().size() == 2);
  // Regression: --overwrite discarded them without a word.
  LoggedLines logged;
  CHECK(opened(out, kSettings, false, true)->kept().empty());
  CHECK_CONTAINS(logged.text(), "--overwrite: the 2 generations an interrupted sweep kept in " + out +
                                    ".progress.jsonl are discarded");
  CHECK_FALSE(path_exists(out + ".progress.jsonl"));
  // Regression: "out/." named its progress file "out/..progress.jsonl", inside the output directory.
  CHECK(sweep::progress_path(out + "/.") == out + ".progress.jsonl");
  CHECK(sweep::progress_path(out + "/./") == out + ".progress.jsonl");
  CHECK(sweep::progress_path(out + "/") == out + ".progress.jsonl");
  CHECK(sweep::progress_path(".") == absolute_path(".") + ".progress.jsonl");
  CHECK(sweep::progress_path("..").find("/..progress.jsonl") == std::string::npos);
}

TEST_CASE("a sweep's progress file of damaged cells is refused naming the file, the line and what was expected") {
  TempDir tmp;
  const std::string out = tmp.file("out");
  const std::string kept = progress_of_one_cell(out);
  const std::vector<std::string> lines = lines_of(kept);
  const auto refused = [&](const std::string& text, const std::string& message) {
    write_text(out + ".progress.jsonl", text);
    CHECK_THROWS_WITH_AS(opened(out, kSettings, true, false), doctest::Contains(message.c_str()), std::runtime_error);
  };
  const auto changed = [&](const std::function<void(Json&)>& change) {
    Json line = parse_json(lines[1], "line 2");
    change(line);
    return lines[0] + "\n" + line.dump() + "\n";
  };
  refused(changed([](Json& line) { line["scores"][1] = Json::array({0.5}); }),
          "out.progress.jsonl:2: 'scores' must hold one array of 2 scores per generated token, got [0.5]");
  // Regression: cells of no scores, of no KL values or of another stop were taken as they were.
  refused(changed([](Json& line) { line["scores"] = Json::array(); }),
          "out.progress.jsonl:2: 2 generated ids, but 0 tokens' scores and 2 KL values");
  refused(changed([](Json& line) { line["kl"] = Json::array(); }),
          "out.progress.jsonl:2: 2 generated ids, but 2 tokens' scores and 0 KL values");
  refused(changed([](Json& line) { line["stop"] = "banana"; }),
          "out.progress.jsonl:2: 'stop' must be \"eos\" or \"length\", got \"banana\"");
  refused(changed([](Json& line) { line.erase("kl_mean"); }), "out.progress.jsonl:2: missing 'kl_mean'");
  refused(kept + "{\"cell\": 9, \"ids\": [1, 2]}\n", "out.progress.jsonl:3: 'cell' 9 is not one of the sweep's 5");
  refused("{\"cell\": 1}\n" + kept, "out.progress.jsonl:1: not a steering_sweep progress file");
  // Regression: a line of 200,000 nested brackets crashed the resume (SIGSEGV) printing it.
  refused(kept + std::string(200000, '[') + "\n", "out.progress.jsonl:3: arrays and objects nest more than 512 levels deep");
}

TEST_CASE("steering_sweep stopped by Ctrl-C goes on with --resume to the file an uninterrupted sweep writes") {
  TempDir tmp;
  ProbeFixture fixture;
  fixture.layers = "2";
  fixture.epochs = 20;
  const std::string probes = train_fixture_probes(tmp, fixture);
  write_text(tmp.file("prompts.txt"), "I kept asking myself\nLet me step back\nThe plan was simple\nWhat if we\n");
  // Sampled, so that a resumed cell must draw the numbers its prompt draws.
  const std::string unseeded = fmt::format(
      "{} --probes-dir {} --model {} --layer 2 --coefficients=-8,-4,4,8 --file {} --max-new-tokens 24 --no-stop "
      "--temperature 1 --device cpu -q",
      tool("steering_sweep"), probes, kGemmaModel, tmp.file("prompts.txt"));
  const std::string base = unseeded + " --seed 5 --output-dir ";
  REQUIRE(run_command(base + tmp.file("whole")).exit_code == 0);
  const std::string progress = tmp.file("resumed.progress.jsonl");
  // sh starts a background job with SIGINT ignored, which env resets to the default a foreground job has. The signal
  // goes once the progress file holds three generations, with --rows-per-batch 1 about 50 before the sweep's end.
  const std::string started =
      fmt::format("for i in $(seq 1200); do [ \"$(wc -l < {} 2>/dev/null || echo 0)\" -ge 4 ] && break; sleep 0.05; done;",
                  progress);
  CommandResult r = run_command(
      fmt::format("{{ env --default-signal=INT {} --rows-per-batch 1 & pid=$!; {} kill -INT $pid; wait $pid; echo \"exit $?\"; }}",
                  base + tmp.file("resumed"), started));
  CHECK_CONTAINS(r.output, "exit 130");
  CHECK_CONTAINS(r.output, "generations are kept in " + progress + ": the same command with --resume goes on from them");
  CHECK_CONTAINS(r.output, "interrupted: the output directory is as it was before this run");
  CHECK_FALSE(path_exists(tmp.file("resumed")));
  check_failure(run_command(base + tmp.file("resumed")), 1, {"holds the generations of an interrupted sweep", "--resume"});
  check_failure(run_command(unseeded + " --seed 6 --resume --output-dir " + tmp.file("resumed")), 1,
                {"cannot resume: ", "was made with other generation"});
  // Regression: probes trained again into the same directory were taken for those that scored the kept generations
  // (the path is not compared, so other probes elsewhere stand for them), and another spelling of the same
  // directory was taken for other probes.
  fixture.epochs = 21;
  TempDir retrained_tmp;
  std::string retrained = base;
  retrained.replace(retrained.find(probes), probes.size(), train_fixture_probes(retrained_tmp, fixture));
  check_failure(run_command(retrained + tmp.file("resumed") + " --resume"), 1,
                {"cannot resume: ", "was made with other probes_sha256"});
  std::string respelled = base;
  respelled.replace(respelled.find(probes), probes.size(), probes + "/./");
  r = run_command(respelled + tmp.file("resumed") + " --resume --rows-per-batch 5");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_FALSE(path_exists(progress));
  const Json whole = read_json_file(tmp.file("whole/sweep.json")), resumed = read_json_file(tmp.file("resumed/sweep.json"));
  CHECK(resumed["resumed_generations"].get<int64_t>() >= 3);
  CHECK(whole["resumed_generations"] == 0);
  CHECK(resumed["cells"] == whole["cells"]);
  CHECK(resumed["summary"] == whole["summary"]);
  CHECK(is_regular_file(tmp.file("resumed/sweep.html")));
}
