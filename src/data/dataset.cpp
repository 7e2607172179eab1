#include "data/dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "chat/conversation.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/utf8_text.h"
#include "data/reference_labels.h"

namespace probekit::data {

namespace {

constexpr const char* kStandardInput = "-";
constexpr const char* kMessagesField = "messages";     // a conversation row's messages, in place of its text

// A label may be written as a string or as an integer class id, kept as its decimal digits.
bool label_text(const Json& value, std::string* out) {
  if (value.is_string()) {
    *out = value.get<std::string>();
    return true;
  }
  if (value.is_number_unsigned()) {  // up to 2^64 - 1, which an int64 would wrap
    *out = std::to_string(value.get<uint64_t>());
    return true;
  }
  if (value.is_number_integer()) {
    *out = std::to_string(value.get<int64_t>());
    return true;
  }
  return false;
}

// Python's order of integers written in decimal without leading zeros: -10 < -2 < 1 < 2 < 10, whatever their size.
bool integer_text_less(const std::string& a, const std::string& b) {
  const bool a_negative = a[0] == '-', b_negative = b[0] == '-';
  if (a_negative != b_negative) return a_negative;
  auto magnitude_less = [](const std::string& x, const std::string& y) {
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  };
  return a_negative ? magnitude_less(b.substr(1), a.substr(1)) : magnitude_less(a, b);
}

// Refuses the row's field `field` when its arrays and objects nest deeper than kMaxFieldDepth, walking it with a
// stack of its own: the walk must not recurse where the dump it guards would.
void check_depth(const Json& value, const std::string& field, const std::string& where) {
  std::vector<std::pair<const Json*, int>> pending{{&value, 1}};
  while (!pending.empty()) {
    const auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    if (depth > kMaxFieldDepth) {
      fail_input("{}: field '{}' nests arrays and objects more than {} levels deep", where, field, kMaxFieldDepth);
    }
    for (const Json& child : *node) pending.emplace_back(&child, depth + 1);
  }
}

std::string field_list(const Json& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return fmt::format("{}", fmt::join(keys, ", "));
}

std::string choose_label_field(const Json& first, const DatasetOptions& options, const std::string& where) {
  if (!options.label_field.empty()) return options.label_field;
  // The reference decides from the first line, sentiment first.
  if (first.contains("sentiment")) return "sentiment";
  if (first.contains("cognitive_action")) return "cognitive_action";
  fail_input("{}: unknown label field: the first example has neither 'cognitive_action' nor 'sentiment' (its fields: "
             "{}); name the label with --label-field",
             where, field_list(first));
}

// A UTF-8 byte-order mark (as some editors write) is skipped; a UTF-16 or UTF-32 file is refused: JSONL is UTF-8.
void skip_byte_order_mark(std::string& first_line, const std::string& path) {
  first_line = std::string(without_byte_order_mark(first_line));
  bool wide = first_line.size() >= 2 && (first_line[0] == '\0' || first_line[1] == '\0');  // UTF-16/32 without a mark
  if (first_line.rfind("\xFF\xFE", 0) == 0 || first_line.rfind("\xFE\xFF", 0) == 0 || wide) {
    fail_input("{}: the file is UTF-16 or UTF-32 text (a byte-order mark or NUL bytes in its first line); "
               "JSONL must be UTF-8: save it as UTF-8",
               path);
  }
}

// The object on one line; a line that is not one is an error naming `where`.
Json parse_line(const std::string& line, const std::string& where) {
  Json object;
  try {
    object = Json::parse(line);
  } catch (const Json::parse_error& e) {
    std::string detail = e.what();
    if (detail.find("UTF-8") != std::string::npos) fail_input("{}: the line is not valid UTF-8 text", where);
    fail_input("{}: invalid JSON at column {}: {}", where, e.byte, detail.substr(detail.find(':') + 2));
  } catch (const Json::out_of_range& e) {  // a number beyond a double's range, as 1e400
    std::string detail = e.what();
    fail_input("{}: invalid JSON: {}", where, detail.substr(detail.find("] ") + 2));
  }
  if (!object.is_object()) fail_input("{}: expected a JSON object, found {}", where, object.type_name());
  return object;
}

// The byte where character `characters` of UTF-8 `text` starts (its size at the end); npos past the end.
size_t byte_of_character(const std::string& text, int64_t characters) {
  int64_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (seen++ == characters) return i;
  }
  return seen == characters ? text.size() : std::string::npos;
}

// A conversation row's "spans", checked against its messages: each within a message whose content is a string.
std::vector<LabelledSpan> read_spans(const Json& spans, const Json& messages, const std::string& where) {
  if (!spans.is_array()) fail_input("{}: field 'spans' must be a list of {{message, start, end, label}}", where);
  std::vector<LabelledSpan> out;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Json& span = spans[i];
    const std::string field = fmt::format("{}: spans[{}]", where, i);
    auto integer = [&](const char* key) {
      if (!span.is_object() || !span.contains(key) || !span[key].is_number_integer() || span[key].get<int64_t>() < 0) {
        fail_input("{}: '{}' must be a whole number, 0 or more", field, key);
      }
      return span[key].get<int64_t>();
    };
    const int64_t message = integer("message"), start = integer("start"), end = integer("end");
    if (static_cast<size_t>(message) >= messages.size()) {
      fail_input("{}: 'message' {} is past the conversation's {} messages", field, message, messages.size());
    }
    const Json& entry = messages[static_cast<size_t>(message)];
    const Json content = entry.is_object() ? entry.value("content", Json()) : Json();
    if (!content.is_string()) fail_input("{}: message {}'s content is not a string, which spans index", field, message);
    const std::string& text = content.get_ref<const std::string&>();
    const size_t begin = byte_of_character(text, start), stop = byte_of_character(text, end);
    if (start >= end || stop == std::string::npos) {
      fail_input("{}: characters [{}, {}) are not a stretch of message {}'s content", field, start, end, message);
    }
    if (!span.contains("label") || !span["label"].is_string() || span["label"].get<std::string>().empty()) {
      fail_input("{}: 'label' must be a non-empty string", field);
    }
    out.push_back(LabelledSpan{static_cast<size_t>(message), begin, stop, span["label"].get<std::string>()});
  }
  return out;
}

// One line's example; `dataset.label_field` is chosen from the first line.
// A row's text, or its conversation: "messages" where the row has no text field. The first row decides which kind
// the file holds; a row of the other kind is an error naming its line.
void read_input(const Json& object, const std::string& line, const DatasetOptions& options, Dataset& dataset,
                const std::string& where, Example& example) {
  auto text = object.find(options.text_field);
  auto messages = object.find(kMessagesField);
  const bool conversation = text == object.end() && messages != object.end();
  if (dataset.examples.empty()) dataset.conversations = conversation;
  if (conversation != dataset.conversations) {
    fail_input("{}: this row holds {}, the rows before it {}: a dataset holds texts or conversations, not both", where,
               conversation ? "'messages' (a conversation)" : "a text", conversation ? "texts" : "conversations");
  }
  if (conversation) {
    check_depth(*messages, kMessagesField, where);
    if (!messages->is_array() || messages->empty()) {
      fail_input("{}: field '{}' must be a non-empty list of messages, found {}", where, kMessagesField,
                 messages->dump().substr(0, 80));
    }
    // The tools a row offers the model go to the template with its messages (checked where they are rendered).
    auto tools = object.find("tools");
    const bool offers_tools = tools != object.end() && !tools->is_null();
    if (offers_tools) check_depth(*tools, "tools", where);
    // Read again keeping the line's key order, which a template's tojson prints (a tool's schema, a call's arguments).
    const OrderedJson ordered = parse_ordered_json(line, where, {kMessagesField, "tools"});
    example.messages = chat::conversation_text({ordered.at(kMessagesField), offers_tools ? ordered.at("tools") : nullptr});
    auto spans = object.find("spans");
    if (spans != object.end()) example.spans = read_spans(*spans, *messages, where);
    return;
  }
  if (object.contains("spans")) fail_input("{}: 'spans' label the messages of a conversation; this row holds a text", where);
  if (text == object.end()) {
    fail_input("{}: missing field '{}' (fields: {}; choose another with --text-field, or give a conversation as "
               "'messages')",
               where, options.text_field, field_list(object));
  }
  if (!text->is_string()) fail_input("{}: field '{}' must be a string, found {}", where, options.text_field, text->type_name());
  example.text = text->get<std::string>();
  if (example.text.find_first_not_of(" \t\r\n") == std::string::npos) {
    fail_input("{}: field '{}' is empty", where, options.text_field);
  }
}

// Labels are strings or integers, as the first row's is: the reference orders them with sorted(set(labels)), which
// raises for the two kinds together (and here 1 and "1" became one label). Span labels are strings, so a row with
// spans takes a string label.
void check_label_kind(bool integer, const Example& example, Dataset& dataset, const std::string& where) {
  if (dataset.examples.empty()) dataset.integer_labels = integer;
  if (integer != dataset.integer_labels) {
    fail_input("{}: label field '{}' holds {}, the rows before it {}: labels are strings or integers, not both",
               where, dataset.label_field, integer ? "an integer" : "a string", integer ? "strings" : "integers");
  }
  if (integer && !example.spans.empty()) {
    fail_input("{}: this row's label is an integer and its 'spans' label tokens with strings: labels are strings or "
               "integers, not both",
               where);
  }
}

Example read_example(const Json& object, const std::string& line, const DatasetOptions& options, Dataset& dataset,
                     const std::string& where) {
  if (dataset.label_field.empty()) dataset.label_field = choose_label_field(object, options, where);
  Example example;
  read_input(object, line, options, dataset, where, example);
  auto label = object.find(dataset.label_field);
  if (label == object.end()) {
    fail_input("{}: missing label field '{}' (fields: {})", where, dataset.label_field, field_list(object));
  }
  check_depth(*label, dataset.label_field, where);
  // A label of blanks alone names no concept (regression: "  " was taken as one, its probe file named by spaces).
  if (!label_text(*label, &example.label) || example.label.find_first_not_of(" \t\r\n\f\v") == std::string::npos) {
    fail_input("{}: label field '{}' must be a string with more than blanks, or an integer, found {}", where,
               dataset.label_field, label->dump());
  }
  check_label_kind(label->is_number_integer(), example, dataset, where);
  for (const std::string& field : options.keep_fields) {
    auto value = object.find(field);
    if (value != object.end()) check_depth(*value, field, where);
    example.kept.push_back(value == object.end() ? "" : value->is_string() ? value->get<std::string>() : value->dump());
  }
  return example;
}

// A kept field that no example has gives an empty column: most likely a misspelt name, worth a word.
void check_kept_fields(const std::vector<bool>& found, const std::string& first_fields, const DatasetOptions& options,
                       const std::string& source) {
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i]) continue;
    if (options.strict_fields) {
      fail_input("{}: no example has the field '{}' that --keep-fields names (fields of the first example: {}); check "
                 "the name",
                 source, options.keep_fields[i], first_fields);
    }
    spdlog::warn("{}: no example has the field '{}' that --keep-fields names, so its column is empty (fields of the "
                 "first example: {}); --strict makes this an error",
                 source, options.keep_fields[i], first_fields);
  }
}

// The examples of the JSONL text `bytes`, named `source` in messages.
void read_examples(const std::string& bytes, const std::string& source, const DatasetOptions& options, Dataset& dataset) {
  std::vector<bool> kept_found(options.keep_fields.size(), false);
  std::string first_fields;
  size_t start = 0;
  for (int64_t number = 0; start < bytes.size(); ++number) {
    size_t end = std::min(bytes.find('\n', start), bytes.size());
    std::string line = bytes.substr(start, end - start);
    start = end + 1;
    if (options.max_examples > 0 && static_cast<int64_t>(dataset.examples.size()) >= options.max_examples) break;
    if (number == 0) skip_byte_order_mark(line, source);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string where = fmt::format("{}:{}", source, number + 1);
    try {
      Json object = parse_line(line, where);
      Example example = read_example(object, line, options, dataset, where);
      example.line = number;
      dataset.examples.push_back(std::move(example));
      if (first_fields.empty()) first_fields = field_list(object);
      for (size_t i = 0; i < kept_found.size(); ++i) kept_found[i] = kept_found[i] || object.contains(options.keep_fields[i]);
    } catch (const std::invalid_argument& e) {
      if (!options.skip_invalid) throw;
      dataset.skipped.push_back(SkippedLine{number, e.what()});
    }
  }
  if (!dataset.examples.empty()) check_kept_fields(kept_found, first_fields, options, source);
}

// Indexes the examples' labels (see Dataset::label_names).
void index_labels(Dataset& dataset) {
  std::set<std::string> present;
  for (const Example& example : dataset.examples) {
    present.insert(example.label);
    for (const LabelledSpan& span : example.spans) present.insert(span.label);
    dataset.labelled_spans = dataset.labelled_spans || !example.spans.empty();
  }
  // The reference's trainer names a cognitive-action file's labels by its fixed list of 45, so such a file
  // indexes that list, whatever subset it holds; other datasets index their sorted distinct labels.
  if (uses_reference_label_names(dataset.label_field, present)) {
    dataset.label_names = reference_label_names();
  } else {
    dataset.label_names.assign(present.begin(), present.end());
    // As the reference's sorted() orders ints: 1, 2, 10, not "1", "10", "2".
    if (dataset.integer_labels) std::sort(dataset.label_names.begin(), dataset.label_names.end(), integer_text_less);
  }
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < dataset.label_names.size(); ++i) index.emplace(dataset.label_names[i], static_cast<int64_t>(i));
  for (const Example& example : dataset.examples) dataset.labels.push_back(index.at(example.label));
}

// A cognitive-action dataset whose labels are partly the reference's 45: most likely a misspelt label, which moves the
// whole file from the reference's indexing to its sorted distinct labels. A dataset of other actions under that
// field (none of the 45) is indexed as any other, without a word.
void check_cognitive_actions(const Dataset& dataset, const DatasetOptions& options, const std::string& source) {
  const std::vector<std::string>& names = reference_label_names();
  if (dataset.label_field != "cognitive_action" || dataset.label_names == names) return;
  std::set<std::string> unknown;
  for (const std::string& label : dataset.label_names) {
    if (!std::binary_search(names.begin(), names.end(), label)) unknown.insert(label);
  }
  if (unknown.size() == dataset.label_names.size()) return;
  std::vector<std::string> shown;
  size_t more = 0;
  for (const Example& example : dataset.examples) {
    if (unknown.erase(example.label) == 0) continue;
    if (shown.size() < 5) {
      shown.push_back(fmt::format("'{}' (line {})", example.label, example.line + 1));
    } else {
      ++more;
    }
  }
  for (const std::string& label : unknown) {  // labels of spans only
    if (shown.size() < 5) {
      shown.push_back(fmt::format("'{}' (a span's)", label));
    } else {
      ++more;
    }
  }
  const std::string message = fmt::format(
      "{}: {}{} {} not among the reference's 45 cognitive actions, while the file's other labels are; so its labels "
      "are indexed as a custom dataset's (sorted), not as the reference indexes them: check their spelling",
      source, fmt::join(shown, ", "), more == 0 ? "" : fmt::format(" and {} more", more),
      shown.size() + more == 1 ? "is" : "are");
  if (options.strict_fields) fail_input("{}", message);
  spdlog::warn("{} (--strict makes this an error)", message);
}

// The dataset's bytes, read once: standard input for "-", else the file, pipe or FIFO at `path`.
InputBytes read_dataset_bytes(const std::string& path) {
  require_dataset(path);
  return read_flag_input(path, "--dataset");
}

}  // namespace

void require_dataset(const std::string& path) {
  if (path != kStandardInput && !path_exists(path)) fail_input("{}: cannot open the dataset: no such file", path);
}

Dataset read_dataset(const std::string& path, const DatasetOptions& options) {
  InputBytes input = read_dataset_bytes(path);
  Dataset dataset;
  dataset.path = path;
  dataset.from_stream = input.from_stream;
  Sha256 hash;
  hash.update(input.bytes);
  dataset.sha256 = hash.hex_digest();
  std::string source = input_name(path);
  read_examples(input.bytes, source, options, dataset);
  if (dataset.examples.empty()) {
    fail_input("{}: the dataset has no usable examples{}", source,
               dataset.skipped.empty() ? "" : fmt::format(" ({} invalid lines skipped)", dataset.skipped.size()));
  }
  index_labels(dataset);
  check_cognitive_actions(dataset, options, source);
  return dataset;
}

void reindex_labels(Dataset& dataset) {
  dataset.label_names.clear();
  dataset.labels.clear();
  dataset.labelled_spans = false;
  index_labels(dataset);
}

std::vector<int64_t> token_labels(const Example& example, const std::vector<std::string>& label_names,
                                  const std::vector<std::pair<size_t, size_t>>& token_bytes,
                                  const std::vector<size_t>& content_begin) {
  auto index = [&](const std::string& label) {
    return static_cast<int64_t>(std::find(label_names.begin(), label_names.end(), label) - label_names.begin());
  };
  const int64_t row_label = index(example.label);
  std::vector<int64_t> labels(token_bytes.size(), row_label);
  for (const LabelledSpan& span : example.spans) {
    if (content_begin.at(span.message) == std::string::npos) {
      fail_input("a span labels messages[{}], whose content is not in the rendered conversation as written (the chat "
                 "template rewrites it), so its characters cannot be placed", span.message);
    }
  }
  for (size_t t = 0; t < token_bytes.size(); ++t) {
    for (const LabelledSpan& span : example.spans) {
      const size_t begin = content_begin.at(span.message) + span.begin, end = content_begin.at(span.message) + span.end;
      if (token_bytes[t].first < end && token_bytes[t].second > begin) {
        labels[t] = index(span.label);
        break;
      }
    }
  }
  return labels;
}

std::string label_file_name_problem(const std::string& label) {
  // 255 bytes is the common file-name limit; "metrics_" + ".json" and "probe_" + ".safetensors" surround it.
  constexpr size_t kLongest = 255 - 18;
  if (label.empty()) return "it is empty";
  if (label == "." || label == "..") return "it is '.' or '..'";
  if (label.find('/') != std::string::npos) return "it holds a '/'";
  if (label.find('\0') != std::string::npos) return "it holds a NUL character";
  if (label.size() > kLongest) return fmt::format("it is {} bytes long (at most {})", label.size(), kLongest);
  return "";
}

void check_label_file_names(const std::vector<std::string>& label_names, const std::string& source) {
  std::map<std::string, std::string> by_folded;
  for (const std::string& label : label_names) {
    std::string problem = label_file_name_problem(label);
    if (!problem.empty()) {
      fail_input("{}: label '{}' cannot name the probe file training writes for it: {}; rename it in the dataset",
                 source, label, problem);
    }
    std::string folded = label;
    for (char& c : folded) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto [it, added] = by_folded.emplace(folded, label);
    if (!added) {
      fail_input("{}: labels '{}' and '{}' differ only in case, so their probe files would be one file on a "
                 "case-insensitive file system; rename one in the dataset",
                 source, it->second, label);
    }
  }
}

}  // namespace probekit::data
