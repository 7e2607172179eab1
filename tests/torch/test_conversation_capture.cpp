// Capturing conversations: rows with "messages" rendered with the model's chat template, tokenized without added
// special tokens, and read at the tokens of --mask only: position all stores those tokens' rows with their ids and
// positions, last/mean/max pool over them, each equal to the model's hidden states at those positions. What does
// not make sense is refused, naming the line or the flag.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "chat/conversation.h"
#include "chat/token_masks.h"
#include "capture_runs.h"
#include "conversation_fixture.h"
#include "common/files.h"
#include "common/json.h"
#include "inference/engine.h"
#include "inference/session.h"
#include "generation/flags.h"
#include "monitor/policy.h"
#include "probes/binary_run.h"
#include "probes/probe_kind.h"
#include "probes/probe_files.h"
#include "readout/readout.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;
using activations::Split;

namespace {

// The rendered ids of the dataset's line `line`, and the hidden states of layer 2 at each of them [T, hidden].
struct Rendered {
  std::vector<int32_t> ids;
  at::Tensor layer;
};

Rendered rendered_line(const std::string& dataset, int64_t line, const model::TransformerModel& model,
                       const tokenizer::Tokenizer& tok) {
  const data::Dataset d = data::read_dataset(dataset, {"text", "label"});
  const chat::OrderedJson messages = chat::OrderedJson::parse(d.examples[static_cast<size_t>(line)].messages);
  Rendered r;
  r.ids = tok.encode(chat::render_conversation(kGemmaModel, messages, false), false);
  r.layer = readout::read_hidden_states(model, r.ids).layers[2];
  return r;
}

std::string capture_error(const capture::CaptureOptions& o) {
  try {
    capture::run_capture(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "captured";
}

}  // namespace

TEST_CASE("conversations at position all: the assistant's tokens' rows, ids and positions, as the model reads them") {
  TempDir tmp;
  capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "all");
  capture::run_capture(o);
  const activations::ActivationFile file = activations::read_activation_file(tmp.file("all/layer_2_activations.h5"));
  CHECK(file.attributes.recipe.mask == TokenMask::kAssistant);
  CHECK(file.attributes.recipe.prompt_suffix.empty());
  CHECK(file.attributes.recipe.chat_template_sha256.size() == 64);

  auto model = model::TransformerModel::load(kGemmaModel, {});
  const auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  const activations::SplitData& train = file.split(Split::kTrain);
  REQUIRE(train.positions.size() == train.token_ids.size());
  for (int64_t e = 0; e < 3; ++e) {
    INFO("example " << e);
    const Rendered r = rendered_line(o.dataset_path, train.example_index[static_cast<size_t>(e)], model, tok);
    std::string read_text;
    for (int64_t row = train.offsets[e]; row < train.offsets[e + 1]; ++row) {
      const int64_t position = train.positions[static_cast<size_t>(row)];
      CHECK(train.token_ids[static_cast<size_t>(row)] == r.ids[static_cast<size_t>(position)]);
      read_text += tok.decode({r.ids[static_cast<size_t>(position)]});
      at::Tensor stored = at::from_blob(const_cast<float*>(train.activations.data()) + row * train.hidden, {train.hidden});
      CHECK(at::allclose(stored, r.layer[position], 1e-5, 1e-5));
    }
    CHECK(read_text.find("I feel") != std::string::npos);
    CHECK(read_text.find("Question") == std::string::npos);
  }
}

TEST_CASE("conversations pooled: last, mean and max over the masked tokens only") {
  TempDir tmp;
  auto model = model::TransformerModel::load(kGemmaModel, {});
  const auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  for (Position position : {Position::kLast, Position::kMean, Position::kMax}) {
    const std::string out = position_name(position);
    INFO(out);
    capture::CaptureOptions o = conversation_capture(tmp, position, out);
    o.mask = TokenMask::kUser;
    capture::run_capture(o);
    const auto file = activations::read_activation_file(tmp.file(out + "/layer_2_activations.h5"));
    CHECK(file.attributes.recipe.mask == TokenMask::kUser);
    const activations::SplitData& val = file.split(Split::kVal);
    const data::Dataset d = data::read_dataset(o.dataset_path, {"text", "label"});
    const chat::OrderedJson messages = chat::OrderedJson::parse(d.examples[static_cast<size_t>(val.example_index[0])].messages);
    const std::string rendered = chat::render_conversation(kGemmaModel, messages, false);
    const Rendered r = rendered_line(o.dataset_path, val.example_index[0], model, tok);
    const std::vector<uint8_t> mask =
        chat::token_mask(tok.token_spans(r.ids, rendered), chat::content_spans(messages, rendered), TokenMask::kUser);
    std::vector<int64_t> user;
    for (size_t t = 0; t < mask.size(); ++t) {
      if (mask[t]) user.push_back(static_cast<int64_t>(t));
    }
    REQUIRE(user.size() >= 3);
    CHECK(user.back() < static_cast<int64_t>(r.ids.size()) - 3);  // the user's turn is not the conversation's end
    const at::Tensor rows = r.layer.index_select(0, at::tensor(user, at::kLong));
    const at::Tensor expected = position == Position::kLast   ? rows[-1]
                                : position == Position::kMean ? rows.mean(0)
                                                              : std::get<0>(rows.max(0));
    const at::Tensor stored = at::from_blob(const_cast<float*>(val.activations.data()), {val.hidden}).clone();
    CHECK(at::allclose(stored, expected, 1e-5, 1e-5));
  }
}

TEST_CASE("conversations: what makes no sense is refused, naming the line or the flag") {
  TempDir tmp;
  capture::CaptureOptions o = conversation_capture(tmp, Position::kLast, "out");
  o.prompt_suffix = "\nAnswer:";
  CHECK_CONTAINS(capture_error(o), "--prompt-suffix: " + o.dataset_path + " holds conversations");

  o = conversation_capture(tmp, Position::kLast, "out");
  write_text(o.dataset_path, R"({"messages": [{"role": "user", "content": "hi"}], "label": "a"})" "\n"
                             R"({"text": "plain", "label": "b"})" "\n");
  CHECK_CONTAINS(capture_error(o), "chats.jsonl:2: this row holds a text, the rows before it conversations");

  // Only a user turn: nothing in the assistant mask.
  std::string lines;
  for (int i = 0; i < 12; ++i) {
    lines += Json({{"messages", Json::array({{{"role", "user"}, {"content", fmt::format("hello {}", i)}}})},
                   {"label", kConversationLabels[i % 3]}}).dump() + "\n";
  }
  write_text(o.dataset_path, lines);
  CHECK_CONTAINS(capture_error(o), "no token of this conversation is in the assistant mask");

  // Gemma's template trims each content: a reply with spaces around it is not in the text as written.
  lines.clear();
  for (int i = 0; i < 12; ++i) {
    lines += Json({{"messages", Json::array({{{"role", "user"}, {"content", "hello"}},
                                             {{"role", "assistant"}, {"content", fmt::format("  spaced {}  ", i)}}})},
                   {"label", kConversationLabels[i % 3]}}).dump() + "\n";
  }
  write_text(o.dataset_path, lines);
  CHECK_CONTAINS(capture_error(o), "messages[1] (assistant): its content \"  spaced");

  // A user's text the template trims is no obstacle to the assistant's mask, but a span on it cannot be placed.
  lines.clear();
  for (int i = 0; i < 12; ++i) {
    lines += Json({{"messages", Json::array({{{"role", "user"}, {"content", "Hi there \n"}},
                                             {{"role", "assistant"}, {"content", fmt::format("Fine {}", i)}}})},
                   {"spans", Json::array({{{"message", 0}, {"start", 0}, {"end", 2}, {"label", "greeting"}}})},
                   {"label", kConversationLabels[i % 3]}}).dump() + "\n";
  }
  write_text(o.dataset_path, lines);
  o.position = Position::kAll;
  CHECK_CONTAINS(capture_error(o), "a span labels messages[0], whose content is not in the rendered conversation as written");

  capture::CaptureOptions texts = three_action_capture(tmp, 24, "cpu");
  texts.output_dir = tmp.file("texts");
  texts.mask = TokenMask::kAssistant;
  CHECK_CONTAINS(capture_error(texts), "--mask reads conversations (rows with \"messages\")");
  texts.mask.reset();
  texts.add_generation_prompt = true;
  CHECK_CONTAINS(capture_error(texts), "--add-generation-prompt reads conversations");
}

TEST_CASE("every-token probes on conversations score each prefix over its masked tokens only, as calibration reads them") {
  TempDir tmp;
  const capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "act");
  inference::EngineOptions options = train_conversation_probes(o, tmp.file("probes"), "multimax");
  const inference::Engine engine = inference::Engine::load(options);
  const std::string messages = data::read_dataset(o.dataset_path, {"text", "label"}).examples[0].messages;
  const inference::TokenScores tokens = engine.score_conversation_tokens(messages);
  const std::vector<inference::TextScores> whole = engine.score_conversations({messages});
  REQUIRE(tokens.mask.size() == tokens.ids.size());
  const auto first = static_cast<size_t>(std::find(tokens.mask.begin(), tokens.mask.end(), 1) - tokens.mask.begin());
  const size_t last = tokens.mask.size() - 1 -
                      static_cast<size_t>(std::find(tokens.mask.rbegin(), tokens.mask.rend(), 1) - tokens.mask.rbegin());
  REQUIRE(first > 0);
  for (size_t k = 0; k < engine.labels().size(); ++k) {
    CAPTURE(k);
    // Regression: prefixes pooled the user's turn and the template's tokens, which capture never read.
    for (size_t t = 0; t < first; ++t) CHECK(std::isnan(tokens.probability[t][0][k]));
    CHECK(tokens.probability[last][0][k] == doctest::Approx(whole[0].probability[0][k]).epsilon(1e-5));
  }

  // Generation pools a chat prompt's masked tokens and the reply's (regression: the user's turn and the template's
  // tokens too): a prompt monitor firing on any score never fires on a one-turn chat, which has no assistant token,
  // and fires inside the earlier reply of a chat that has one.
  options.generate = true;
  const inference::Engine generator = inference::Engine::load(options);
  // The reply's tokens are the assistant's content, its turn's end not (capture's mask never holds it).
  const std::optional<int32_t> end_of_turn = generator.tokenizer().token_to_id("<end_of_turn>");
  REQUIRE(end_of_turn);
  CHECK(generator.text_so_far_mask({0, 1}, {tokens.ids[last], *end_of_turn}) == std::vector<uint8_t>{0, 1, 1, 0});
  CHECK(generator.text_so_far_mask({}, {tokens.ids[last]}).empty());
  monitor::MonitorPolicy any;
  any.label = generator.labels()[0];
  any.threshold = 0.0;
  any.action = "flag";
  any.scope = monitor::Scope::kPrompt;
  const std::shared_ptr<const monitor::MonitorSet> monitors = generator.resolve_monitors({any});
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = 2;
  flags.no_stop = true;
  const generation::GenerationOptions greedy = generation::resolve_generation_flags(flags, generator.model_dir());
  auto prompt_firings = [&](const OrderedJson& messages) {
    const chat::Conversation conversation{messages, OrderedJson()};
    const std::string rendered = chat::render_conversation(kGemmaModel, conversation);
    const std::vector<uint8_t> mask =
        generator.chat_prompt_mask(conversation, rendered, generator.tokenizer().encode(rendered, false));
    const std::vector<inference::GeneratedText> texts = generator.generate_monitored(
        {rendered}, greedy, monitors, [](const inference::ScoredToken&) { return true; }, false, {mask});
    return std::make_pair(mask, texts.front().firings);
  };
  const auto [one_turn_mask, one_turn] = prompt_firings(chat::user_message("How was the day?"));
  CHECK(std::count(one_turn_mask.begin(), one_turn_mask.end(), 1) == 0);
  CHECK(one_turn.empty());
  const OrderedJson history = OrderedJson::array({{{"role", "user"}, {"content", "Hi"}},
                                                  {{"role", "assistant"}, {"content", "I feel calm today"}},
                                                  {{"role", "user"}, {"content", "And now?"}}});
  const auto [mask, fired] = prompt_firings(history);
  REQUIRE(fired.size() == 1);
  CHECK(mask.at(static_cast<size_t>(fired[0].index)) == 1);
}

TEST_CASE("texts at position all record each row's position too: 0 to the prompt's length - 1") {
  TempDir tmp;
  capture::CaptureOptions o = three_action_capture(tmp, 12, "cpu");
  o.layers = "1";
  o.position = Position::kAll;
  o.output_dir = tmp.file("all");
  capture::run_capture(o);
  const auto file = activations::read_activation_file(tmp.file("all/layer_1_activations.h5"));
  CHECK_FALSE(file.attributes.recipe.mask.has_value());
  for (Split split : activations::kSplits) {
    const activations::SplitData& data = file.split(split);
    REQUIRE(data.positions.size() == data.token_ids.size());
    for (int64_t e = 0; e < data.examples(); ++e) {
      for (int64_t row = data.offsets[e]; row < data.offsets[e + 1]; ++row) {
        CHECK(data.positions[static_cast<size_t>(row)] == row - data.offsets[e]);
      }
    }
  }
}

TEST_CASE("probes trained on conversations score a conversation as capture read it; texts are refused") {
  TempDir tmp;
  const capture::CaptureOptions o = conversation_capture(tmp, Position::kLast, "act");
  inference::EngineOptions options = train_conversation_probes(o, tmp.file("probes"), "linear");
  const inference::Engine engine = inference::Engine::load(options);
  CHECK(engine.recipe().mask == TokenMask::kAssistant);
  const auto file = activations::read_activation_file(tmp.file("act/layer_2_activations.h5"));
  const activations::SplitData& test = file.split(Split::kTest);
  const data::Dataset d = data::read_dataset(o.dataset_path, {"text", "label"});
  const std::string messages = d.examples[static_cast<size_t>(test.example_index[0])].messages;
  const std::vector<inference::TextScores> scores = engine.score_conversations({messages});
  const probes::ProbeSet set = probes::ProbeSet::load(tmp.file("probes"), at::kCPU, at::kFloat);
  const at::Tensor row = at::from_blob(const_cast<float*>(test.activations.data()), {1, test.hidden}).clone();
  const at::Tensor expected = set.probabilities(row)[0];
  for (size_t k = 0; k < set.probes().size(); ++k) {
    const size_t column = static_cast<size_t>(std::find(engine.labels().begin(), engine.labels().end(),
                                                        set.probes()[k].label) - engine.labels().begin());
    CHECK(scores[0].probability[0][column] == doctest::Approx(expected[static_cast<int64_t>(k)].item<double>()).epsilon(1e-5));
  }
  CHECK_THROWS_WITH(engine.score({"a plain text"}), doctest::Contains("trained on conversations' assistant tokens"));

  // Per token: each token of the rendering scored as the conversation up to it; the last one in the mask is what the
  // ranking reads.
  const inference::TokenScores tokens = engine.score_conversation_tokens(messages);
  REQUIRE(tokens.mask.size() == tokens.ids.size());
  const auto last = static_cast<size_t>(std::find(tokens.mask.rbegin(), tokens.mask.rend(), 1) - tokens.mask.rbegin());
  const size_t last_masked = tokens.mask.size() - 1 - last;
  for (size_t k = 0; k < engine.labels().size(); ++k) {
    if (std::isnan(scores[0].probability[0][k])) continue;
    CHECK(tokens.probability[last_masked][0][k] == doctest::Approx(scores[0].probability[0][k]).epsilon(1e-5));
    // Regression: the user's and the template's tokens were scored, which neither training nor calibration read.
    for (size_t t = 0; t < tokens.mask.size(); ++t) {
      if (tokens.mask[t] == 0) CHECK(std::isnan(tokens.probability[t][0][k]));
    }
  }
  // The tool: --per-token --messages marks the mask; a --file of conversations ranks each as --messages does.
  write_text(tmp.file("one.json"), messages);
  const std::string base = fmt::format("{} --probes-dir {} --model {} --device cpu --json", tool("multi_probe_inference"),
                                       tmp.file("probes"), kGemmaModel);
  CommandResult per_token = run_command(base + " --per-token --messages " + tmp.file("one.json"));
  REQUIRE_MESSAGE(per_token.exit_code == 0, per_token.output);
  const Json shown = Json::parse(per_token.output.substr(per_token.output.find("{\n")));
  REQUIRE(shown["tokens"].size() == tokens.ids.size());
  for (size_t t = 0; t < tokens.ids.size(); ++t) CHECK(shown["tokens"][t]["in_mask"] == (tokens.mask[t] == 1));
  // Regression: --csv and --html were refused with --messages, which reports only a generation cannot make.
  CommandResult report = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --per-token --messages {} "
                                                 "--csv {} --html {}", tool("multi_probe_inference"), tmp.file("probes"),
                                                 kGemmaModel, tmp.file("one.json"), tmp.file("t.csv"), tmp.file("t.html")));
  REQUIRE_MESSAGE(report.exit_code == 0, report.output);
  CHECK(is_regular_file(tmp.file("t.csv")));
  CHECK(is_regular_file(tmp.file("t.html")));
  write_text(tmp.file("chats.jsonl"), read_text(o.dataset_path));
  CommandResult file_ranking = run_command(base + " --file " + tmp.file("chats.jsonl"));
  CommandResult one_ranking = run_command(base + " --messages " + tmp.file("one.json"));
  REQUIRE_MESSAGE(file_ranking.exit_code == 0, file_ranking.output);
  REQUIRE_MESSAGE(one_ranking.exit_code == 0, one_ranking.output);
  const Json all = Json::parse(file_ranking.output.substr(file_ranking.output.find("[\n")));
  const Json one = Json::parse(one_ranking.output.substr(one_ranking.output.find("{\n")));
  REQUIRE(all.size() == d.examples.size());
  const Json& same = all[static_cast<size_t>(test.example_index[0])];
  CHECK(same["text"] == fmt::format("conversation {}", test.example_index[0] + 1));
  CHECK(same["predictions"] == one["predictions"]);
}

TEST_CASE("conversations with --skip-invalid: a row without a masked token or with rewritten content is skipped and counted") {
  TempDir tmp;
  capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "skipped");
  std::string lines = read_text(o.dataset_path);
  // Line 25: only a user turn (nothing in the assistant mask); line 26: a reply Gemma's template trims.
  lines += Json({{"messages", Json::array({{{"role", "user"}, {"content", "hello"}}})}, {"label", "lonely"}}).dump() + "\n";
  lines += Json({{"messages", Json::array({{{"role", "user"}, {"content", "hello"}},
                                           {{"role", "assistant"}, {"content", "  spaced  "}}})},
                 {"label", "tense"}}).dump() + "\n";
  write_text(o.dataset_path, lines);
  // Without --skip-invalid the first of the two in run order stops the capture.
  const std::string stopped = capture_error(o);
  CHECK((stopped.find("chats.jsonl:25: no token of this conversation") != std::string::npos ||
         stopped.find("chats.jsonl:26: messages[1] (assistant)") != std::string::npos));
  o.dataset.skip_invalid = true;
  const capture::CaptureSummary summary = capture::run_capture(o);
  REQUIRE(summary.skipped.size() == 2);
  CHECK(summary.skipped[0].line == 24);
  CHECK_CONTAINS(summary.skipped[0].reason, "no token of this conversation is in the assistant mask");
  CHECK(summary.skipped[1].line == 25);
  CHECK_CONTAINS(summary.skipped[1].reason, "its content \"  spaced");
  CHECK(summary.examples == 24);
  const activations::ActivationFile file = activations::read_activation_file(tmp.file("skipped/layer_2_activations.h5"));
  // A label only skipped rows had is no label of the files.
  const std::vector<std::string> kept_labels = {"calm", "curious", "tense"};
  CHECK(file.attributes.label_names == kept_labels);
  CHECK(file.split(Split::kTrain).labels.size() + file.split(Split::kVal).labels.size() +
            file.split(Split::kTest).labels.size() == 24);
}

TEST_CASE("conversations with spans: position all stores each read token's label, the span's where it overlaps it") {
  TempDir tmp;
  capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "spans");
  // Each reply "Café: I feel <label> today, N times over" labels the word after "feel" (characters 13 to 13 + its
  // length: "é" is one character and two bytes) as "alarm".
  std::string lines;
  for (int i = 0; i < 24; ++i) {
    const std::string label = kConversationLabels[i % 3];
    const std::string reply = fmt::format("Café: I feel {} today, {} times over", label, i);
    Json messages = Json::array({{{"role", "user"}, {"content", fmt::format("Question number {} about the day", i)}},
                                 {{"role", "assistant"}, {"content", reply}}});
    Json spans = Json::array({{{"message", 1}, {"start", 13}, {"end", 13 + label.size()}, {"label", "alarm"}}});
    lines += Json({{"messages", messages}, {"spans", spans}, {"label", label}}).dump() + "\n";
  }
  write_text(o.dataset_path, lines);
  capture::run_capture(o);
  const activations::ActivationFile file = activations::read_activation_file(tmp.file("spans/layer_2_activations.h5"));
  const auto& names = file.attributes.label_names;
  const auto alarm = static_cast<int64_t>(std::find(names.begin(), names.end(), "alarm") - names.begin());
  REQUIRE(alarm < static_cast<int64_t>(names.size()));
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  int64_t labelled = 0;
  for (Split split : {Split::kTrain, Split::kVal, Split::kTest}) {
    const activations::SplitData& data = file.split(split);
    REQUIRE(data.token_labels.size() == static_cast<size_t>(data.rows));
    for (int64_t e = 0; e < data.examples(); ++e) {
      // The reply as the stored tokens spell it, each token's bytes in it (decoded alone, independent of the spans
      // capture computed), and where the labelled word lies in those bytes.
      std::string text;
      std::vector<std::pair<size_t, size_t>> bytes;
      for (int64_t r = data.offsets[e]; r < data.offsets[e + 1]; ++r) {
        const std::string piece = tok.decode({static_cast<int32_t>(data.token_ids[r])});
        bytes.emplace_back(text.size(), text.size() + piece.size());
        text += piece;
      }
      const std::string word = names[data.labels[e]];
      const size_t begin = text.find("Café: I feel ") + std::string("Café: I feel ").size();
      REQUIRE(begin != std::string::npos);
      CHECK(text.substr(begin, word.size()) == word);
      for (size_t t = 0; t < bytes.size(); ++t) {
        const bool overlaps = bytes[t].first < begin + word.size() && bytes[t].second > begin;
        CHECK(data.token_labels[data.offsets[e] + t] == (overlaps ? alarm : data.labels[e]));
        labelled += overlaps ? 1 : 0;
      }
    }
  }
  CHECK(labelled >= 24);
  // Spans that do not fit their message, or on a text row, are refused naming the line.
  write_text(o.dataset_path, R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], )"
                             R"("spans": [{"message": 1, "start": 1, "end": 5, "label": "x"}], "label": "a"})" "\n");
  CHECK_CONTAINS(capture_error(o), "chats.jsonl:1: spans[0]: characters [1, 5) are not a stretch of message 1's content");
  write_text(o.dataset_path, R"({"text": "hi", "spans": [], "label": "a"})" "\n");
  CHECK_CONTAINS(capture_error(o), "'spans' label the messages of a conversation");
}

namespace {

// Each example's rows' tokens, decoded and joined, by the example's line in the dataset.
std::map<int64_t, std::string> read_texts(const activations::ActivationFile& file, const tokenizer::Tokenizer& tok) {
  std::map<int64_t, std::string> texts;
  for (const activations::SplitData& split : file.splits) {
    for (int64_t e = 0; e < split.examples(); ++e) {
      std::string& text = texts[split.example_index[static_cast<size_t>(e)]];
      for (int64_t row = split.offsets[e]; row < split.offsets[e + 1]; ++row) {
        text += tok.decode({static_cast<int32_t>(split.token_ids[static_cast<size_t>(row)])});
      }
    }
  }
  return texts;
}

}  // namespace

TEST_CASE("conversations: a reply that also occurs in the template's own text is read where the template printed it") {
  TempDir tmp;
  // Regression: each content was searched for from the end of the one before, so a reply "d" was found in
  // "<end_of_turn>" and "model" in the assistant's header, and those tokens were stored as the reply's.
  const std::vector<std::string> replies = {"d", "b", "model", "e", "n", "t"};
  std::string lines;
  for (size_t i = 0; i < 2 * replies.size(); ++i) {
    const std::string& reply = replies[i % replies.size()];
    Json messages = Json::array({{{"role", "user"}, {"content", "Which is right? a, b, c or d"}},
                                 {{"role", "assistant"}, {"content", reply}}});
    lines += Json({{"messages", messages}, {"label", i % 2 == 0 ? "even" : "odd"}}).dump() + "\n";
  }
  capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "replies");
  o.dataset_path = tmp.file("replies.jsonl");
  write_text(o.dataset_path, lines);
  capture::run_capture(o);
  const auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  const std::map<int64_t, std::string> texts =
      read_texts(activations::read_activation_file(tmp.file("replies/layer_2_activations.h5")), tok);
  REQUIRE(texts.size() == 2 * replies.size());
  for (const auto& [line, text] : texts) CHECK(text == replies[static_cast<size_t>(line) % replies.size()]);
}

TEST_CASE("conversations: a row's tools reach the chat template with its messages, their keys in the order written") {
  TempDir tmp;
  const std::string model = tmp.file("model");
  copy_dir(kGemmaModel, model);
  write_text(model + "/chat_template.jinja",
             "{% if tools %}[tools {{ tools | length }}: {{ tools[0] | tojson }}]{% endif %}"
             "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
             "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}</{{ m.role }}>{% endfor %}");
  // Keys out of sorted order, as OpenAI's clients write a tool and a call: transformers' tojson prints them so.
  const std::string conversation =
      R"("messages": [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": "Sunny", )"
      R"("tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"unit": "C", "city": "Oslo"}}}]}], )"
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  std::string lines;
  for (int i = 0; i < 12; ++i) lines += "{" + conversation + R"(, "label": ")" + (i % 2 == 0 ? "a" : "b") + "\"}\n";
  capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "tools");
  o.model_dir = model;
  o.mask = TokenMask::kAll;
  o.dataset_path = tmp.file("tools.jsonl");
  write_text(o.dataset_path, lines);
  capture::run_capture(o);
  const auto tok = tokenizer::Tokenizer::from_file(model);
  // Regressions: the row's "tools" were dropped, the conversation rendered as if the model had none; then their keys
  // (and a call's arguments') were printed sorted, a prompt transformers never renders.
  const std::string rendered = R"([tools 1: {"type": "function", "function": {"name": "get_weather", "parameters": {}}}])"
                               R"(<user>Weather in Oslo?</user><assistant>Sunny{"unit": "C", "city": "Oslo"}</assistant>)";
  for (const auto& [line_number, text] : read_texts(activations::read_activation_file(tmp.file("tools/layer_2_activations.h5")), tok)) {
    const auto line = line_number;  // named, not bound: clang's C++17 captures no structured binding (CAPTURE)
    CAPTURE(line);
    CHECK(text.rfind(rendered, 0) == 0);
  }
  // multi_probe_inference --file reads such a row as capture does: the tools with the messages, in the same order.
  const std::vector<inference::ConversationRow> rows =
      inference::read_conversation_rows(read_file(o.dataset_path), o.dataset_path, "text");
  REQUIRE(rows.size() == 12);
  CHECK(rows[0].conversation == data::read_dataset(o.dataset_path, {"text", "label"}).examples[0].messages);
  CHECK(Json::parse(rows[0].conversation) == Json::parse("{" + conversation + "}"));
  CHECK_CONTAINS(rows[0].conversation, R"({"unit":"C","city":"Oslo"})");
  // A byte-order mark and an indented first row (regression: both read as a file of plain texts).
  write_text(tmp.file("marked.jsonl"), "\xEF\xBB\xBF  {" + conversation + "}\n");
  const std::vector<inference::ConversationRow> marked =
      inference::read_conversation_rows(read_file(tmp.file("marked.jsonl")), "marked.jsonl", "text");
  REQUIRE(marked.size() == 1);
  CHECK(marked[0].conversation == rows[0].conversation);
  // A file of texts is told apart without reading its rows as a template would (regression: a text row's integer
  // past 64 bits stopped the run).
  write_text(tmp.file("texts.jsonl"), R"({"text": "a", "id": 123456789012345678901234567890})" "\n");
  CHECK(inference::read_conversation_rows(read_file(tmp.file("texts.jsonl")), "texts.jsonl", "text").empty());
  lines.clear();
  for (int i = 0; i < 12; ++i) {
    lines += R"({"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "web"}], "label": ")" +
             std::string(i % 2 == 0 ? "a" : "b") + "\"}\n";
  }
  write_text(o.dataset_path, lines);
  o.output_dir = tmp.file("bad");
  CHECK_CONTAINS(capture_error(o), "'tools[0].type' must be \"function\"");
}
