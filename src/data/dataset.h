// Labelled texts from JSONL, one object per line, in the reference's two formats (text + cognitive_action,
// or text + sentiment) or with fields named by the user; or labelled conversations, a row's "messages" (the OpenAI
// chat format) in place of its text. Errors name the file, the line and the field; with
// skip_invalid the bad lines are counted and reported instead.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace probekit::data {

/// The deepest a field the reader uses (label, kept fields, messages, tools) may nest arrays and objects: storing or
/// printing a value (Json::dump) recurses once per level, and 200,000 levels overflowed the stack.
constexpr int kMaxFieldDepth = 256;

struct DatasetOptions {
  std::string text_field = "text";
  std::string label_field;               // empty: cognitive_action, or sentiment when the file has that
  std::vector<std::string> keep_fields;  // extra fields kept as metadata columns
  int64_t max_examples = 0;              // 0: all
  bool skip_invalid = false;
  bool strict_fields = false;            // a keep_fields field that no line has: an error, not a warning
};

/// A labelled stretch of a conversation row's message, from its "spans": [{"message", "start", "end", "label"}]
/// (start and end in characters of the message's content, as Python indexes a str), here in bytes of that content.
struct LabelledSpan {
  size_t message = 0;
  size_t begin = 0, end = 0;  // bytes of the content, [begin, end)
  std::string label;
};

struct Example {
  int64_t line = 0;  // 0-based line of the example in the file
  std::string text;      // a text row's text
  std::string messages;  // a conversation row's "messages" with any "tools" (chat::conversation_text), as JSON text
  std::vector<LabelledSpan> spans;  // a conversation row's token-level labels; tokens outside them take `label`
  std::string label;
  std::vector<std::string> kept;  // values of keep_fields, in order ("" when absent)
};

struct SkippedLine {
  int64_t line = 0;  // 0-based
  std::string reason;
};

struct Dataset {
  std::string path;          // as given: "-" for standard input
  bool from_stream = false;  // read from standard input, a pipe or a FIFO: it cannot be read again (no --resume)
  std::string sha256;        // of the bytes read, for the outputs' dataset_sha256: a stream cannot be reopened
  std::string label_field;
  bool conversations = false;  // rows hold "messages" (conversations) instead of texts; a file holds one kind
  bool labelled_spans = false;  // some row has "spans": position all stores each read token's label
  bool integer_labels = false;  // the labels are JSON integers (class ids), not strings: a file holds one kind
  std::vector<Example> examples;
  // The sorted distinct labels (integer labels sorted as numbers, as Python sorts ints); all 45 of the reference's
  // actions for its cognitive-action datasets (uses_reference_label_names), as the reference indexes them.
  std::vector<std::string> label_names;
  std::vector<int64_t> labels;           // index into label_names, per example
  std::vector<SkippedLine> skipped;
};

/// Indexes the examples' labels again (label_names, labels, labelled_spans), after examples were dropped.
void reindex_labels(Dataset& dataset);

/// The label of each token of a rendered conversation (byte spans `token_bytes`) that overlaps one of the example's
/// spans (the first), else the row's: indexes into `label_names`. `content_begin[m]`: where message m's content
/// starts in the rendered text, npos where it is not there as written (a span on such a message is refused).
std::vector<int64_t> token_labels(const Example& example, const std::vector<std::string>& label_names,
                                  const std::vector<std::pair<size_t, size_t>>& token_bytes,
                                  const std::vector<size_t>& content_begin);

/// Why `label` cannot name the files training writes for it (probe_{label}.safetensors, metrics_{label}.json):
/// empty, "." or "..", a '/' or NUL in it, or too long for a file name; "" when it can.
std::string label_file_name_problem(const std::string& label);

/// Throws naming the labels when one of them cannot name a file, or when two would name the same file on a
/// case-insensitive file system (macOS, Windows): "Analyzing" and "analyzing". Checked at capture, so that
/// training never overwrites one label's probe with another's.
void check_label_file_names(const std::vector<std::string>& label_names, const std::string& source);

/// Reads a JSONL dataset from a file, from standard input ("-"), or from a pipe or FIFO (`<(zcat d.jsonl.gz)`),
/// each read whole, once; throws std::invalid_argument naming file, line and field on bad input (a label neither a
/// string nor an integer, labels of both kinds in one file, a field read that nests deeper than kMaxFieldDepth, ...)
/// unless skip_invalid, and when no example remains.
Dataset read_dataset(const std::string& path, const DatasetOptions& options);
/// Throws as read_dataset does when nothing is at `path` ("-": standard input), for a run to check before it makes
/// its outputs.
void require_dataset(const std::string& path);

}  // namespace probekit::data
