// The training flags' table: which tool takes which flag, the defaults each tool shows, what the flags write,
// and the one validation of the values both trainers share.
#include <CLI/CLI.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "probes/training_flags.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;

namespace {

// Parses `arguments` as the command line of a tool whose flags were added to `app`.
void parse(CLI::App& app, std::vector<std::string> arguments) {
  std::reverse(arguments.begin(), arguments.end());  // CLI11 takes them last first
  app.parse(arguments);
}

bool has_flag(CLI::App& app, const std::string& name) { return app.get_option_no_throw(name) != nullptr; }

// The message of the UsageError that check_training_options throws for `options`, or "" when it throws none.
std::string usage_error(const TrainingOptions& options) {
  try {
    check_training_options(options);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("training flags: each tool takes its own set, and --help shows the tool's reference defaults") {
  CLI::App binary_app, multiclass_app, bench_app;
  BinaryRunOptions binary, bench;
  MulticlassRunOptions multiclass;
  add_training_flags(binary_app, TrainingTool::kBinary, binary);
  add_training_flags(multiclass_app, TrainingTool::kMulticlass, multiclass);
  add_training_flags(bench_app, TrainingTool::kBench, bench);

  for (const char* flag : {"--model-type", "--hidden-dim", "--batch-size", "--epochs", "--lr", "--weight-decay",
                           "--device", "--dtype", "--seed", "--pin-activations-to-gpu", "--no-pin-activations"}) {
    CHECK_MESSAGE(has_flag(binary_app, flag), flag);
    CHECK_MESSAGE(has_flag(multiclass_app, flag), flag);
  }
  for (const char* flag : {"--early-stopping-patience", "--use-scheduler", "--no-scheduler", "--num-workers",
                           "--pos-weight", "--labels", "--k"}) {
    CHECK_MESSAGE(has_flag(binary_app, flag), flag);
    CHECK_MESSAGE(!has_flag(multiclass_app, flag), flag);
    CHECK_MESSAGE(!has_flag(bench_app, flag), flag);
  }
  for (const char* flag : {"--model-type", "--epochs", "--device", "--dtype", "--C", "--heads", "--max-tokens",
                           "--ema-alpha", "--window-tokens"}) {
    CHECK_MESSAGE(has_flag(bench_app, flag), flag);
    CHECK_MESSAGE(has_flag(binary_app, flag), flag);
  }
  for (const char* flag : {"--lr", "--batch-size", "--seed"}) CHECK_MESSAGE(!has_flag(bench_app, flag), flag);

  std::string binary_help = binary_app.help(), multiclass_help = multiclass_app.help();
  INFO(binary_help << "\n" << multiclass_help);
  for (const char* shown : {"--batch-size INT:[1, 1073741824]=18", "--epochs INT:[1, 1000000]=50", "--lr FLOAT=0.0005", "--weight-decay FLOAT=0.001",
                            "--early-stopping-patience INT=10", "--model-type TEXT:{linear,multihead,logistic,mean-diff,attention,ema,rolling,multimax,sparse-logistic}=linear",
                            "--C FLOAT=1", "--pos-weight TEXT:{none,auto}=none", "--device TEXT=auto", "--k INT=16"}) {
    CHECK_MESSAGE(binary_help.find(shown) != std::string::npos, shown);
  }
  for (const char* shown : {"--batch-size INT:[1, 1073741824]=32", "--epochs INT:[1, 1000000]=20", "--lr FLOAT=0.001", "--weight-decay FLOAT=0.0001"}) {
    CHECK_MESSAGE(multiclass_help.find(shown) != std::string::npos, shown);
  }
}

TEST_CASE("training flags: parsed values land in the tool's options") {
  CLI::App app;
  BinaryRunOptions options;
  add_training_flags(app, TrainingTool::kBinary, options);
  parse(app, {"--model-type", "multihead", "--hidden-dim", "64", "--batch-size", "7", "--epochs", "3", "--lr", "0.01",
              "--weight-decay", "0", "--seed", "5", "--use-scheduler", "--no-scheduler", "--pos-weight", "auto",
              "--labels", "a,b", "--device", "cpu", "--dtype", "bf16", "--num-workers", "2",
              "--early-stopping-patience", "0", "--pin-activations-to-gpu", "--no-pin-activations",
              "--activations", "a.h5", "b", "--output-dir", "out", "--json"});
  const BinaryTrainingOptions& t = options.training;
  CHECK(options.activations == std::vector<std::string>{"a.h5", "b"});
  CHECK(options.output_dir == "out");
  CHECK(options.json);
  CHECK(t.kind == &probe_kind("multihead"));
  CHECK(t.hidden_dim == 64);
  CHECK(t.batch_size == 7);
  CHECK(t.epochs == 3);
  CHECK(t.lr == 0.01);
  CHECK(t.weight_decay == 0.0);
  CHECK(t.seed == 5);
  CHECK(!t.cosine_schedule);  // --no-scheduler wins over --use-scheduler, as in the reference
  CHECK(t.balance_classes);
  CHECK(t.labels == std::vector<std::string>{"a", "b"});
  CHECK(t.patience == 0);
  CHECK(options.device == "cpu");
  CHECK(options.dtype == "bf16");
  CHECK(options.num_workers == 2);
  CHECK(!t.pin_activations);  // --no-pin-activations wins over --pin-activations-to-gpu

  CLI::App defaults_app;
  BinaryRunOptions defaults;
  add_training_flags(defaults_app, TrainingTool::kBinary, defaults);
  parse(defaults_app, {"--activations", "a.h5"});
  CHECK(!defaults.json);
  CHECK(defaults.training.kind == &probe_kind("linear"));
  CHECK(defaults.training.cosine_schedule);
  CHECK(!defaults.training.balance_classes);
  CHECK(defaults.training.pin_activations);

  CLI::App multiclass_app;
  MulticlassRunOptions multiclass_options;
  add_training_flags(multiclass_app, TrainingTool::kMulticlass, multiclass_options);
  parse(multiclass_app, {"--no-pin-activations", "--activations", "c.h5"});
  CHECK(!multiclass_options.training.pin_activations);
  CHECK(multiclass_options.activations == "c.h5");

  CLI::App wrong_app;
  MulticlassRunOptions multiclass;
  CHECK_THROWS_AS(add_training_flags(wrong_app, TrainingTool::kBinary, multiclass), std::invalid_argument);
}

TEST_CASE("training options: one validation names the flag of the first unusable value") {
  MulticlassTrainingOptions good;
  CHECK(usage_error(good).empty());
  CHECK(usage_error(BinaryTrainingOptions()).empty());
  double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::function<void(TrainingOptions&)> change;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](TrainingOptions& o) { o.batch_size = 0; }, "--batch-size must be positive, got 0"},
      {[](TrainingOptions& o) { o.epochs = -1; }, "--epochs must be positive, got -1"},
      {[](TrainingOptions& o) { o.hidden_dim = 0; }, "--hidden-dim must be positive, got 0"},
      // Bounded above (regression: --epochs 4294967296 allocated 16.8 GB of history and ended in bad_alloc, and a
      // multihead probe of --hidden-dim 200000000 in LibTorch's allocation error).
      {[](TrainingOptions& o) { o.epochs = 4294967296; }, "--epochs must be at most 1000000, got 4294967296"},
      {[](TrainingOptions& o) { o.hidden_dim = 200000000; }, "--hidden-dim must be at most 65536, got 200000000"},
      {[](TrainingOptions& o) { o.heads = 100000000; }, "--heads must be at most 4096, got 100000000"},
      {[](TrainingOptions& o) { o.batch_size = int64_t{1} << 40; }, "--batch-size must be at most 1073741824, got 1099511627776"},
      {[](TrainingOptions& o) { o.lr = 0.0; }, "--lr must be finite and positive, got 0"},
      {[&](TrainingOptions& o) { o.lr = inf; }, "--lr must be finite and positive, got inf"},
      {[&](TrainingOptions& o) { o.lr = nan; }, "--lr must be finite and positive, got nan"},
      {[](TrainingOptions& o) { o.weight_decay = -1e-3; }, "--weight-decay must be finite and not negative, got -0.001"},
      {[&](TrainingOptions& o) { o.weight_decay = inf; }, "--weight-decay must be finite and not negative, got inf"},
  };
  for (const Case& c : cases) {
    MulticlassTrainingOptions options;
    c.change(options);
    CHECK(usage_error(options) == c.message);
  }
  // As flags, numbers past 64 bits too, which CLI11 reads wrapped (regression: --batch-size 99999999999999999999
  // trained, and diverged).
  for (const std::vector<std::string>& flag : std::vector<std::vector<std::string>>{
           {"--batch-size", "99999999999999999999"}, {"--epochs", "9223372036854775808"}, {"--heads", "0"},
           {"--hidden-dim", "65537"}}) {
    CAPTURE(flag[0]);
    BinaryRunOptions options;
    CLI::App app;
    add_binary_training_flags(app, options);
    CHECK_THROWS_WITH(parse(app, {flag[0], flag[1], "--activations", "x"}), doctest::Contains("must be from 1 to"));
  }
  // Regression: a long run of digits ending in letters was called out of range, not malformed.
  BinaryRunOptions malformed;
  CLI::App malformed_app;
  add_binary_training_flags(malformed_app, malformed);
  CHECK_THROWS_WITH(parse(malformed_app, {"--epochs", "99999999999999999999abc", "--activations", "x"}),
                    doctest::Contains("must be a whole number, got 99999999999999999999abc"));
  BinaryTrainingOptions patience;
  patience.patience = kNeverStopEarly;
  CHECK_NOTHROW(check_binary_training_options(patience));
  patience.patience = -2;
  CHECK_THROWS_WITH_AS(check_binary_training_options(patience),
                       "--early-stopping-patience must be at least 0, or -1 to never stop early; got -2", UsageError);
}

TEST_CASE("training flags: --model-type takes a list for train_binary_probes only, and --C reaches the options") {
  BinaryRunOptions binary, refused;
  MulticlassRunOptions multiclass;
  CLI::App binary_app, refused_app, multiclass_app;
  add_binary_training_flags(binary_app, binary);
  add_binary_training_flags(refused_app, refused);
  add_multiclass_training_flags(multiclass_app, multiclass);
  parse(binary_app, {"--C", "0.25", "--model-type", "logistic,mean-diff", "--activations", "x"});
  REQUIRE(binary.kinds.size() == 2);
  CHECK(binary.kinds[1]->name() == std::string("mean-diff"));
  CHECK(binary.training.kind->name() == std::string("logistic"));
  CHECK(binary.training.C == 0.25);
  CHECK_THROWS(parse(refused_app, {"--model-type", "logistic,svm", "--activations", "x"}));
  CHECK_THROWS(parse(multiclass_app, {"--model-type", "logistic,linear", "--activations", "x"}));
  // One kind: the list holds it alone.
  BinaryRunOptions one;
  CLI::App one_app;
  add_binary_training_flags(one_app, one);
  parse(one_app, {"--model-type", "mean-diff", "--activations", "x"});
  REQUIRE(one.kinds.size() == 1);
  CHECK(one.training.kind->name() == std::string("mean-diff"));
  // C must be finite and positive.
  TrainingOptions bad = binary.training;
  bad.C = 0.0;
  CHECK(usage_error(bad).find("--C must be finite and positive") != std::string::npos);
}

TEST_CASE("training flags: a kind's own flag is refused where no kind trained reads it, naming those that do") {
  const auto refusal = [](std::vector<std::string> arguments) -> std::string {
    BinaryRunOptions options;
    CLI::App app;
    add_binary_training_flags(app, options);
    arguments.insert(arguments.end(), {"--activations", "x"});
    try {
      parse(app, arguments);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  // Regression: each was ignored without a word.
  CHECK(refusal({"--k", "8"}) == "--k applies to sparse-logistic probes only, and --model-type is linear");
  CHECK(refusal({"--model-type", "linear,logistic", "--heads", "4"}) ==
        "--heads applies to multihead, attention, multimax probes only, and --model-type is linear,logistic");
  CHECK(refusal({"--model-type", "multihead", "--max-tokens", "4"}).find("--max-tokens applies to attention, ema, "
                                                                         "rolling, multimax probes only") == 0);
  CHECK(refusal({"--ema-alpha", "0.5", "--model-type", "rolling"}).find("--ema-alpha applies to ema probes") == 0);
  CHECK(refusal({"--window-tokens", "3"}).find("--window-tokens applies to rolling probes") == 0);
  CHECK(refusal({"--C", "2"}) == "--C applies to logistic, mean-diff, sparse-logistic probes only, and --model-type is linear");
  CHECK(refusal({"--model-type", "multihead", "--hidden-dim", "64", "--heads", "4"}).empty());
  CHECK(refusal({"--model-type", "linear,multimax", "--heads", "4", "--max-tokens", "9"}).empty());
  CHECK(refusal({"--model-type", "sparse-logistic", "--k", "4", "--C", "2"}).empty());
  CHECK(refusal({"--model-type", "ema,rolling", "--ema-alpha", "0.2", "--window-tokens", "3"}).empty());

  MulticlassRunOptions multiclass;
  CLI::App multiclass_app;
  add_multiclass_training_flags(multiclass_app, multiclass);
  CHECK_THROWS_WITH_AS(parse(multiclass_app, {"--hidden-dim", "64", "--activations", "x"}),
                       "--hidden-dim applies to multihead probes only, and --model-type is linear", UsageError);
  // train_probes names only the kinds it trains, and takes no flag of the every-token kinds it refuses.
  MulticlassRunOptions fitted;
  CLI::App fitted_app;
  add_multiclass_training_flags(fitted_app, fitted);
  CHECK_THROWS_WITH_AS(parse(fitted_app, {"--C", "2", "--activations", "x"}),
                       "--C applies to logistic probes only, and --model-type is linear", UsageError);
  CHECK(!has_flag(fitted_app, "--max-tokens"));
  // The benchmark's single --model-type (regression: read as train_binary_probes' list, left at linear).
  for (const std::vector<std::string>& arguments : std::vector<std::vector<std::string>>{
           {"--model-type", "logistic", "--C", "2"}, {"--model-type", "attention", "--max-tokens", "8"},
           {"--model-type", "ema", "--ema-alpha", "0.2"}}) {
    BinaryRunOptions bench;
    CLI::App bench_app;
    add_training_flags(bench_app, TrainingTool::kBench, bench);
    CHECK_NOTHROW(parse(bench_app, arguments));
  }
  BinaryRunOptions bench;
  CLI::App bench_app;
  add_training_flags(bench_app, TrainingTool::kBench, bench);
  CHECK_THROWS_WITH_AS(parse(bench_app, {"--model-type", "logistic", "--heads", "2"}),
                       "--heads applies to multihead, attention, multimax probes only, and --model-type is logistic",
                       UsageError);
}

TEST_CASE("training options: probes too large for the device's memory together are refused naming the flags that size them") {
  // Regression: --hidden-dim and --heads were bounded one by one, and 45 multihead probes of --hidden-dim 65536 over
  // an 8,192-wide model (19.8 TB with their optimizer state) failed in LibTorch's allocation, naming no flag.
  BinaryTrainingOptions options;
  options.kind = &probe_kind("multihead");
  options.hidden_dim = 65536;
  options.heads = 8;
  const ProbeShape shape = probe_shape(options, 8192, 1);
  CHECK_THROWS_WITH_AS(check_bank_memory(shape, 45, at::kCPU, at::kFloat),
                       doctest::Contains("45 multihead probes of 8192 inputs (2.2e+10 parameters each): their "
                                         "parameters, gradients and optimizer state need 19810.9 GB on cpu, more than its"),
                       UsageError);
  CHECK_THROWS_WITH(check_bank_memory(shape, 45, at::kCPU, at::kFloat),
                    doctest::Contains("make them smaller (--hidden-dim, --heads) or train fewer labels at once (--labels)"));
  // train_probes trains one multiclass probe, and takes no --labels.
  const std::string one = [&] {
    try {
      check_bank_memory(shape, 1, at::kCPU, at::kFloat);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  CHECK_CONTAINS(one, "1 multihead probe of 8192 inputs");
  CHECK_CONTAINS(one, "; make it smaller (--hidden-dim, --heads)");
  CHECK(one.find("--labels") == std::string::npos);
  options.kind = &probe_kind("attention");
  options.heads = 4096;
  CHECK_THROWS_WITH(check_bank_memory(probe_shape(options, 1 << 20, 1), 45, at::kCPU, at::kFloat),
                    doctest::Contains("make them smaller (--heads) or"));
  options.kind = &probe_kind("linear");
  CHECK_NOTHROW(check_bank_memory(probe_shape(options, 8192, 1), 45, at::kCPU, at::kFloat));
}
