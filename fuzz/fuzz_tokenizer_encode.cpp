// Encoding arbitrary text (any bytes, invalid UTF-8 included) with the fixture tokenizers, one per pipeline
// shape in use (byte-level BPE of GPT-2, Llama 3 and Qwen; SentencePiece-style BPE of Llama 2 and Gemma): the
// first byte picks the tokenizer and whether special tokens are added. Every id must be inside the vocabulary
// and have a token string, and decoding must not fail.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

const std::vector<std::unique_ptr<tokenizer::Tokenizer>>& fixture_tokenizers() {
  static const auto tokenizers = [] {
    std::vector<std::unique_ptr<tokenizer::Tokenizer>> all;
    for (const char* name : {"bytelevel_gpt2", "bytelevel_llama3", "bytelevel_qwen", "spm_llama2", "spm_gemma"}) {
      std::string path = std::string(PROBEKIT_FIXTURES) + "/tokenizers/" + name + "/tokenizer.json";
      all.push_back(std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(path)));
    }
    return all;
  }();
  return tokenizers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& tokenizers = fixture_tokenizers();
  const tokenizer::Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
  bool add_special_tokens = (data[0] / tokenizers.size()) % 2 == 0;
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<int32_t> ids = tok.encode(text, add_special_tokens);
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) fuzz::finding("an id outside the vocabulary");
  }
  tok.tokens(ids);
  tok.decode(ids, true);
  tok.decode(ids, false);
  return 0;
}
