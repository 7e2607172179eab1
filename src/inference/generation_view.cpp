#include "inference/generation_view.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

#include <sys/ioctl.h>
#include <unistd.h>

#include "common/terminal_text.h"
#include "generation/generator.h"
#include "inference/reports.h"

namespace probekit::inference {

namespace {

// `text` cut into lines of at most `width` columns, at its own line breaks too; control characters (an
// escape sequence in generated text would take the terminal over) become spaces.
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines(1);
  size_t used = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool starts = (c & 0xC0) != 0x80;
    const size_t cells = code_point_columns(text, i);
    if (c == '\n' || (starts && used > 0 && used + cells > width)) {
      lines.emplace_back();
      used = 0;
      if (c == '\n') continue;
    }
    const auto byte = static_cast<unsigned char>(c);
    lines.back() += byte < 0x20 || byte == 0x7F ? ' ' : c;
    used += cells;
  }
  return lines;
}

// A bar of `width` cells for a fraction in [0, 1], in eighths of a cell.
std::string bar(double fraction, size_t width) {
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const auto eighths = static_cast<size_t>(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(width * 8) + 0.5);
  std::string out;
  for (size_t i = 0; i < eighths / 8; ++i) out += "█";
  out += kEighths[eighths % 8];
  size_t drawn = eighths / 8 + (eighths % 8 > 0 ? 1 : 0);
  return out + std::string(width - std::min(width, drawn), ' ');
}

// The terminal's width in columns, less one (a line filling the last column wraps early on some terminals); 100
// when stdout is not a terminal that says.
size_t terminal_columns() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return 100;
  return static_cast<size_t>(size.ws_col) - 1;
}

std::string layer_suffix(const ScoreTable& table, const Prediction& p) {
  return table.layers.size() > 1 ? fmt::format("@L{}", p.layer) : "";
}

// "⚑ label@L20 0.912 > 0.500: stop" for each firing.
std::string firings_text(const std::vector<monitor::Firing>& firings) {
  std::string out;
  for (const monitor::Firing& f : firings) {
    out += fmt::format("  ⚑ {}@L{} {:.3f} > {:.3f}: {}{}", terminal_text(f.label), f.layer, f.score, f.threshold, f.action,
                       f.scope == monitor::Scope::kPrompt ? fmt::format(" (prompt token {})", f.index) : "");
  }
  return out;
}

}  // namespace

std::string generated_token_line(const ScoredToken& token, const ScoreTable& table, int64_t top_k, bool with_row) {
  std::vector<std::string> firing;
  for (const Prediction& p : all_predictions(table)) {
    if (!p.active || static_cast<int64_t>(firing.size()) >= top_k) continue;
    firing.push_back(fmt::format("✓{}{} {:.3f}", terminal_text(p.label), layer_suffix(table, p), p.confidence));
  }
  std::string row = with_row ? fmt::format("[{}] ", token.row) : "";
  std::string quoted = dump_json(token.text);
  return fmt::format("{}{:>4}  {}{}  {}{}{}", row, token.index, quoted, std::string(18 - std::min<size_t>(18, display_columns(quoted)), ' '),
                     firing.empty() ? std::string("-") : fmt::format("{}", fmt::join(firing, ", ")),
                     latents_text(token.latents), firings_text(token.firings));
}

Json generated_row_json(size_t row, const std::string& prompt, const GeneratedText& text, const Json& steering) {
  Json done = {{"row", row},
               {"done", true},
               {"stop", generation::stop_reason_name(text.stop)},
               {"prompt", prompt},
               {"prompt_ids", text.prompt_ids},
               {"generated_ids", text.ids},
               {"text", text.text}};
  if (!steering.is_null()) done["steering"] = steering;
  if (!text.firings.empty()) done["monitor_firings"] = monitor::firings_json(text.firings);
  return done;
}

Json generated_token_json(const ScoredToken& token, const ScoreTable& table, int64_t top_k) {
  const std::vector<Prediction> ranked = top_predictions(table, top_k);
  Json out = {{"row", token.row},   {"index", token.index}, {"position", token.position},
              {"id", token.id},     {"token", token.token}, {"text", token.text},
              {"last", token.last}, {"predictions", predictions_json(ranked)}};
  if (!token.firings.empty()) out["monitor_firings"] = monitor::firings_json(token.firings);
  if (!token.latents.empty()) out["latents"] = token_latents_json(token.latents);
  return out;
}

Json token_latents_json(const TokenLatents& latents) {
  Json out = Json::object();
  for (const auto& [name, top] : latents) out[name] = sae::latents_json(top);
  return out;
}

std::string live_frame(const std::vector<LiveRow>& rows, int64_t top_k, size_t width, size_t text_lines) {
  width = std::max<size_t>(width, 8);
  // A line longer than the terminal would wrap there, and the redraw would move up fewer lines than it drew.
  auto fitted = [width](const std::string& line) { return wrap(line, width).front() + "\n"; };
  const size_t bar_cells = std::clamp<size_t>(width > 40 ? width - 40 : 1, 1, 30);
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const LiveRow& row = rows[r];
    out += fitted(fmt::format("{}{}", rows.size() > 1 ? fmt::format("[{}] ", r) : "", dump_json(row.prompt)));
    std::vector<std::string> lines = wrap(row.text, width - 2);
    for (size_t i = lines.size() > text_lines ? lines.size() - text_lines : 0; i < lines.size(); ++i) {
      out += fmt::format("  {}\n", lines[i]);
    }
    std::string state = row.stop.empty() ? "" : fmt::format(", stopped: {}", row.stop);
    out += fitted(fmt::format("  -- {} tokens{}; latest {}", row.tokens, state, dump_json(row.token)));
    if (row.latest.labels.empty()) continue;
    std::vector<Prediction> ranked = all_predictions(row.latest);
    for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < top_k; ++i) {
      const Prediction& p = ranked[i];
      std::string name = terminal_text(p.label) + layer_suffix(row.latest, p);
      out += fitted(fmt::format("  {:<28} {} {:.3f}{}", name.substr(0, 28), bar(p.confidence, bar_cells), p.confidence,
                                p.active ? " ✓" : ""));
    }
  }
  return out;
}

GenerationPrinter::GenerationPrinter(std::vector<std::string> prompts, int64_t top_k, bool json, bool live, Json steering)
    : top_k_(top_k), json_(json), live_(live && !json), steering_(std::move(steering)) {
  for (std::string& prompt : prompts) rows_.push_back(LiveRow{std::move(prompt), {}, {}, 0, {}, {}});
}

void GenerationPrinter::show(const ScoredToken& token, const ScoreTable& table) {
  LiveRow& row = rows_[token.row];
  row.text += token.text;
  row.token = token.token;
  row.tokens = token.index + 1;
  row.latest = table;
  if (json_) {
    fmt::print("{}\n", dump_json(generated_token_json(token, table, top_k_)));
  } else if (live_) {
    redraw();
  } else {
    fmt::print("{}\n", generated_token_line(token, table, top_k_, rows_.size() > 1));
  }
  std::fflush(stdout);
}

void GenerationPrinter::redraw() {
  // Back to the first line of the frame on screen, cleared to the end of the screen, then the new frame.
  std::string frame = live_frame(rows_, top_k_, terminal_columns(), 6);
  std::string back = frame_lines_ > 0 ? fmt::format("\x1b[{}F\x1b[J", frame_lines_) : "";
  fmt::print("{}{}", back, frame);
  frame_lines_ = static_cast<size_t>(std::count(frame.begin(), frame.end(), '\n'));
}

void GenerationPrinter::finish(const std::vector<GeneratedText>& texts) {
  for (size_t r = 0; r < texts.size(); ++r) rows_[r].stop = generation::stop_reason_name(texts[r].stop);
  if (live_) redraw();
  for (size_t r = 0; r < texts.size(); ++r) {
    const GeneratedText& t = texts[r];
    if (json_) {
      fmt::print("{}\n", dump_json(generated_row_json(r, rows_[r].prompt, t, steering_)));
    } else if (!live_) {
      fmt::print("\n{}Generated {} tokens (stop: {}):\n{}{}\n", texts.size() > 1 ? fmt::format("[{}] ", r) : "",
                 t.ids.size(), rows_[r].stop, terminal_text(rows_[r].prompt, true), terminal_text(t.text, true));
      if (!t.firings.empty()) fmt::print("monitors fired:{}\n", firings_text(t.firings));
    }
  }
  std::fflush(stdout);
}

}  // namespace probekit::inference
