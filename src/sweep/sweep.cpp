#include "sweep/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include "cli/cli.h"
#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "device/device_select.h"
#include "readout/readout.h"
#include "steering/steering.h"
#include "sweep/fluency.h"
#include "sweep/sweep_progress.h"
#include "sweep/sweep_report.h"

namespace probekit::sweep {

namespace {

// One generation of the sweep: a label steered at a coefficient from a prompt; the unsteered baseline has no label.
struct Cell {
  std::string label;
  double coefficient = 0;
  size_t prompt = 0;
};

std::vector<std::string> read_prompts(const std::string& path) {
  require_input_file(path);  // a directory is said to be one (regression: "no prompts")
  std::ifstream in(path);
  if (!in) fail("{}: cannot open the prompts file", path);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A line of white space only is no prompt, as a blank line is none.
    if (line.find_first_not_of(" \t\f\v") != std::string::npos) prompts.push_back(line);
  }
  if (prompts.empty()) fail_input("{}: no prompts (one per line)", path);
  return prompts;
}

std::vector<std::string> sweep_labels(const SweepOptions& o, const inference::Engine& engine) {
  if (!o.labels) return engine.labels();
  const std::string& given = *o.labels;
  std::vector<std::string> labels;
  for (size_t start = 0; start <= given.size();) {
    const size_t comma = std::min(given.find(',', start), given.size());
    const std::string label = given.substr(start, comma - start);
    if (std::find(engine.labels().begin(), engine.labels().end(), label) == engine.labels().end()) {
      fail_usage("--labels: {} has no probe for '{}' at layer {}", o.engine.probes_dir, label, engine.layers().front());
    }
    // Regression: a label named twice was swept twice, its report's sections doubled.
    if (std::find(labels.begin(), labels.end(), label) != labels.end()) fail_usage("--labels names '{}' twice", label);
    labels.push_back(label);
    start = comma + 1;
  }
  return labels;
}

// The baseline of every prompt first, then each label's nonzero coefficients over every prompt.
std::vector<Cell> plan_cells(const std::vector<std::string>& labels, const std::vector<double>& coefficients,
                             size_t prompts) {
  std::vector<Cell> cells;
  for (size_t p = 0; p < prompts; ++p) cells.push_back({"", 0.0, p});
  for (const std::string& label : labels) {
    for (double coefficient : coefficients) {
      if (coefficient == 0) continue;  // the baseline is every label's coefficient 0
      for (size_t p = 0; p < prompts; ++p) cells.push_back({label, coefficient, p});
    }
  }
  return cells;
}

// Each label's direction at the layer (coefficient 1), resolved once.
std::map<std::string, steering::SteeringVectors> label_directions(const std::vector<std::string>& labels,
                                                                  const inference::Engine& engine,
                                                                  const std::string& probes_dir) {
  std::map<std::string, steering::SteeringVectors> directions;
  for (const std::string& label : labels) {
    steering::SteeringSpec spec;
    spec.probes_dir = probes_dir;
    spec.ops.push_back(steering::SteeringOp::probe(steering::SteeringAction::kAdd, label,
                                                   std::to_string(engine.layers().front())));
    directions[label] = steering::resolve(spec, engine.model().config());
  }
  return directions;
}


steering::SteeringVectors steering_of(const Cell& cell, const std::map<std::string, steering::SteeringVectors>& directions) {
  if (cell.label.empty()) return {};
  steering::SteeringVectors vectors = directions.at(cell.label);
  vectors.additions.front().coefficient = cell.coefficient;
  return vectors;
}

// What a sweep is made of once its model and probes are loaded.
struct SweepPlan {
  std::vector<std::string> labels, prompts;
  std::vector<Cell> cells;
  std::map<std::string, steering::SteeringVectors> directions;
  generation::GenerationOptions generation;
  Json settings;  // how its generations are made: sweep.json's record, which a resumed run must share
};

// The cells `batch` (indices into plan.cells) as one batched generation, each row steered its own way; then their
// fluency.
void run_batch(const inference::Engine& engine, const SweepPlan& plan, const std::vector<size_t>& batch,
               std::vector<CellResult>& results) {
  std::vector<steering::SteeringVectors> rows;
  std::vector<std::string> texts;
  for (size_t i : batch) {
    rows.push_back(steering_of(plan.cells[i], plan.directions));
    texts.push_back(plan.prompts[plan.cells[i].prompt]);
  }
  std::vector<const steering::SteeringVectors*> row_steering;
  for (const steering::SteeringVectors& row : rows) row_steering.push_back(row.empty() ? nullptr : &row);
  const model::StreamWrites writes = steering::place_rows(row_steering, engine.model());
  generation::GenerationOptions options = plan.generation;
  options.writes = &writes;
  // A cell samples as its prompt does alone (multi_probe_inference --generate, the prompt's index in --file), whatever
  // --rows-per-batch: its baseline draws the same numbers, and more labels or coefficients change none of them
  // (regression: keyed by the cell's place in the sweep); so does a cell a resumed run generates.
  for (size_t i : batch) options.row_keys.push_back(plan.cells[i].prompt);
  const std::vector<inference::GeneratedText> generated =
      engine.generate(texts, options, [&](const inference::ScoredToken& token) {
        results[batch[token.row]].scores.push_back(token.probability.front());
        return true;
      });
  std::vector<readout::Sequence> prompt_ids, ids;
  for (size_t r = 0; r < batch.size(); ++r) {
    CellResult& result = results[batch[r]];
    result.prompt_ids = generated[r].prompt_ids;
    result.ids = generated[r].ids;
    result.text = generated[r].text;
    result.stop = generation::stop_reason_name(generated[r].stop);
    prompt_ids.push_back(result.prompt_ids);
    ids.push_back(result.ids);
  }
  std::vector<Fluency> fluency = measure_fluency(engine.model(), prompt_ids, ids, row_steering, 8);
  for (size_t r = 0; r < batch.size(); ++r) results[batch[r]].fluency = std::move(fluency[r]);
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

// Label k's score over a cell's generated tokens, averaged.
double mean_score(const CellResult& result, size_t k) {
  std::vector<double> scores;
  for (const std::vector<double>& token : result.scores) scores.push_back(token[k]);
  return mean_of(scores);
}

Json cell_json(const Cell& cell, const CellResult& result, const std::vector<std::string>& labels) {
  Json mean_scores = Json::object(), target = Json::array();
  for (size_t k = 0; k < labels.size(); ++k) mean_scores[labels[k]] = mean_score(result, k);
  const auto column = std::find(labels.begin(), labels.end(), cell.label) - labels.begin();
  if (!cell.label.empty()) {
    for (const auto& token : result.scores) target.push_back(token[static_cast<size_t>(column)]);
  }
  return {{"label", cell.label.empty() ? Json() : Json(cell.label)}, {"coefficient", cell.coefficient},
          {"prompt", cell.prompt}, {"prompt_ids", result.prompt_ids}, {"generated_ids", result.ids},
          {"text", result.text}, {"stop", result.stop}, {"target_scores", target}, {"mean_scores", mean_scores},
          {"kl", result.fluency.kl}, {"kl_mean", result.fluency.kl_mean}, {"perplexity", result.fluency.perplexity}};
}


// Index of the cell (label, coefficient, prompt); coefficient 0 is the prompt's baseline.
size_t cell_index(const std::vector<Cell>& cells, const std::string& label, double coefficient, size_t prompt) {
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& c = cells[i];
    if (c.prompt == prompt && (coefficient == 0 ? c.label.empty() : c.label == label && c.coefficient == coefficient)) return i;
  }
  fail_input("the sweep has no cell {}@{} for prompt {}", label, coefficient, prompt);
}

// One point of a label's dose-response curve: its score and every other probe's over the prompts, against the
// baseline; `labels` are the probes' labels, in the order of the cells' scores.
Json summary_point(const std::string& label, double coefficient, const std::vector<Cell>& cells,
                   const std::vector<CellResult>& results, const std::vector<std::string>& labels, size_t prompts) {
  const size_t target = static_cast<size_t>(std::find(labels.begin(), labels.end(), label) - labels.begin());
  std::vector<double> score, kl, perplexity, shift(labels.size(), 0.0), level(labels.size(), 0.0);
  for (size_t p = 0; p < prompts; ++p) {
    const CellResult& steered = results[cell_index(cells, label, coefficient, p)];
    const CellResult& baseline = results[cell_index(cells, label, 0, p)];
    score.push_back(mean_score(steered, target));
    kl.push_back(steered.fluency.kl_mean);
    perplexity.push_back(steered.fluency.perplexity);
    for (size_t k = 0; k < labels.size(); ++k) {
      level[k] += mean_score(steered, k) / static_cast<double>(prompts);
      shift[k] += (mean_score(steered, k) - mean_score(baseline, k)) / static_cast<double>(prompts);
    }
  }
  // Over the other labels (null where there are none): each starts from the first of them, not from 0.
  const double inf = std::numeric_limits<double>::infinity();
  double low = inf, high = -inf, off_abs = 0, off_low = inf, off_high = -inf;
  for (size_t k = 0; k < labels.size(); ++k) {
    if (k == target) continue;
    low = std::min(low, shift[k]), high = std::max(high, shift[k]), off_abs += std::abs(shift[k]);
    off_low = std::min(off_low, level[k]), off_high = std::max(off_high, level[k]);
  }
  const bool others_exist = labels.size() > 1;
  auto over_others = [others_exist](double value) { return others_exist ? Json(value) : Json(); };
  const double others = static_cast<double>(labels.size()) - 1;
  return {{"label", label}, {"coefficient", coefficient}, {"score_mean", mean_of(score)}, {"score_shift", shift[target]},
          {"off_target_shift_min", over_others(low)}, {"off_target_shift_max", over_others(high)},
          {"off_target_mean_abs_shift", over_others(off_abs / others)}, {"off_target_score_min", over_others(off_low)},
          {"off_target_score_max", over_others(off_high)}, {"kl_mean", mean_of(kl)},
          {"perplexity_mean", mean_of(perplexity)}};
}

void check_options(const SweepOptions& o) {
  if (o.engine.layer < 0) fail_usage("--layer: the layer whose probes give the directions (and score the generations)");
  if (o.coefficients.empty()) fail_usage("--coefficients: give at least one, e.g. -8,-4,0,4,8");
  for (size_t i = 0; i < o.coefficients.size(); ++i) {
    steering::check_coefficient(o.coefficients[i], "--coefficients");
    // -0 is 0: each coefficient once (regression: repeats generated and reported twice).
    if (std::find(o.coefficients.begin(), o.coefficients.begin() + static_cast<std::ptrdiff_t>(i), o.coefficients[i]) !=
        o.coefficients.begin() + static_cast<std::ptrdiff_t>(i)) {
      fail_usage("--coefficients names {:g} twice", o.coefficients[i] == 0 ? 0.0 : o.coefficients[i]);
    }
  }
  if (o.labels && o.labels->find_first_not_of(", ") == std::string::npos) {
    fail_usage("--labels is empty: name at least one label, or leave the flag out to steer every label");
  }
  if (o.rows_per_batch < 1) fail_usage("--rows-per-batch must be positive, got {}", o.rows_per_batch);
}

// What the probes of the sweep's layer score with, hashed (their kind, labels, parameters and the model their
// recipe names): probes trained again into the same directory change it, and a kept generation's scores with it.
std::string probes_sha256(const inference::Engine& engine) {
  Sha256 hash;
  for (const inference::LayerProbes& layer : engine.layer_probes()) {
    const probes::ProbeSet& set = layer.set;
    hash.update(fmt::format("{}\n{}\n{}\n{}\n", layer.layer, set.shape().kind->name(), fmt::join(set.labels(), "\n"),
                            set.recipe().model_fingerprint));
    const at::Tensor values = set.bank().values().to(at::kCPU, at::kDouble).contiguous();
    hash.update({reinterpret_cast<const char*>(values.data_ptr<double>()), static_cast<size_t>(values.numel()) * sizeof(double)});
  }
  return hash.hex_digest();
}

SweepPlan plan_sweep(const SweepOptions& o, const inference::Engine& engine) {
  SweepPlan plan;
  plan.labels = sweep_labels(o, engine);
  plan.prompts = read_prompts(o.prompts_file);
  plan.cells = plan_cells(plan.labels, o.coefficients, plan.prompts.size());
  plan.directions = label_directions(plan.labels, engine, o.engine.probes_dir);
  plan.generation = generation::resolve_generation_flags(o.generation, engine.model_dir());
  const generation::Sampling& sampling = plan.generation.sampling;
  // How the generations were made, so that a sweep is reproduced from its file (regression: none of this was kept).
  const Json made_with = {{"device", engine.target().device.str()},
                          {"dtype", device::dtype_name(engine.target().dtype_choice.dtype)},
                          {"temperature", sampling.temperature}, {"top_k", sampling.top_k}, {"top_p", sampling.top_p},
                          {"seed", sampling.seed}, {"no_stop", o.generation.no_stop}};
  // The model and probes by what they hold, not by the paths that named them ("probes" and "./probes" are one).
  plan.settings = {{"model_fingerprint", engine.model_fingerprint()}, {"layer", o.engine.layer}, {"site", site_name(Site::kResidPost)},
                   {"labels", plan.labels}, {"probe_labels", engine.labels()},
                   {"probes_sha256", probes_sha256(engine)},
                   {"coefficients", o.coefficients}, {"prompts", plan.prompts},
                   {"max_new_tokens", plan.generation.max_new_tokens}, {"generation", made_with}};
  return plan;
}

// Generates every cell the progress file does not hold, appending each batch to it as it finishes; returns how many
// it generated.
size_t generate_cells(const SweepOptions& o, const inference::Engine& engine, const SweepPlan& plan,
                      SweepProgress& progress, std::vector<CellResult>& results) {
  std::vector<size_t> pending;
  for (size_t i = 0; i < plan.cells.size(); ++i) {
    const auto kept = progress.kept().find(i);
    if (kept == progress.kept().end()) pending.push_back(i);
    else results[i] = kept->second;
  }
  // Every-token probes score each generated token's whole text again, steered as its own row: one generation at a time
  // (regression: the batch's per-row vectors went to that one-row pass).
  const auto batch = engine.reads_every_token() ? size_t{1} : static_cast<size_t>(o.rows_per_batch);
  if (batch < static_cast<size_t>(o.rows_per_batch)) {
    spdlog::info("the probes read every token: generations are decoded one at a time, not --rows-per-batch {}", o.rows_per_batch);
  }
  ProgressBar bar("sweep", static_cast<int64_t>(plan.cells.size()), "generations");
  const size_t resumed = plan.cells.size() - pending.size();
  size_t generated = 0;
  bar.update(static_cast<int64_t>(resumed));
  for (size_t first = 0; first < pending.size(); first += batch) {
    const std::vector<size_t> rows(pending.begin() + static_cast<std::ptrdiff_t>(first),
                                   pending.begin() + static_cast<std::ptrdiff_t>(std::min(pending.size(), first + batch)));
    run_batch(engine, plan, rows, results);
    std::vector<std::pair<size_t, const CellResult*>> finished;
    for (size_t i : rows) finished.emplace_back(i, &results[i]);
    progress.append(finished);
    generated += rows.size();
    bar.update(static_cast<int64_t>(resumed + generated));
  }
  bar.finish();
  return generated;
}

// sweep.json: how it was made, then every number.
Json sweep_record(const SweepOptions& o, const inference::Engine& engine, const SweepPlan& plan,
                  const std::vector<CellResult>& results, size_t generated, double seconds) {
  Json summary = Json::array(), all = Json::array();
  for (const std::string& label : plan.labels) {
    for (double c : o.coefficients) {
      summary.push_back(summary_point(label, c, plan.cells, results, engine.labels(), plan.prompts.size()));
    }
  }
  for (size_t i = 0; i < plan.cells.size(); ++i) all.push_back(cell_json(plan.cells[i], results[i], engine.labels()));
  const auto swept = static_cast<double>(plan.labels.size() * o.coefficients.size() * plan.prompts.size());
  // A resumed run's rate is of the cells its own generations make up.
  const double cells_per_s = generated == 0 ? 0.0 : swept * static_cast<double>(generated) /
                                                        static_cast<double>(plan.cells.size()) / seconds;
  Json sweep = plan.settings;
  sweep.update({{"model", engine.model_dir()}, {"probes", o.engine.probes_dir}, {"seconds", seconds},
                {"resumed_generations", plan.cells.size() - generated}, {"cells_per_s", cells_per_s},
                {"summary", summary}, {"cells", all}});
  return sweep;
}

}  // namespace

void add_sweep_flags(CLI::App& app, SweepOptions& o) {
  inference::EngineOptions& e = o.engine;
  app.add_option("--probes-dir", e.probes_dir, "Probes directory (probes.json, or layer_{L}/ folders)")->required();
  add_model_options(app, e.model_dir, "The checkpoint the probes were trained on (default: the one recorded with them)");
  // Comma- or space-separated, as the trainers take --labels.
  const auto take_labels = [&o](const std::vector<std::string>& labels) {
    o.labels = fmt::format("{}", fmt::join(labels, ","));
  };
  app.add_option_function<std::vector<std::string>>(
         "--labels", take_labels, "Labels to steer, comma-separated (default: every label with a probe at --layer)")
      ->expected(1, -1);
  app.add_option("--layer", e.layer, "The layer steered and read: its probes give the directions and the scores")->required();
  app.add_option("--coefficients", o.coefficients, "Coefficients of the unit directions, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--file", o.prompts_file, "Prompts, one per line")->required();
  app.add_option("--output-dir", o.output_dir, "Where sweep.json and sweep.html go")->required();
  app.add_option("--rows-per-batch", o.rows_per_batch, "Generations decoded together (label x coefficient x prompt)")
      ->capture_default_str();
  add_overwrite_flag(app, o.overwrite);
  app.add_flag("--resume", o.resume,
               "Go on from the generations an interrupted sweep into --output-dir kept (its .progress.jsonl beside it)");
  add_device_options(app, e.device, e.dtype);
  generation::add_generation_flags(app, o.generation);
}

Json run_sweep(SweepOptions o) {
  check_options(o);
  std::vector<std::string> inputs = {o.engine.probes_dir, o.engine.model_dir, o.prompts_file};
  for (const sae::SaeSpec& sae : o.engine.saes) inputs.push_back(sae.path);
  for (const steering::SteeringOp& op : o.engine.steering.ops) inputs.push_back(op.path);  // --steer-vector files
  StagedDirectory out(o.output_dir, o.overwrite, inputs);
  SweepProgress progress(o.output_dir, o.resume, o.overwrite);  // refused (or locked) before the model loads
  o.engine.generate = true;
  o.engine.texts_only = true;  // the sweep's prompts are texts
  o.engine.batch_size = o.rows_per_batch;
  const inference::Engine engine = inference::Engine::load(o.engine);
  const SweepPlan plan = plan_sweep(o, engine);
  progress.start(plan.settings, plan.cells.size(), engine.labels().size());
  std::vector<CellResult> results(plan.cells.size());
  Json sweep;
  try {
    const auto start = std::chrono::steady_clock::now();
    const size_t generated = generate_cells(o, engine, plan, progress, results);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    sweep = sweep_record(o, engine, plan, results, generated, seconds);
    write_file_atomic(out.path() + "/sweep.json", dump_json(sweep, 1) + "\n");
    write_file_atomic(out.path() + "/sweep.html", render_sweep_report(sweep));
    out.commit();
  } catch (const std::exception&) {
    if (progress.cells_in_file() > 0) {
      spdlog::warn("{} of the sweep's {} generations are kept in {}: the same command with --resume goes on from them",
                   progress.cells_in_file(), plan.cells.size(), progress.path());
    }
    throw;
  }
  progress.remove();
  const auto swept = static_cast<double>(plan.labels.size() * o.coefficients.size() * plan.prompts.size());
  return {{"output_dir", o.output_dir}, {"cells", swept}, {"generations", plan.cells.size()},
          {"resumed_generations", sweep["resumed_generations"]}, {"seconds", sweep["seconds"]},
          {"cells_per_s", sweep["cells_per_s"]}, {"summary", sweep["summary"]}};
}

}  // namespace probekit::sweep
