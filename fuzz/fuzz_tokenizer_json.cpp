// tokenizer.json loading on arbitrary bytes: the file is refused with a message naming the place, or the
// tokenizer it gives encodes and decodes a fixed set of texts without crashing, every id it produces has a
// token string, and decoding never fails.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

// Texts that reach every stage: plain words, spaces and newlines, added-token lookalikes, digits and
// punctuation, accents, CJK and emoji, and bytes that are not UTF-8.
const std::vector<std::string> kTexts = {
    "",
    "Hello world",
    "  leading and trailing  \n\n",
    "<s> <|im_start|>user\n<bos>[CLS]</s>",
    "12345 3.14 e=mc^2 !!! ???",
    "Caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80",
    std::string("\xff\xfe\x80 a\0b", 8),
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  std::optional<tokenizer::Tokenizer> tok;
  if (!fuzz::completes_or_refuses_cleanly([&] { tok = tokenizer::Tokenizer::from_json(json, "tokenizer.json"); })) {
    return 0;
  }
  for (const std::string& text : kTexts) {
    for (bool special : {true, false}) {
      std::vector<int32_t> ids;
      if (!fuzz::completes_or_refuses_cleanly([&] { ids = tok->encode(text, special); })) continue;
      fuzz::completes_or_refuses_cleanly([&] { tok->tokens(ids); });
      tok->decode(ids, false);
      tok->decode(ids, true);
    }
  }
  tok->vocab_size();
  tok->bos_id();
  return 0;
}
