// The JSONL dataset reader on arbitrary bytes, under the option combinations the tools pass (the first byte
// picks them): it refuses the file naming the line and the field, or returns examples whose labels index the
// sorted, distinct label names, with one kept value per --keep-fields entry.
#include <algorithm>
#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "fuzz_util.h"

using namespace probekit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string path = fuzz::scratch_path("dataset.jsonl");
  fuzz::write_bytes(path, data + 1, size - 1);
  data::DatasetOptions options;
  uint8_t choice = data[0];
  options.skip_invalid = (choice & 1) != 0;
  if ((choice & 2) != 0) options.keep_fields = {"domain", "text"};
  if ((choice & 4) != 0) options.label_field = (choice & 8) != 0 ? "label" : "sentiment";
  if ((choice & 16) != 0) options.text_field = "content";
  if ((choice & 32) != 0) options.max_examples = 3;

  data::Dataset dataset;
  if (!fuzz::completes_or_refuses_cleanly([&] { dataset = data::read_dataset(path, options); })) return 0;
  if (dataset.examples.empty()) fuzz::finding("a dataset without examples was accepted");
  if (options.max_examples > 0 && static_cast<int64_t>(dataset.examples.size()) > options.max_examples) {
    fuzz::finding("more examples than max_examples");
  }
  if (dataset.labels.size() != dataset.examples.size()) fuzz::finding("one label index per example expected");
  if (!std::is_sorted(dataset.label_names.begin(), dataset.label_names.end()) ||
      std::adjacent_find(dataset.label_names.begin(), dataset.label_names.end()) != dataset.label_names.end()) {
    fuzz::finding("label names are not sorted and distinct");
  }
  for (size_t i = 0; i < dataset.examples.size(); ++i) {
    const data::Example& example = dataset.examples[i];
    if (dataset.labels[i] < 0 || static_cast<size_t>(dataset.labels[i]) >= dataset.label_names.size() ||
        dataset.label_names[static_cast<size_t>(dataset.labels[i])] != example.label) {
      fuzz::finding("a label index does not name the example's label");
    }
    if (example.text.find_first_not_of(" \t\r\n") == std::string::npos) fuzz::finding("an empty text was accepted");
    if (example.kept.size() != options.keep_fields.size()) fuzz::finding("kept values != keep_fields");
  }
  return 0;
}
