// The engine's scoring: texts, every token of a text, prompts and generations through the probes it loaded
// (engine.cpp loads the model and the probes).
#include "inference/engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "chat/chat_template.h"
#include "chat/conversation.h"
#include "chat/token_masks.h"
#include "common/error.h"
#include "device/torch/row_stable.h"
#include "inference/text_stream.h"

namespace probekit::inference {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

std::vector<std::vector<std::vector<double>>> Engine::empty_tables(size_t count) const {
  return std::vector<std::vector<std::vector<double>>>(
      count, std::vector<std::vector<double>>(layers_.size(), std::vector<double>(labels_.size(), kNaN)));
}

at::Tensor Engine::probabilities_of(const at::Tensor& rows) const {
  std::vector<at::Tensor> columns;
  for (size_t l = 0; l < layers_.size(); ++l) {
    columns.push_back(probes_[l].set.probabilities(rows.select(1, static_cast<int64_t>(l)).to(at::kFloat)).to(at::kFloat));
  }
  return at::cat(columns, 1);
}

bool Engine::reads_every_token() const {
  return !probes_.empty() && probes_.front().set.shape().kind->reads_every_token();
}

at::Tensor Engine::text_probabilities(const at::Tensor& rows, const std::vector<int64_t>& offsets, bool masked) const {
  std::vector<at::Tensor> columns;
  for (size_t l = 0; l < layers_.size(); ++l) {
    at::Tensor layer_rows = rows.select(1, static_cast<int64_t>(l)).to(at::kFloat);
    columns.push_back(device::row_stable_sigmoid(probes_[l].set.token_logits(layer_rows, offsets, nullptr, masked).to(at::kFloat)));
  }
  return at::cat(columns, 1);
}

at::Tensor Engine::prompt_probabilities(const std::vector<readout::Sequence>& texts, const model::StreamWrites* writes,
                                        bool per_row, at::Tensor* last_token,
                                        const std::vector<std::vector<uint8_t>>& masks) const {
  // A masked text without a token in the mask (a chat whose prompt and reply have none yet) has nothing to pool: its
  // scores are NaN, and the batch's other texts are read without it.
  std::vector<int64_t> read;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (masks.empty() || std::find(masks[i].begin(), masks[i].end(), 1) != masks[i].end()) read.push_back(static_cast<int64_t>(i));
  }
  if (read.size() < texts.size()) {
    std::vector<readout::Sequence> kept_texts;
    std::vector<std::vector<uint8_t>> kept_masks;
    for (int64_t i : read) {
      kept_texts.push_back(texts[static_cast<size_t>(i)]);
      kept_masks.push_back(masks[static_cast<size_t>(i)]);
    }
    int64_t columns = 0;
    for (const LayerProbes& layer : probes_) columns += static_cast<int64_t>(layer.label_column.size());
    const auto all = static_cast<int64_t>(texts.size());
    at::Tensor out = at::full({all, columns}, kNaN, at::kFloat);
    at::Tensor kept_last;
    if (!read.empty()) {
      const at::Tensor kept = at::tensor(read, at::kLong);
      out.index_copy_(0, kept, prompt_probabilities(kept_texts, writes, per_row, last_token ? &kept_last : nullptr, kept_masks)
                                   .to(at::kCPU, at::kFloat));
      if (kept_last.defined()) {
        *last_token = at::full({all, kept_last.size(1)}, kNaN, at::kFloat);
        last_token->index_copy_(0, kept, kept_last.to(at::kCPU, at::kFloat));
      }
    }
    return out;
  }
  const readout::Sequence suffix = masks.empty() ? prompts_->suffix_ids() : readout::Sequence{};
  std::vector<readout::Sequence> prompts;
  std::vector<int64_t> offsets = {0};
  for (size_t i = 0; i < texts.size(); ++i) {
    prompts.push_back(texts[i]);
    prompts.back().insert(prompts.back().end(), suffix.begin(), suffix.end());
    offsets.push_back(offsets.back() + (masks.empty() ? static_cast<int64_t>(prompts.back().size())
                                                      : static_cast<int64_t>(std::count(masks[i].begin(), masks[i].end(), 1))));
  }
  readout::Request request = request_;
  if (writes != nullptr) request.writes = writes;
  if (per_row) request.layout = readout::Layout::kPadded;
  at::Tensor rows = readout::read_rows(*model_, prompts, request, masks);
  readout::check_finite_rows(rows, 1, request_.layers);
  if (last_token != nullptr) {
    std::vector<int64_t> last;  // each text's last token (before the suffix), or its last masked one
    for (size_t i = 0; i < texts.size(); ++i) {
      last.push_back(masks.empty() ? offsets[i] + static_cast<int64_t>(texts[i].size()) - 1 : offsets[i + 1] - 1);
    }
    *last_token = row_probabilities(rows.index_select(0, at::tensor(last, at::kLong).to(rows.device())));
    for (size_t i = 0; i < masks.size() && last_token->defined(); ++i) {
      if (masks[i].back() == 0) last_token->select(0, static_cast<int64_t>(i)).fill_(kNaN);  // read no row of its own
    }
  }
  return text_probabilities(rows, offsets, !masks.empty());
}

std::vector<uint8_t> Engine::chat_prompt_mask(const chat::Conversation& conversation, const std::string& rendered,
                                              const std::vector<int32_t>& ids, const chat::RenderLimits& limits) const {
  if (!recipe_.mask) return {};
  // The last assistant message is the reply being generated, not one of the prompt's.
  if (*recipe_.mask == TokenMask::kLastAssistant) return std::vector<uint8_t>(ids.size(), 0);
  chat::ChatTemplateInputs inputs;
  inputs.messages = conversation.messages;
  inputs.tools = conversation.tools;
  inputs.add_generation_prompt = true;
  inputs.limits = limits;
  return chat::token_mask(tokenizer_->token_spans(ids, rendered),
                          chat::locate_contents(checked_chat_template(), inputs, rendered, recipe_.mask), *recipe_.mask);
}

ChatPrompts Engine::chat_prompts(const std::vector<chat::Conversation>& conversations) const {
  ChatPrompts chat;
  chat.rendered = true;
  for (const chat::Conversation& conversation : conversations) {
    chat.prompts.push_back(chat::render_conversation(model_dir(), conversation));
    if (!recipe_.mask) continue;  // probes that read prompts whole
    chat.masks.push_back(chat_prompt_mask(conversation, chat.prompts.back(), tokenizer_->encode(chat.prompts.back(), false)));
  }
  return chat;
}

std::vector<uint8_t> Engine::text_so_far_mask(const std::vector<uint8_t>& prompt_mask,
                                              const std::vector<int32_t>& generated) const {
  if (prompt_mask.empty()) return {};
  std::vector<uint8_t> mask = prompt_mask;
  // The reply's content, as capture's mask reads a message's: not a turn's end or any other special token.
  for (int32_t id : generated) mask.push_back(*recipe_.mask != TokenMask::kUser && !tokenizer_->is_special(id) ? 1 : 0);
  return mask;
}

at::Tensor Engine::row_probabilities(const at::Tensor& rows) const {
  std::vector<at::Tensor> columns;
  for (size_t l = 0; l < layers_.size(); ++l) {
    at::Tensor logits = probes_[l].set.row_logits(rows.select(1, static_cast<int64_t>(l)).to(at::kFloat));
    if (!logits.defined()) return {};
    columns.push_back(device::row_stable_sigmoid(logits.to(at::kFloat)));
  }
  return at::cat(columns, 1);
}

void Engine::store_columns(const at::Tensor& columns, std::vector<std::vector<std::vector<double>>>& tables,
                           size_t first) const {
  at::Tensor p = columns.to(at::kCPU, at::kDouble).contiguous();
  const double* data = p.data_ptr<double>();
  for (int64_t n = 0; n < p.size(0); ++n) {
    int64_t column = 0;
    for (size_t l = 0; l < layers_.size(); ++l) {
      for (int64_t k : probes_[l].label_column) {
        if (k >= 0) tables[first + static_cast<size_t>(n)][l][static_cast<size_t>(k)] = data[n * p.size(1) + column];
        ++column;
      }
    }
  }
}

void Engine::store_probabilities(const at::Tensor& rows, std::vector<std::vector<std::vector<double>>>& tables,
                                 size_t first) const {
  store_columns(probabilities_of(rows), tables, first);
}

size_t Engine::batch_end(const std::vector<readout::Prompt>& prompts, size_t start) const {
  auto batch_size = static_cast<size_t>(std::max<int64_t>(1, options_.batch_size));
  const size_t end = std::min(prompts.size(), start + batch_size);
  if (request_.position != Position::kAll) return end;
  // Every token's rows at every layer are read: at most kTokenRowBytes of them per batch (at least one text).
  constexpr double kTokenRowBytes = 1024.0 * 1024.0 * 1024.0;
  const double bytes_per_token = 4.0 * static_cast<double>(layers_.size() * model_->config().hidden_size);
  double bytes = 0.0;
  for (size_t i = start; i < end; ++i) {
    bytes += bytes_per_token * static_cast<double>(prompts[i].ids.size());
    if (i > start && bytes > kTokenRowBytes) return i;
  }
  return end;
}

std::vector<TextScores> Engine::score(const std::vector<std::string>& texts,
                                      const std::vector<const steering::SteeringVectors*>& steering) const {
  require_probes();
  require_texts();
  if (!steering.empty() && steering.size() != texts.size()) fail_input("{} steering rows for {} texts", steering.size(), texts.size());
  std::vector<readout::Prompt> prompts = prompts_->build(texts);
  prompts_->warn_if_cut(prompts);
  return score_prompts(prompts, steering);
}

void Engine::require_texts() const {
  if (recipe_.mask) {
    fail_usage("these probes were trained on conversations' {} tokens: give conversations (multi_probe_inference "
               "--messages or --chat, the server's \"messages\" and chat completions), not texts",
               token_mask_name(*recipe_.mask));
  }
}

const chat::ChatTemplate& Engine::checked_chat_template() const {
  if (!chat_template_) fail_input("{}", chat_problem_);
  const chat::ChatTemplate& chat = *chat_template_;
  if (!recipe_.chat_template_sha256.empty()) {
    const std::string sha256 = chat.source_sha256();
    if (sha256 != recipe_.chat_template_sha256) {
      fail_input("the probes' conversations were rendered with another chat template (chat_template_sha256 {}..., the "
                 "model in {} has {}...)",
                 recipe_.chat_template_sha256.substr(0, 12), model_dir(), sha256.substr(0, 12));
    }
  }
  return chat;
}

std::vector<readout::Prompt> Engine::conversation_prompts(const std::vector<std::string>& conversations,
                                                          const std::function<std::string(size_t)>& name) const {
  // Probes trained on texts read conversations' assistant tokens, which is what a chat model's answer is; the
  // template writes the turns, so no prompt suffix follows.
  const readout::PromptBuilder builder(*tokenizer_, "", prompts_->limit());
  std::vector<readout::Prompt> prompts = builder.build_conversations(
      conversations, checked_chat_template(), recipe_.mask.value_or(TokenMask::kAssistant), recipe_.add_generation_prompt,
      name ? name : [](size_t i) { return fmt::format("conversation {}", i + 1); });
  builder.warn_if_cut(prompts);
  return prompts;
}

std::vector<TextScores> Engine::score_conversations(const std::vector<std::string>& conversations,
                                                    const std::function<std::string(size_t)>& name) const {
  require_probes();
  return score_prompts(conversation_prompts(conversations, name), {});
}

TokenScores Engine::score_conversation_tokens(const std::string& conversation, const std::string& name,
                                              const std::function<void()>& before_pass) const {
  require_probes();
  require_per_token_position();
  readout::Prompt prompt = conversation_prompts({conversation}, [&name](size_t) { return name; }).front();
  TokenScores result;
  result.cut = prompt.cut;
  result.mask = prompt.mask;
  score_token_ids(prompt.ids, nullptr, result, false, before_pass);
  return result;
}

std::vector<TextScores> Engine::score_prompts(const std::vector<readout::Prompt>& prompts,
                                              const std::vector<const steering::SteeringVectors*>& steering) const {
  std::vector<std::vector<std::vector<double>>> tables = empty_tables(prompts.size());
  for (size_t start = 0, end = 0; start < prompts.size(); start = end) {
    end = batch_end(prompts, start);
    std::vector<readout::Sequence> batch;
    std::vector<std::vector<uint8_t>> masks;
    std::vector<int64_t> offsets = {0};
    for (size_t i = start; i < end; ++i) {
      batch.push_back(prompts[i].ids);
      if (!prompts[i].mask.empty()) masks.push_back(prompts[i].mask);
      const auto rows = prompts[i].mask.empty() ? prompts[i].ids.size()
                                                 : std::count(prompts[i].mask.begin(), prompts[i].mask.end(), 1);
      offsets.push_back(offsets.back() + static_cast<int64_t>(rows));
    }
    readout::Request steered = request_;
    model::StreamWrites writes;
    if (!steering.empty()) {
      // Each text steered its own way: a vector per row of a padded batch (packed rows share one stream).
      writes = steering::place_rows({steering.begin() + static_cast<std::ptrdiff_t>(start),
                                     steering.begin() + static_cast<std::ptrdiff_t>(end)},
                                    *model_);
      steered.writes = &writes;
      steered.layout = readout::Layout::kPadded;
    }
    at::Tensor rows = readout::read_rows(*model_, batch, steered, masks);
    readout::check_finite_rows(rows, 1, request_.layers);
    if (request_.position != Position::kAll) {
      store_probabilities(rows, tables, start);
    } else {
      store_columns(text_probabilities(rows, offsets, !masks.empty()), tables, start);
    }
  }
  spdlog::debug("{} prompts scored", prompts.size());
  std::vector<TextScores> scores(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    scores[i].probability = std::move(tables[i]);
    scores[i].cut = prompts[i].cut;
  }
  return scores;
}

TokenScores Engine::score_tokens(const std::string& text, const steering::SteeringVectors* steering,
                                 const std::function<void()>& before_pass) const {
  require_probes();
  require_texts();
  require_per_token_position();
  TokenScores result;
  readout::Prompt prompt = prompts_->build_text(text);
  result.cut = prompt.cut;
  if (prompt.cut > 0) {
    spdlog::warn("the text is longer than {}: its first {} tokens were cut from the start and are not scored",
                 prompts_->limit().description, prompt.cut);
  }
  score_token_ids(prompt.ids, steering, result, true, before_pass);
  return result;
}

void Engine::require_per_token_position() const {
  if (request_.position != Position::kLast && !reads_every_token()) {
    fail_input("--per-token needs probes trained on the last token or every-token probes (these used position '{}')",
               position_name(request_.position));
  }
}

void Engine::score_token_ids(const readout::Sequence& ids, const steering::SteeringVectors* steering,
                             TokenScores& result, bool with_suffix, const std::function<void()>& before_pass) const {
  result.ids = ids;
  result.tokens = tokenizer_->tokens(result.ids);
  // Each token's text is what it adds to the text (a character split over byte tokens comes with the last of them,
  // as in generation), a special token its own spelling.
  TextStream pieces(*tokenizer_, {});
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool last = i + 1 == ids.size();
    if (!tokenizer_->is_special(ids[i])) {
      result.texts.push_back(pieces.add(ids[i], last));
      continue;
    }
    if (!result.texts.empty()) result.texts.back() += pieces.flush();  // the byte run before it ends here
    pieces.add(ids[i], last);
    result.texts.push_back(tokenizer_->decode({ids[i]}));
  }
  result.probability = empty_tables(result.ids.size());
  readout::Request steered = request_;
  steered.before_pass = before_pass;
  const model::StreamWrites writes = steering != nullptr ? steering::place(*steering, *model_) : model::StreamWrites();
  if (steering != nullptr) steered.writes = &writes;
  store_latents(ids, steered.writes, result);
  if (reads_every_token()) return score_prefix_prompts(ids, steered, result);
  at::Tensor rows = readout::read_prefixes(*model_, ids, with_suffix ? prompts_->suffix_ids() : readout::Sequence{}, steered);
  readout::check_finite_rows(rows, 1, request_.layers);
  store_probabilities(rows, result.probability, 0);
  // A conversation's tokens outside the probes' mask are none they were trained or calibrated on.
  for (size_t t = 0; t < result.mask.size() && t < result.probability.size(); ++t) {
    if (result.mask[t] == 0) result.probability[t] = empty_tables(1).front();
  }
  if (!with_suffix || prompts_->suffix_ids().empty()) hide_leading_prefixes(result);
}

void Engine::warn_past_limit(const readout::Sequence& prompt, int64_t new_tokens) const {
  const readout::PromptLimit& limit = prompts_->limit();
  const auto longest = static_cast<int64_t>(prompt.size() + prompts_->suffix_ids().size()) + new_tokens;
  if (limit.max_length <= 0 || longest <= limit.max_length) return;
  spdlog::warn("a prompt of {} tokens with {} new ones passes {}: generation scores the whole text, where ranking and "
               "--per-token cut it from the start as the probes' training texts were",
               prompt.size(), new_tokens, limit.description);
}

void Engine::hide_leading_prefixes(TokenScores& result) const {
  const auto ids = static_cast<int64_t>(result.probability.size());
  const int64_t unread = std::min(ids, prompts_->leading_specials());
  for (size_t l = 0; l < layers_.size(); ++l) hide_unread_tokens(l, unread, ids, result.probability);
}

std::vector<readout::Request> Engine::latent_requests() const {
  std::vector<readout::Request> requests;
  for (const sae::LatentReading& reading : shown_latents_) {
    requests.push_back({reading.sae->site, Position::kLast, {reading.sae->layer}, 0});
    requests.back().latents = &reading;
  }
  return requests;
}

// A token's latents at the SAE's site do not depend on what follows it: one pass over the text reads every token's.
void Engine::store_latents(const readout::Sequence& ids, const model::StreamWrites* writes, TokenScores& result) const {
  for (readout::Request request : latent_requests()) {
    request.position = Position::kAll;
    request.writes = writes;
    const at::Tensor rows = readout::read_rows(*model_, {ids}, request).select(1, 0).to(at::kCPU);  // [T, 2K + 2]
    auto& per_token = result.latents[request.latents->sae->name];
    for (int64_t t = 0; t < rows.size(0); ++t) per_token.push_back(sae::unpack_latents(rows[t], *request.latents->sae));
  }
}

// Attention pools every token of its prompt, so prefix t's prompt text[0..t] + suffix is read whole; prefixes go
// --batch-size at a time (a forward per prefix, batched: exact, and a per-token view is of one text). A conversation's
// prefix pools only its tokens in the probes' mask, as capture read them and calibration scored them: prefixes before
// the first such token have nothing to pool and no score.
void Engine::score_prefix_prompts(const readout::Sequence& ids, const readout::Request& request,
                                  TokenScores& result) const {
  const std::vector<uint8_t>& mask = result.mask;
  const readout::Sequence suffix = mask.empty() ? prompts_->suffix_ids() : readout::Sequence{};
  const size_t first = mask.empty() ? 0 : static_cast<size_t>(std::find(mask.begin(), mask.end(), 1) - mask.begin());
  auto batch_size = static_cast<size_t>(std::max<int64_t>(1, options_.batch_size));
  for (size_t start = first; start < ids.size(); start += batch_size) {
    if (request.before_pass) request.before_pass();
    std::vector<readout::Sequence> batch;
    std::vector<std::vector<uint8_t>> masks;
    std::vector<int64_t> offsets = {0};
    for (size_t t = start; t < std::min(ids.size(), start + batch_size); ++t) {
      const auto end = static_cast<std::ptrdiff_t>(t + 1);
      readout::Sequence prompt(ids.begin(), ids.begin() + end);
      prompt.insert(prompt.end(), suffix.begin(), suffix.end());
      if (!mask.empty()) masks.emplace_back(mask.begin(), mask.begin() + end);
      const auto rows = mask.empty() ? prompt.size() : std::count(masks.back().begin(), masks.back().end(), 1);
      offsets.push_back(offsets.back() + static_cast<int64_t>(rows));
      batch.push_back(std::move(prompt));
    }
    at::Tensor rows = readout::read_rows(*model_, batch, request, masks);
    readout::check_finite_rows(rows, 1, request_.layers);
    store_columns(text_probabilities(rows, offsets, !mask.empty()), result.probability, start);
  }
  if (mask.empty() && suffix.empty()) hide_leading_prefixes(result);
  store_attention(ids, request, result);
}

std::vector<std::vector<double>> Engine::column_table(const at::Tensor& columns) const {
  std::vector<std::vector<std::vector<double>>> table = empty_tables(1);
  store_columns(columns.unsqueeze(0), table, 0);
  return std::move(table.front());
}

void Engine::hide_unread_tokens(size_t l, int64_t first, int64_t end,
                                std::vector<std::vector<std::vector<double>>>& tables) const {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (static_cast<int64_t>(t) >= first && static_cast<int64_t>(t) < end) continue;
    for (double& score : tables[t][l]) score = std::numeric_limits<double>::quiet_NaN();
  }
}

// The probes' own view of the whole text: each token's attention weight (the mean over heads) and, for ema and
// rolling probes, each token's own score; a conversation's at the tokens in the probes' mask only.
void Engine::store_attention(const readout::Sequence& ids, const readout::Request& request, TokenScores& result) const {
  const std::vector<uint8_t>& mask = result.mask;
  readout::Sequence prompt = ids;
  const readout::Sequence suffix = mask.empty() ? prompts_->suffix_ids() : readout::Sequence{};
  prompt.insert(prompt.end(), suffix.begin(), suffix.end());
  std::vector<int64_t> tokens;  // the token of each row read
  for (size_t t = 0; t < prompt.size(); ++t) {
    if (mask.empty() || (t < mask.size() && mask[t] != 0)) tokens.push_back(static_cast<int64_t>(t));
  }
  if (tokens.empty()) return;
  const auto text_tokens = static_cast<int64_t>(ids.size());
  const std::vector<int64_t> offsets = {0, static_cast<int64_t>(tokens.size())};
  std::vector<std::vector<uint8_t>> masks;
  if (!mask.empty()) masks.push_back(mask);
  at::Tensor rows = readout::read_rows(*model_, {prompt}, request, masks);
  const auto text_rows = static_cast<int64_t>(std::count_if(tokens.begin(), tokens.end(), [&](int64_t t) { return t < text_tokens; }));
  if (at::Tensor own = row_probabilities(rows.narrow(0, 0, text_rows)); own.defined()) {
    result.token_probability = empty_tables(ids.size());
    for (int64_t r = 0; r < text_rows; ++r) {
      store_columns(own.narrow(0, r, 1), result.token_probability, static_cast<size_t>(tokens[static_cast<size_t>(r)]));
    }
  }
  result.attention = empty_tables(ids.size());
  result.suffix_attention = empty_tables(suffix.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const probes::ProbeSet& set = probes_[l].set;
    at::Tensor weights;
    set.token_logits(rows.select(1, static_cast<int64_t>(l)).to(at::kFloat), offsets, &weights, !mask.empty());
    at::Tensor mean_host = weights.mean(2).to(at::kCPU, at::kDouble).contiguous();  // [rows read, K]
    auto mean = mean_host.accessor<double, 2>();
    const int64_t first = set.token_layout(offsets, !mask.empty()).position.front();
    const int64_t read = mean_host.size(0);  // the rows the probe reads: tokens[first, first + read)
    if (!result.token_probability.empty()) {
      hide_unread_tokens(l, read > 0 ? tokens[static_cast<size_t>(first)] : 0,
                         read > 0 ? tokens[static_cast<size_t>(first + read - 1)] + 1 : 0, result.token_probability);
    }
    for (int64_t r = 0; r < read; ++r) {
      const int64_t token = tokens[static_cast<size_t>(first + r)];
      auto& table = token < text_tokens ? result.attention[static_cast<size_t>(token)]
                                        : result.suffix_attention[static_cast<size_t>(token - text_tokens)];
      for (size_t k = 0; k < probes_[l].label_column.size(); ++k) {
        const int64_t column = probes_[l].label_column[k];
        if (column >= 0) table[l][static_cast<size_t>(column)] = mean[r][static_cast<int64_t>(k)];
      }
    }
  }
}

void Engine::steer(const steering::SteeringSpec& spec) {
  steering::SteeringSpec with_probes = spec;
  if (with_probes.probes_dir.empty()) with_probes.probes_dir = options_.probes_dir;
  steering_ = steering::resolve(with_probes, model_->config(), saes_);
  writes_ = std::make_unique<model::StreamWrites>(steering::place(steering_, *model_));
  request_.writes = writes_->empty() ? nullptr : writes_.get();
}

std::vector<GeneratedText> Engine::generate(const std::vector<std::string>& prompts,
                                            const generation::GenerationOptions& options,
                                            const ScoredTokenCallback& on_token, bool add_special_tokens) const {
  if (!options_.generate) fail_input("the engine was loaded for ranking, without the LM head");
  require_texts();  // a chat's prompt comes with its mask, through generate_monitored
  // Streams read each new token's latents in its own pass (StreamBatch); they give the tokens generate gives.
  if (!saes_.empty() && options.writes == nullptr) return generate_monitored(prompts, options, nullptr, on_token, add_special_tokens);
  std::vector<GeneratedText> texts(prompts.size());
  std::vector<readout::Sequence> ids;
  std::vector<TextStream> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    texts[i].prompt_ids = tokenizer_->encode(prompts[i], add_special_tokens);
    warn_past_limit(texts[i].prompt_ids, options.max_new_tokens);
    ids.push_back(texts[i].prompt_ids);
    streams.emplace_back(*tokenizer_, texts[i].prompt_ids);
  }
  generation::ProbeReadout probes{request_, prompts_->suffix_ids(),
                                  [this](const at::Tensor& rows) { return probabilities_of(rows); }};
  // Every-token probes pool the whole text so far: each new token's prompt is read whole (below), not by the
  // generation's passes, which read the last token only.
  const bool whole_prompts = reads_every_token();
  const generation::ProbeReadout* readout = probes_.empty() || whole_prompts ? nullptr : &probes;
  generation::GenerationOptions steered = options;
  if (steered.writes == nullptr) steered.writes = request_.writes;
  std::vector<readout::Sequence> so_far = ids;
  // --batch-size prompts at a time bound the cache's memory; rows keep their index among all prompts.
  auto batch_size = static_cast<size_t>(std::max<int64_t>(1, options_.batch_size));
  for (size_t first = 0; first < prompts.size(); first += batch_size) {
    const size_t end = std::min(prompts.size(), first + batch_size);
    std::vector<readout::Sequence> batch(ids.begin() + static_cast<std::ptrdiff_t>(first),
                                         ids.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<generation::Generation> generated =
        generation::generate(*model_, batch, steered.rows(first, end), readout, [&](const generation::GeneratedToken& token) {
          const size_t row = first + token.row;
          ScoredToken scored{row, token.index, token.position, token.id, tokenizer_->tokens({token.id}).front(),
                             streams[row].add(token.id, token.last), token.last, {}};
          std::vector<std::vector<std::vector<double>>> table = empty_tables(1);
          so_far[row].push_back(token.id);
          if (readout != nullptr) store_columns(token.rows.unsqueeze(0), table, 0);
          if (whole_prompts) {
            at::Tensor own;  // ema and rolling probes: the new token's own score
            store_columns(prompt_probabilities({so_far[row]}, steered.writes, false, &own), table, 0);
            if (own.defined()) scored.token_probability = column_table(own[0]);
          }
          scored.probability = std::move(table.front());
          texts[row].text += scored.text;
          return on_token(scored);
        });
    for (size_t i = first; i < end; ++i) {
      texts[i].ids = generated[i - first].ids;
      texts[i].stop = generated[i - first].stop;
      texts[i].text += streams[i].flush();  // byte tokens held back when a callback stopped the row
    }
  }
  return texts;
}

}  // namespace probekit::inference
