// Python's random module, the reference's stratified split, and the JSONL dataset reader (files, pipes, FIFOs and
// standard input).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "data/python_random.h"
#include "data/reference_labels.h"
#include "data/splits.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::LoggedLines;
using probekit::testing::TempDir;
using probekit::testing::write_text;

namespace {
Json python_outputs() { return read_json_file(std::string(PROBEKIT_FIXTURES) + "/splits/python_splits.json"); }
}  // namespace

TEST_CASE("the Mersenne Twister seeded as random.seed(n) matches CPython") {
  const Json outputs = python_outputs();
  for (const Json& c : outputs["raw"]) {
    data::PythonRandom random(c["seed"].get<uint64_t>());
    for (const Json& expected : c["outputs"]) {
      CHECK_MESSAGE(random.getrandbits(32) == expected.get<uint64_t>(), "seed ", c["seed"].dump());
    }
  }
}

TEST_CASE("shuffle matches random.shuffle") {
  const Json outputs = python_outputs();
  for (const Json& c : outputs["shuffles"]) {
    data::PythonRandom random(c["seed"].get<uint64_t>());
    std::vector<int64_t> items(c["n"].get<size_t>());
    for (size_t i = 0; i < items.size(); ++i) items[i] = static_cast<int64_t>(i);
    random.shuffle(items);
    CHECK(items == c["result"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("stratified splits equal the reference's membership and order") {
  int checked = 0;
  const Json outputs = python_outputs();
  for (const Json& c : outputs["splits"]) {
    auto labels = c["labels"].get<std::vector<std::string>>();
    auto r = c["ratios"].get<std::vector<double>>();
    auto splits = data::stratified_split(labels, data::SplitRatios{r[0], r[1], r[2]}, c["seed"].get<uint64_t>());
    for (size_t s = 0; s < 3; ++s) {
      CHECK_MESSAGE(splits[s] == c["splits"][s].get<std::vector<int64_t>>(), c["name"].get<std::string>(), " seed ",
                    c["seed"].dump(), " ratios ", c["ratios"].dump(), " split ", s);
    }
    ++checked;
  }
  CHECK(checked >= 19);
}

TEST_CASE("split ratios are validated") {
  CHECK(data::parse_split_ratios("0.8,0.1,0.1").train == 0.8);
  CHECK_THROWS_AS(data::parse_split_ratios("0.7,0.2"), UsageError);
  CHECK_THROWS_AS(data::parse_split_ratios("0.7,0.2,0.2"), UsageError);
  CHECK_THROWS_AS(data::parse_split_ratios("0.7,x,0.3"), UsageError);
}

TEST_CASE("datasets in the reference's two formats, labels indexed as the reference does, blank lines ignored") {
  TempDir tmp;
  std::string path = tmp.file("d.jsonl");
  write_text(path,
             "{\"text\": \"b text\", \"cognitive_action\": \"zooming_in\", \"domain\": \"work\"}\n"
             "\n"
             "{\"text\": \"a text\", \"cognitive_action\": \"analyzing\"}\r\n"
             "{\"text\": \"c text\", \"cognitive_action\": \"zooming_in\", \"domain\": 3}\n");
  data::DatasetOptions options;
  options.keep_fields = {"domain"};
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.label_field == "cognitive_action");
  REQUIRE(d.examples.size() == 3);
  // Its cognitive actions index the reference's sorted list of 45, whatever subset the file holds.
  CHECK(d.label_names == data::reference_label_names());
  CHECK(d.labels == std::vector<int64_t>{43, 3, 43});  // zooming_in, analyzing
  CHECK(d.examples[1].line == 2);
  CHECK(d.examples[0].kept[0] == "work");
  CHECK(d.examples[1].kept[0] == "");
  CHECK(d.examples[2].kept[0] == "3");

  // Other datasets index their sorted distinct labels: a label outside the 45, another label field.
  write_text(path, "{\"text\": \"a\", \"cognitive_action\": \"zooming_in\"}\n{\"text\": \"b\", \"cognitive_action\": \"daydreaming\"}\n");
  d = data::read_dataset(path, {});
  CHECK(d.label_names == std::vector<std::string>{"daydreaming", "zooming_in"});
  CHECK(d.labels == std::vector<int64_t>{1, 0});
  data::DatasetOptions topic;
  topic.label_field = "topic";
  write_text(path, "{\"text\": \"a\", \"topic\": \"zooming_in\"}\n{\"text\": \"b\", \"topic\": \"analyzing\"}\n");
  CHECK(data::read_dataset(path, topic).label_names == std::vector<std::string>{"analyzing", "zooming_in"});

  write_text(path, "{\"text\": \"good\", \"sentiment\": \"positive\", \"cognitive_action\": \"x\"}\n");
  CHECK(data::read_dataset(path, {}).label_field == "sentiment");
  options = {};
  options.max_examples = 1;
  write_text(path, "{\"text\": \"a\", \"sentiment\": \"positive\"}\n{\"text\": \"b\", \"sentiment\": \"negative\"}\n");
  CHECK(data::read_dataset(path, options).examples.size() == 1);
}

TEST_CASE("bad dataset lines name the file, the line and the field") {
  TempDir tmp;
  std::string path = tmp.file("bad.jsonl");
  auto error_of = [&](const std::string& contents, data::DatasetOptions options = {}) -> std::string {
    write_text(path, contents);
    try {
      data::read_dataset(path, options);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    FAIL("expected an error for " << contents);
    return "";
  };
  std::string good = "{\"text\": \"fine\", \"cognitive_action\": \"noticing\"}\n";
  CHECK_CONTAINS(error_of(good + "{\"text\": \"broken\n"), "bad.jsonl:2: invalid JSON");
  CHECK_CONTAINS(error_of(good + "{\"cognitive_action\": \"noticing\"}\n"), "bad.jsonl:2: missing field 'text'");
  CHECK_CONTAINS(error_of(good + "{\"text\": \"  \", \"cognitive_action\": \"noticing\"}\n"), "bad.jsonl:2: field 'text' is empty");
  CHECK_CONTAINS(error_of(good + "{\"text\": 5, \"cognitive_action\": \"noticing\"}\n"), "must be a string");
  CHECK_CONTAINS(error_of(good + "{\"text\": \"x\"}\n"), "missing label field 'cognitive_action'");
  CHECK_CONTAINS(error_of("{\"text\": \"x\", \"topic\": \"y\"}\n"), "unknown label field");
  CHECK_CONTAINS(error_of(good + "{\"text\": \"caf\xe9\", \"cognitive_action\": \"noticing\"}\n"), "bad.jsonl:2: the line is not valid UTF-8");
  CHECK_CONTAINS(error_of(good + "[1, 2]\n"), "expected a JSON object");
  CHECK_CONTAINS(error_of(""), "no usable examples");
  data::DatasetOptions labelled;
  labelled.label_field = "topic";
  CHECK_CONTAINS(error_of(good, labelled), "missing label field 'topic'");
}

TEST_CASE("fuzz regression (fuzz_dataset): a number beyond a double's range is a bad line, not a crash") {
  // nlohmann's parser throws out_of_range rather than parse_error for it, which escaped the line's context.
  TempDir tmp;
  std::string path = tmp.file("overflow.jsonl");
  write_text(path, "{\"text\": \"fine\", \"cognitive_action\": \"noticing\"}\n2e308\n{\"text\": \"x\", \"score\": -1e999}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, {}), doctest::Contains("overflow.jsonl:2: invalid JSON: number overflow parsing '2e308'"),
                       std::invalid_argument);
  data::DatasetOptions options;
  options.skip_invalid = true;
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.examples.size() == 1);
  REQUIRE(d.skipped.size() == 2);
  CHECK_CONTAINS(d.skipped[1].reason, "overflow.jsonl:3: invalid JSON: number overflow");
}

TEST_CASE("skip_invalid counts and reports bad lines instead of failing") {
  TempDir tmp;
  std::string path = tmp.file("mixed.jsonl");
  write_text(path,
             "{\"text\": \"one\", \"cognitive_action\": \"a\"}\n"
             "not json\n"
             "{\"text\": \"\", \"cognitive_action\": \"a\"}\n"
             "{\"text\": \"two\", \"cognitive_action\": \"b\"}\n");
  data::DatasetOptions options;
  options.skip_invalid = true;
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.examples.size() == 2);
  REQUIRE(d.skipped.size() == 2);
  CHECK(d.skipped[0].line == 1);
  CHECK_CONTAINS(d.skipped[1].reason, "is empty");
}

TEST_CASE("integer labels sort as numbers, as the reference's sorted() sorts ints; a file mixing them with strings is "
          "refused") {
  TempDir tmp;
  std::string path = tmp.file("ids.jsonl");
  data::DatasetOptions options;
  options.label_field = "topic";
  // Regression: they sorted as text (2, 10, 1 gave ["1", "10", "2"]), so an index named another label than the
  // reference's.
  write_text(path, "{\"text\": \"a\", \"topic\": 2}\n{\"text\": \"b\", \"topic\": 10}\n{\"text\": \"c\", \"topic\": 1}\n"
                   "{\"text\": \"d\", \"topic\": -3}\n{\"text\": \"e\", \"topic\": 18446744073709551615}\n");
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.integer_labels);
  CHECK(d.label_names == std::vector<std::string>{"-3", "1", "2", "10", "18446744073709551615"});
  CHECK(d.labels == std::vector<int64_t>{2, 3, 1, 0, 4});
  // Strings keep Python's order of strings.
  write_text(path, "{\"text\": \"a\", \"topic\": \"2\"}\n{\"text\": \"b\", \"topic\": \"10\"}\n");
  CHECK(data::read_dataset(path, options).label_names == std::vector<std::string>{"10", "2"});

  // Regression: 1 and "1" became one label (Python's sorted() raises on the two kinds together).
  write_text(path, "{\"text\": \"a\", \"topic\": 1}\n{\"text\": \"b\", \"topic\": \"1\"}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options),
                       doctest::Contains("ids.jsonl:2: label field 'topic' holds a string, the rows before it integers: "
                                         "labels are strings or integers, not both"),
                       std::invalid_argument);
  write_text(path,
             "{\"text\": \"a\", \"topic\": \"x\"}\n\n{\"text\": \"b\", \"topic\": 7}\n{\"text\": \"c\", \"topic\": \"y\"}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options),
                       doctest::Contains("ids.jsonl:3: label field 'topic' holds an integer"), std::invalid_argument);
  options.skip_invalid = true;
  d = data::read_dataset(path, options);
  CHECK(d.label_names == std::vector<std::string>{"x", "y"});
  REQUIRE(d.skipped.size() == 1);
  CHECK(d.skipped[0].line == 2);
  options.skip_invalid = false;
  // Floating-point labels stay refused, the message naming both kinds a label may be.
  write_text(path, "{\"text\": \"a\", \"topic\": 0.5}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options),
                       doctest::Contains("ids.jsonl:1: label field 'topic' must be a string with more than blanks, or an "
                                         "integer, found 0.5"),
                       std::invalid_argument);
  // Regression: a label of blanks alone was taken as a label.
  write_text(path, "{\"text\": \"a\", \"topic\": \"x\"}\n{\"text\": \"b\", \"topic\": \" \\t \"}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options),
                       doctest::Contains("ids.jsonl:2: label field 'topic' must be a string with more than blanks"),
                       std::invalid_argument);
}

TEST_CASE("regression: a field nested past 256 levels is refused naming the file, the line and the field, not a crash") {
  // Storing a kept field (Json::dump) recursed once per level: 200,000 levels overflowed the stack.
  auto nested = [](size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  TempDir tmp;
  std::string path = tmp.file("deep.jsonl");
  std::string good = "{\"text\": \"fine\", \"cognitive_action\": \"noticing\", \"domain\": " + nested(256) + "}\n";
  data::DatasetOptions options;
  options.keep_fields = {"domain"};
  write_text(path, good);
  CHECK(data::read_dataset(path, options).examples[0].kept[0] == nested(256));
  write_text(path, good + "{\"text\": \"deep\", \"cognitive_action\": \"noticing\", \"domain\": " + nested(200000) + "}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options),
                       doctest::Contains("deep.jsonl:2: field 'domain' nests arrays and objects more than 256 levels deep"),
                       std::invalid_argument);
  // The label (quoted in its error) and a conversation's messages (stored as text) are read the same way.
  write_text(path, good + "{\"text\": \"deep\", \"cognitive_action\": " + nested(257) + "}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options), doctest::Contains("deep.jsonl:2: field 'cognitive_action' nests"),
                       std::invalid_argument);
  write_text(path, "{\"messages\": " + nested(200000) + ", \"cognitive_action\": \"noticing\"}\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, {}), doctest::Contains("deep.jsonl:1: field 'messages' nests"),
                       std::invalid_argument);
  options.skip_invalid = true;
  write_text(path, good + "{\"text\": \"deep\", \"cognitive_action\": \"noticing\", \"domain\": " + nested(200000) + "}\n");
  data::Dataset d = data::read_dataset(path, options);
  CHECK(d.examples.size() == 1);
  CHECK(d.skipped.size() == 1);
}

TEST_CASE("a conversation row keeps its keys in the order written: a chat template's tojson prints them so") {
  TempDir tmp;
  const std::string path = tmp.file("tools.jsonl");
  const std::string messages = R"([{"role":"assistant","content":null,"tool_calls":[{"type":"function",)"
                               R"("function":{"name":"f","arguments":{"zeta":1,"alpha":2}}}]}])";
  const std::string tools = R"([{"type":"function","function":{"name":"f","parameters":{}}}])";
  write_text(path, R"({"messages": )" + messages + R"(, "cognitive_action": "noticing", "tools": )" + tools + "}\n" +
                       R"({"messages": )" + messages + R"(, "cognitive_action": "noticing"})" + "\n");
  const data::Dataset d = data::read_dataset(path, {});
  REQUIRE(d.examples.size() == 2);
  CHECK(d.examples[0].messages == R"({"messages":)" + messages + R"(,"tools":)" + tools + "}");
  CHECK(d.examples[1].messages == messages);
  // An integer past 64 bits is refused within the conversation, and left to the other fields' own reading elsewhere.
  write_text(path, R"({"messages": [{"role": "user", "content": "a", "id": 18446744073709551616}], "cognitive_action": "noticing"})"
                   "\n");
  CHECK_THROWS_WITH_AS(data::read_dataset(path, {}), doctest::Contains("tools.jsonl:1: in 'messages', the integer 18446744073709551616"),
                       std::invalid_argument);
  write_text(path, R"({"messages": [{"role": "user", "content": "a"}], "cognitive_action": "noticing", "id": 18446744073709551616})"
                   "\n");
  CHECK(data::read_dataset(path, {}).examples.size() == 1);
}

namespace {

// `count` lines in the reference's format, more than a pipe's buffer holds when count is large.
std::string action_lines(int count) {
  std::string lines;
  for (int i = 0; i < count; ++i) {
    lines += fmt::format("{{\"text\": \"text number {}\", \"cognitive_action\": \"{}\"}}\n", i, i % 2 ? "noticing" : "analyzing");
  }
  return lines;
}

std::string sha256_of(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes);
  return hash.hex_digest();
}

// Writes `bytes` into a descriptor from another thread (a pipe's reader must run meanwhile), then closes it.
std::thread write_and_close(int fd, std::string bytes) {
  return std::thread([fd, bytes = std::move(bytes)] {
    for (size_t at = 0; at < bytes.size();) {
      ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::close(fd);
  });
}

// Puts `fd` in the place of standard input for the scope, then the original back.
class StandardInputFrom {
 public:
  explicit StandardInputFrom(int fd) : saved_(::dup(STDIN_FILENO)) {
    REQUIRE(saved_ >= 0);
    REQUIRE(::dup2(fd, STDIN_FILENO) == STDIN_FILENO);
  }
  ~StandardInputFrom() {
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
  }
  StandardInputFrom(const StandardInputFrom&) = delete;
  StandardInputFrom& operator=(const StandardInputFrom&) = delete;

 private:
  int saved_;
};

}  // namespace

TEST_CASE("a dataset from a FIFO, a pipe (<(zcat ...)) or standard input (-) is read whole, once, and hashed as read") {
  TempDir tmp;
  const std::string lines = action_lines(3000);  // ~170 kB: several fills of a 64 kB pipe buffer
  const std::string digest = sha256_of(lines);

  SUBCASE("a regular file: not a stream, its hash that of the file") {
    write_text(tmp.file("d.jsonl"), lines);
    data::Dataset d = data::read_dataset(tmp.file("d.jsonl"), {});
    CHECK_FALSE(d.from_stream);
    CHECK(d.sha256 == sha256_file(tmp.file("d.jsonl")));
    CHECK(d.sha256 == digest);
    CHECK(d.examples.size() == 3000);
  }
  SUBCASE("a named FIFO, its writer a thread that opens it after the reader") {
    REQUIRE(::mkfifo(tmp.file("fifo").c_str(), 0600) == 0);
    std::thread writer([&] {
      int fd = ::open(tmp.file("fifo").c_str(), O_WRONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      write_and_close(fd, lines).join();
    });
    data::Dataset d = data::read_dataset(tmp.file("fifo"), {});
    writer.join();
    CHECK(d.from_stream);
    CHECK(d.sha256 == digest);
    REQUIRE(d.examples.size() == 3000);
    CHECK(d.examples[2999].text == "text number 2999");
    CHECK(d.label_field == "cognitive_action");
  }
  SUBCASE("/dev/fd/N of a pipe, as bash's process substitution names it") {
    int ends[2];
    REQUIRE(::pipe(ends) == 0);
    std::thread writer = write_and_close(ends[1], lines);
    data::Dataset d = data::read_dataset(fmt::format("/dev/fd/{}", ends[0]), {});
    writer.join();
    ::close(ends[0]);
    CHECK(d.from_stream);
    CHECK(d.sha256 == digest);
    CHECK(d.examples.size() == 3000);
  }
  SUBCASE("- reads standard input; its lines are named <stdin>") {
    int ends[2];
    REQUIRE(::pipe(ends) == 0);
    std::thread writer = write_and_close(ends[1], lines + "{\"text\": \"broken\n");
    data::DatasetOptions options;
    options.skip_invalid = true;
    data::Dataset d;
    {
      StandardInputFrom input(ends[0]);
      d = data::read_dataset("-", options);
    }
    writer.join();
    ::close(ends[0]);
    CHECK(d.path == "-");
    CHECK(d.from_stream);
    CHECK(d.sha256 == sha256_of(lines + "{\"text\": \"broken\n"));
    CHECK(d.examples.size() == 3000);
    REQUIRE(d.skipped.size() == 1);
    CHECK_CONTAINS(d.skipped[0].reason, "<stdin>:3001: invalid JSON");
  }
}

TEST_CASE("a dataset that is a directory, or - on a terminal, is refused naming it") {
  TempDir tmp;
  CHECK_THROWS_WITH_AS(data::read_dataset(tmp.path(), {}),
                       doctest::Contains("is a directory, expected a regular file, a pipe or a FIFO"), std::runtime_error);
  CHECK_THROWS_WITH_AS(data::read_dataset(tmp.file("none.jsonl"), {}), doctest::Contains("none.jsonl: cannot open the dataset: no such file"),
                       std::invalid_argument);
  // A terminal would wait for typing: a pseudo-terminal stands in for one.
  int terminal = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (terminal < 0 || ::grantpt(terminal) != 0 || ::unlockpt(terminal) != 0) {
    MESSAGE("skipped the terminal case: no pseudo-terminal here");
    return;
  }
  int follower = ::open(::ptsname(terminal), O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(follower >= 0);
  {
    StandardInputFrom input(follower);
    CHECK_THROWS_WITH_AS(data::read_dataset("-", {}), doctest::Contains("--dataset -: standard input is a terminal"),
                         std::invalid_argument);
  }
  ::close(follower);
  ::close(terminal);
}

TEST_CASE("--keep-fields naming a field no example has: a warning naming the field and the file, an error when strict") {
  TempDir tmp;
  std::string path = tmp.file("kept.jsonl");
  write_text(path,
             "{\"text\": \"a\", \"cognitive_action\": \"noticing\", \"domain\": \"work\"}\n"
             "not json\n"
             "{\"text\": \"b\", \"cognitive_action\": \"noticing\", \"domian\": \"home\"}\n");
  data::DatasetOptions options;
  options.skip_invalid = true;
  options.keep_fields = {"domain", "emotional_state", "domian"};
  {
    LoggedLines log;
    data::Dataset d = data::read_dataset(path, options);
    REQUIRE(d.examples.size() == 2);
    CHECK(d.examples[1].kept == std::vector<std::string>{"", "", "home"});
    std::string text = log.text();
    CHECK_CONTAINS(text, path + ": no example has the field 'emotional_state' that --keep-fields names, so its column "
                                "is empty (fields of the first example: cognitive_action, domain, text)");
    // Fields that some example has, however few, are not warned about.
    CHECK(text.find("'domain'") == std::string::npos);
    CHECK(text.find("'domian'") == std::string::npos);
  }
  // A field only on a line that was skipped as invalid is still absent from every example.
  write_text(path,
             "{\"text\": \"a\", \"cognitive_action\": \"noticing\"}\n"
             "{\"text\": \"\", \"cognitive_action\": \"noticing\", \"emotional_state\": \"calm\"}\n");
  options.keep_fields = {"emotional_state"};
  {
    LoggedLines log;
    data::read_dataset(path, options);
    CHECK_CONTAINS(log.text(), "no example has the field 'emotional_state'");
  }
  options.strict_fields = true;
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options),
                       doctest::Contains((path + ": no example has the field 'emotional_state' that --keep-fields names "
                                                 "(fields of the first example: cognitive_action, text); check the name")
                                             .c_str()),
                       std::invalid_argument);
  // Strict, with every kept field present somewhere: no error, no warning.
  options.keep_fields = {};
  LoggedLines log;
  CHECK(data::read_dataset(path, options).examples.size() == 1);
  CHECK(log.text().find("--keep-fields") == std::string::npos);
}

TEST_CASE("a cognitive-action dataset with a label outside the reference's 45: a warning naming it and its line") {
  // Regression: one misspelt label moved every label's index (the file's labels sorted instead of the reference's
  // list of 45) without a word.
  TempDir tmp;
  const std::string path = tmp.file("typo.jsonl");
  write_text(path,
             "{\"text\": \"a\", \"cognitive_action\": \"noticing\"}\n"
             "{\"text\": \"b\", \"cognitive_action\": \"analysing\"}\n"
             "{\"text\": \"c\", \"cognitive_action\": \"analysing\"}\n");
  data::DatasetOptions options;
  {
    LoggedLines log;
    const data::Dataset d = data::read_dataset(path, options);
    CHECK(d.label_names == std::vector<std::string>{"analysing", "noticing"});
    CHECK_CONTAINS(log.text(), path + ": 'analysing' (line 2) is not among the reference's 45 cognitive actions, while "
                                      "the file's other labels are");
  }
  options.strict_fields = true;
  CHECK_THROWS_WITH_AS(data::read_dataset(path, options), doctest::Contains("'analysing' (line 2) is not among"),
                       std::invalid_argument);
  // Another taxonomy under the same field, and the reference's own labels, are read without a word.
  for (const char* other : {"{\"text\": \"a\", \"cognitive_action\": \"x\"}\n{\"text\": \"b\", \"cognitive_action\": \"y\"}\n",
                            "{\"text\": \"a\", \"cognitive_action\": \"noticing\"}\n"}) {
    write_text(path, other);
    LoggedLines log;
    CHECK_NOTHROW(data::read_dataset(path, options));
    CHECK(log.text().find("cognitive actions") == std::string::npos);
  }
}

// The weights' read-ahead skips what a warm start has in the page cache (model::Prefetcher).
TEST_CASE("in_page_cache: bytes written or read are in the page cache, dropped ones are not, a range only whole") {
  TempDir dir;
  const std::string path = dir.file("weights.bin");
  constexpr uint64_t kBytes = 1 << 20;
  write_text(path, std::string(kBytes, 'w'));
  const int fd = open_input_file(path);
  CHECK(in_page_cache(fd, 0, kBytes));
  CHECK(in_page_cache(fd, 3 * 4096 + 5, 7 * 4096));
  CHECK(in_page_cache(fd, 100, 100));
  REQUIRE(::fsync(fd) == 0);
  REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  CHECK_FALSE(in_page_cache(fd, 0, kBytes));
  char head[8192];
  REQUIRE(::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head));
  CHECK(in_page_cache(fd, 0, sizeof head));
  CHECK_FALSE(in_page_cache(fd, 0, kBytes));
  ::close(fd);
}
